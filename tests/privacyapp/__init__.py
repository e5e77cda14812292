"""A test app whose model marks personal data that no subject covers.

Installed only by its own settings (``tests.privacyapp.settings``), which
``manage.py check`` must then fail: see tests/test_subjects.py.
"""
