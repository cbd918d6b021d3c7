"""The quota-enforcing acceptor: Kafka's connection limits (KIP-402, KIP-612) in front of a
real broker, with history rows and Prometheus metrics. See docs/acceptor.md.

Imports are lazy so that `harness --help` does not load pyarrow, kafka-python or
prometheus-client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acceptor.server import Acceptor, AcceptorHandle, start_in_thread

__all__ = ["Acceptor", "AcceptorHandle", "start_in_thread"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from acceptor import server

        return getattr(server, name)
    raise AttributeError(name)
