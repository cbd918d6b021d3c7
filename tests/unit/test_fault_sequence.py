"""The runner applies process faults one at a time (`FaultSchedule`): a kill due while
another broker is still down or restarting waits for it (a rolling restart keeps one node
down, however long a KRaft broker takes to come back), lasts its own `for` from when it
starts, and an end that is not the running fault's own restarts nothing. Fake brokers, no
process; the restart's thread is held until the test lets it finish."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from harness.runner import catalog
from harness.runner.orchestrator import Orchestrator, RunOptions


class _Broker:
    def __init__(self, node: int, log: list[tuple[str, int]], gate: threading.Event) -> None:
        self.node, self.log, self.gate = node, log, gate

    def kill(self) -> None:
        self.log.append(("kill", self.node))

    def restart(self) -> None:
        self.gate.wait(10)
        self.log.append(("restart", self.node))


class _Kafka:
    def __init__(self, log: list[tuple[str, int]], gate: threading.Event) -> None:
        self.brokers = {n: _Broker(n, log, gate) for n in (1, 2, 3)}

    def node(self, node_id: int | None) -> _Broker:
        return self.brokers[int(node_id or 1)]


class _Target:
    fronts = None

    def __init__(self, log: list[tuple[str, int]], gate: threading.Event) -> None:
        self.kafka = _Kafka(log, gate)

    def supports_fault(self, kind: str) -> str | None:
        return None


def _kill(node: int, at: float) -> dict[str, Any]:
    return {"kind": "broker_kill", "broker": node, "for": 0.0, "at": at}


def test_a_kill_waits_while_another_broker_is_down_or_restarting(tmp_path: Path) -> None:
    said: list[str] = []
    orch = Orchestrator(catalog.load("rolling-restart"), RunOptions("broker", out=tmp_path),
                        said.append)  # fmt: skip
    log: list[tuple[str, int]] = []
    gate = threading.Event()
    faults = orch.faults
    faults.target = _Target(log, gate)  # type: ignore[assignment]
    first, second, third = _kill(1, 5), _kill(2, 19), _kill(3, 33)

    faults.start(first, 5)
    faults.start(second, 19)  # broker 1 still down: waits
    assert log == [("kill", 1)] and faults.deferred_starts == [second]
    faults.end(first, 20)  # broker 1's end: its restart begins
    faults.start_deferred(20)
    assert log == [("kill", 1)], "no kill while broker 1 restarts"
    gate.set()
    faults.wait_restart()
    assert log == [("kill", 1), ("restart", 1)]

    faults.start_deferred(28)  # broker 1 is back: broker 2's kill starts now, for its `for`
    assert log[-1] == ("kill", 2) and faults.deferred_starts == []
    assert faults.deferred_ends == [(28.0, second)]
    faults.end(first, 29)  # a stale end restarts nothing
    assert faults.restart is None and log[-1] == ("kill", 2)
    faults.start(third, 33)
    assert faults.deferred_starts == [third]
    faults.end(second, 34)
    faults.wait_restart()
    assert log[-1] == ("restart", 2)

    faults.start_deferred(orch.duration)  # the load has ended: the third never starts
    assert log[-1] == ("restart", 2) and faults.deferred_starts == []
    assert any("never started" in s for s in said), said
