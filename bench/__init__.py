"""Benchmarks (not tests): run each module with `python -m bench.<name>`."""
