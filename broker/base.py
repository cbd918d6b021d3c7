"""What every launcher hands back: a running broker you can address, fault and stop.

Chaos tests need more than start/stop: SIGSTOP makes a broker that accepts TCP but never answers
(the nastiest failure for connection limits), SIGKILL skips the clean shutdown, and a restart must
come back on the same ports so clients and the acceptor in front reconnect to the same address.
Launchers that cannot do one of these raise :class:`UnsupportedOperation` instead of pretending.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType

from kafka.errors import KafkaError

from broker.errors import BrokerError, UnsupportedOperation
from broker.probe import ProbeResult, probe


class NotReady(BrokerError):
    """The broker still runs but did not serve within the time it was given."""


class Broker:
    """A Kafka broker started (or found) by a launcher. Use as a context manager."""

    launcher: str = "abstract"

    def __init__(
        self,
        *,
        bootstrap: str,
        listener_ports: dict[str, int],
        version: str,
        log_path: Path | None = None,
        pid: int | None = None,
        workdir: Path | None = None,
    ) -> None:
        #: "127.0.0.1:PORT" of the first listener: the real port, not an advertised one
        self.bootstrap = bootstrap
        #: real port per client-facing listener name
        self.listener_ports = listener_ports
        #: the Kafka version the broker reports (e.g. "4.3.1")
        self.version = version
        self.log_path = log_path
        #: pid of the current (or last) broker process; None when there is no local process
        self.pid = pid
        self.workdir = workdir
        #: the broker's request log (`kafka.request.logger` at DEBUG, one line per completed
        #: request with its handler time), when the launcher turned it on (local only)
        self.request_log_path: Path | None = None
        #: Kafka client configuration (``client.properties``) per secured listener, and per
        #: listener and SASL mechanism (``"SASL_SSL:PLAIN"``); empty without secured listeners
        self.client_configs: dict[str, Path] = {}
        #: the run-private folder (0700) holding the secured listeners' certificates and
        #: passwords, when the launcher made one (local only; docs/security.md)
        self.private_dir: Path | None = None

    @property
    def host(self) -> str:
        return self.bootstrap.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rpartition(":")[2])

    def address(self, listener: str) -> str:
        """``"127.0.0.1:PORT"`` of a named listener."""
        return f"{self.host}:{self.listener_ports[listener.upper()]}"

    def probe(self, timeout_s: float = 5.0, listener: str | None = None) -> ProbeResult:
        """ApiVersions + Metadata against a listener (default: the first). Raises on failure."""
        port = self.listener_ports[listener.upper()] if listener else self.port
        return probe(self.host, port, timeout_s=timeout_s)

    def wait_ready(self, timeout_s: float = 60.0) -> ProbeResult:
        """Until the first listener answers ApiVersions and Metadata lists a broker.

        After :meth:`resume` a KRaft node can be fenced for a few seconds (its own controller
        saw the heartbeats stop), so chaos tests wait here rather than probing once.
        """
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while True:
            try:
                result = self.probe(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
                if result.brokers:
                    return result
                last = ConnectionError("Metadata lists no unfenced broker")
            except (OSError, TimeoutError, ConnectionError, KafkaError) as exc:
                last = exc
            gone = self._exited()  # after the probe: an exit during it is not a timeout
            if gone is not None:
                raise gone
            if time.monotonic() >= deadline:
                raise NotReady(
                    f"{self.bootstrap} not serving within {timeout_s:.0f} s (last probe: {last})"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            time.sleep(0.25)

    def _exited(self) -> BrokerError | None:
        """Why waiting for this broker is pointless (its process or container has exited),
        or None while it may still come up."""
        return None

    def stop(self) -> None:
        """Stop the broker; safe to call twice."""

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open, nothing is answered."""
        raise UnsupportedOperation(f"the {self.launcher} launcher cannot pause the broker")

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        raise UnsupportedOperation(f"the {self.launcher} launcher cannot resume the broker")

    def kill(self) -> None:
        """Kill the broker without a clean shutdown (SIGKILL)."""
        raise UnsupportedOperation(f"the {self.launcher} launcher cannot kill the broker")

    def restart(self) -> None:
        """Stop (if running) and start again on the same ports and data; waits until ready."""
        raise UnsupportedOperation(f"the {self.launcher} launcher cannot restart the broker")

    def __enter__(self) -> Broker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.launcher} {self.bootstrap} kafka {self.version}"
            f" pid={self.pid}>"
        )


class ExternalBroker(Broker):
    """An existing cluster: nothing to start or stop, only checked to answer."""

    launcher = "external"
