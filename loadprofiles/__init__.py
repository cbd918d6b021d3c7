"""Locust load profiles: one user + its arrival shape per file, plus the pieces they share.

The profile files (storm, per_request, single_ip_flood, steady) are Locust files; the
other modules are pure or gevent-friendly helpers they import. Nothing here imports
Locust at package import time, so the pure parts stay unit-testable without gevent.
"""
