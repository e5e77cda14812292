"""The app's template libraries (``{% load ultimate_jobs_admin %}``)."""
