"""Quota administration over Kafka's own protocol: a small client and `harness quotas`.

Works against the acceptor (which answers `ip` quotas and broker connection limits itself)
and against a real broker alike, because it only speaks Kafka's admin APIs.
"""
