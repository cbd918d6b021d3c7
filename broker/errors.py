"""The one exception the broker launchers raise.

A launcher failure is almost always environmental (no Java, no network, a port taken), so every
message ends with what the operator should do next, and process failures carry the tail of the
broker's own log: that is where Kafka explains itself.
"""

from __future__ import annotations


class BrokerError(RuntimeError):
    """The broker could not be resolved, started, reached or controlled."""


class UnsupportedOperation(BrokerError):
    """The launcher cannot do this (e.g. SIGSTOP an external cluster)."""


class PortInUse(BrokerError):
    """A port the broker was given (a listener's, the controller's, the metrics agent's) was
    taken by someone else between its choice and the broker's bind: start again on fresh
    ones (`broker.local.on_fresh_ports`)."""


#: what a JVM that lost a port to someone else prints (Kafka's SocketServer and the JMX
#: exporter's HTTP server both end in java.net.BindException)
_PORT_IN_USE = ("Address already in use", "BindException")


def lost_a_port(log: str) -> bool:
    """Whether a broker's log says it could not bind a port it was given."""
    return any(sign in log for sign in _PORT_IN_USE)


_ERRORISH = ("ERROR", "FATAL", "Exception", "Caused by", "error:")


def tail(text: str, lines: int = 40, errors: int = 8) -> str:
    """The first few error lines, then the last ``lines`` lines, indented for a message.

    Kafka logs a long orderly shutdown after a fatal error, so the cause is rarely in the tail.
    """
    all_lines = text.splitlines()
    last = all_lines[-lines:]
    early = [
        ln for ln in all_lines[: len(all_lines) - len(last)] if any(e in ln for e in _ERRORISH)
    ]
    parts = []
    if early:
        parts.append("    (error lines)")
        parts += ["    " + ln for ln in early[:errors]]
        parts.append("    (last lines)")
    parts += ["    " + ln for ln in last]
    return "\n".join(parts)
