"""The storm engine's heartbeat, with a fake clock and a fake epoll: which iterations are
measured stalls, and the stretch each `loop_lag` row names (no socket, no real time)."""

from __future__ import annotations

import json
from typing import Any

from base.history.events import conformance
from base.history.rows import FIELDS, Row
from loadprofiles.engine import PERIOD_NS, THRESHOLD_NS, EngineConfig, StormEngine

MS = 1_000_000


class Rows:
    """A stand-in for ClientHistory: the rows as the engine writes them."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, row: Row) -> None:
        keep = ("event", "mono_ns", "conn_id", "listener", "client_id", "reason", "latency_ms")
        r = dict(zip(FIELDS, row, strict=True))
        self.rows.append({k: r[k] for k in (*keep, "detail")})

    def seal(self) -> None:
        pass


class Loop:
    """A fake clock and epoll: each poll sleeps its timeout plus the overrun given for that
    call (the loop descheduled), then the engine is stopped after the last one."""

    def __init__(self, overruns_ns: list[int]) -> None:
        self.now = 1_000 * MS
        self.overruns = list(overruns_ns)
        self.engine: StormEngine | None = None

    def clock(self) -> int:
        return self.now

    def poll(self, timeout_s: float) -> list[Any]:
        self.now += round(timeout_s * 1e9) + self.overruns.pop(0)
        if not self.overruns and self.engine is not None:
            self.engine.stop()
        return []

    def close(self) -> None:
        pass


def run(overruns_ns: list[int]) -> tuple[Loop, list[dict[str, Any]]]:
    loop = Loop(overruns_ns)
    rows = Rows()
    engine = StormEngine(
        EngineConfig(host="127.0.0.1", port=9), rows, conn_prefix="c7-", clock=loop.clock
    )
    loop.engine = engine
    engine._ep.close()
    engine._ep = loop
    # one arrival far beyond the test, so the loop polls its whole period each time
    engine.run([(0, 3600.0)], loop.now)
    return loop, [r for r in rows.rows if r["event"] == "loop_lag"]


def test_a_quiet_loop_writes_only_its_start_row() -> None:
    _, lags = run([0] * 10)
    assert [r["reason"] for r in lags] == ["start"]
    start = json.loads(lags[0]["detail"])
    assert start == {
        "engine": "c7-",
        "period_ms": PERIOD_NS / MS,
        "threshold_ms": THRESHOLD_NS / MS,
    }
    assert conformance([{"source": "client", **r} for r in lags]) == []


def test_an_overrun_at_the_threshold_is_no_stall_and_one_past_it_is() -> None:
    _, at = run([0, THRESHOLD_NS, 0, 0])
    assert [r["reason"] for r in at] == ["start"]
    _, past = run([0, THRESHOLD_NS + 1, 0, 0])
    assert [r["reason"] for r in past] == ["start", "stall"]


def test_a_stall_names_the_stretch_from_the_poll_before_to_one_iteration_after() -> None:
    overruns = [0, 0, 30 * MS, 0, 0]
    loop, lags = run(overruns)
    stall = lags[1]
    d = json.loads(stall["detail"])
    # polls return at t0 + 5, +10, +45 (30 ms late), +50, +55 ms: the third poll's
    # iteration is caught when the loop is back at the fourth poll (t0 + 45 ms), late by
    # 30 ms; observations since the second poll returned (t0 + 10 ms) may be late, and
    # so may those of the next iteration (until + period + threshold)
    t0 = 1_000 * MS
    assert stall["reason"] == "stall" and stall["latency_ms"] == 30.0
    assert stall["mono_ns"] == t0 + 45 * MS
    assert d["from_mono_ns"] == t0 + 10 * MS
    assert d["until_mono_ns"] == t0 + 45 * MS + PERIOD_NS + THRESHOLD_NS
    assert d["engine"] == "c7-"
    assert loop.now == t0 + 55 * MS
