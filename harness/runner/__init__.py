"""`harness run`: scenarios (YAML catalog) driven end to end against the acceptor or the broker.

Modules: scenario (parse + validate, pure), schedule (timeline + limits along it, pure),
catalog (find scenarios), loadgen (Locust command lines, pure), procs (child processes
that cannot outlive the run), latency_proxy (the upstream-latency fault), targets (the
system under test), orchestrator (the run), cli / catalog_cli (the commands).
"""
