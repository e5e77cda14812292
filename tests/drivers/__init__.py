"""Drivers defined in the test tree (named by dotted path in settings)."""
