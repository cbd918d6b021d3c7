"""The bottom floor: contracts every part shares, importing nothing of the project above.

``history``
    the history's events, schema, writers and clocks (one definition per event).
``wire``
    Kafka's wire protocol as the acceptor and the load side speak it.
``quota``
    the quota engine: Kafka's connection and request quotas as pure code.
``security``
    per-run TLS and SASL material, its masking, and the client side of both (``client``).
``admin``
    the admin wire client (quota and config changes against a live cluster).
``supervisor``
    every child process (brokers, ZooKeeper, HAProxy, Locust, the analysis) and whatever
    must stop before the harness exits: one registry, one kill path.
``localnet``, ``procfs``, ``javaprops``, ``javapath``
    loopback addresses and ports, /proc readings, Java properties text, the Java to run.

Nothing here imports ``acceptor``, ``broker``, ``loadprofiles``, ``analysis`` or ``harness``
(tests/unit/test_floors.py).
"""
