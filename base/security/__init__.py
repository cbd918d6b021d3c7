"""Per-run TLS and SASL material for secured Kafka listeners, and the masking of its secrets.

``certs``
    a throwaway CA, the broker's and the client's certificates (PKCS#8 keys), and two bad
    certificates (expired, wrong host) for bad-input tests; needs the ``cryptography`` package.
``sasl``
    SASL users with random per-run passwords; the broker's and clients' JAAS text; the
    ``kafka-storage format --add-scram`` arguments.
``material``
    ``RunSecurity``: one run's certificates and users, written to a 0700 private folder.
``clientprops``
    Kafka's client keys (``client.properties``): written, read, mapped onto kafka-python.
``client``
    the client side: a TLS context and the SASL exchange over a raw socket, for the
    load profiles and the admin client.
``secrets``
    the one place secrets are masked (text, properties, JSON, log records) and the private
    folder's helpers.

Nothing here starts a process or opens a socket; ``broker`` uses it to start brokers
with secured listeners (docs/security.md).
"""
