"""Maintenance: retention sweeps and partition maintenance.

``retention`` deletes finished jobs (with their steps), expired events and
old counter buckets in short batches; ``partitions`` keeps the partitions
of apps' range-partitioned tables ahead of time and drops expired ones;
``builtin`` declares the two jobs that run them. Public names are
re-exported from ``django_ultimate_jobs``.
"""
