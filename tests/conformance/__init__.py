"""The driver conformance suite run on every driver this project ships.

Its checks live in the package (``django_ultimate_jobs.testing``), which
tests/conftest.py registers for assertion rewriting, as docs/howto/testing.md
tells a driver author to.
"""
