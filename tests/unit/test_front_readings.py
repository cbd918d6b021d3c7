"""`front_saturation`'s arithmetic, sans Spark: the wait in the accept queue that no
deliberate block explains, and the seconds it marks; `verdict.saturated` turning a
failure that lies wholly inside those seconds into `unknown`."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.checks.base import CheckResult
from analysis.checks.front import NAME, against_ceiling, unexplained_waits
from analysis.checks.loops import busy_readings, saturated_spans
from analysis.verdict import saturated

pytestmark = pytest.mark.unit

MS = 1_000_000


def waits(ok: list[int], acc: list[int], blocked: list[tuple[int, int]]) -> list[int]:
    out = unexplained_waits(np.array(ok, np.int64), np.array(acc, np.int64), blocked)
    return [int(x) for x in out]


def test_a_wait_with_no_block_is_all_the_fronts() -> None:
    assert waits([0, 10 * MS], [5 * MS, 10 * MS], []) == [5 * MS, 0]


def test_a_block_explains_the_part_of_a_wait_it_covers() -> None:
    # queued at 0, taken at 100 ms; the acceptor slept out a rate delay 10-80 ms
    assert waits([0], [100 * MS], [(10 * MS, 80 * MS)]) == [30 * MS]
    # overlapping blocks count once; a block outside the wait explains nothing
    blocks = [(10 * MS, 50 * MS), (40 * MS, 80 * MS), (200 * MS, 300 * MS)]
    assert waits([0], [100 * MS], blocks) == [30 * MS]
    # a wait inside one block is explained whole, to the nanosecond
    assert waits([20 * MS, 20 * MS], [79 * MS, 80 * MS + 1], [(10 * MS, 80 * MS)]) == [0, 1]


def test_a_connect_recorded_after_its_accept_waited_nothing() -> None:
    assert waits([5 * MS], [4 * MS], [(0, 10 * MS)]) == [0]


S = 1_000 * MS


def _reading(at_s: float, span_ms: float, busy: float | None) -> tuple[int, float, dict]:
    d = {"role": "acceptor"} if busy is None else {"role": "acceptor", "loop_busy": busy,
                                                    "loop_busy_pid": 42}  # fmt: skip
    return int(at_s * S), span_ms, d


def test_a_loop_busy_throughout_within_its_read_spans_is_saturated() -> None:
    # spans of 2 ms and 3 ms and the 10 ms tick over a 1 s interval: busy throughout reads
    # at least 0.985
    rows = [
        _reading(0, 2.0, None),
        _reading(1, 3.0, 0.985),  # busy throughout, within the reads' spans and the lag
        _reading(2, 2.0, 0.9849),  # idled a little: caught up once
        _reading(3, 2.0, 1.002),  # 2 ms over: a lag shorter than the tick
        _reading(4, 2.0, 1.0),
        _reading(6, 2.0, 0.3),
    ]
    readings = busy_readings(rows)
    assert [round(r.bound, 4) for r in readings] == [0.985, 0.985, 0.986, 0.986, 0.993]
    assert saturated_spans(readings) == [(0, 1 * S, 0.985), (2 * S, 4 * S, 1.002)]


def test_a_lag_longer_than_the_tick_measured_in_the_run_widens_the_bound() -> None:
    """A reading 30 ms over its interval shows the kernel's count lagged 30 ms at the
    reading before: every reading of the role then allows 30 ms, not the 10 ms tick."""
    alone = busy_readings([_reading(0, 2.0, None), _reading(1, 3.0, 0.97)])
    assert [round(r.bound, 4) for r in alone] == [0.985] and saturated_spans(alone) == []
    rows = [_reading(0, 2.0, None), _reading(1, 3.0, 0.97), _reading(2, 2.0, 1.03)]
    readings = busy_readings(rows)
    assert [round(r.bound, 4) for r in readings] == [0.965, 0.965]
    assert saturated_spans(readings) == [(0, 2 * S, 1.03)]


def test_the_loops_own_read_span_places_a_reading_not_the_whole_readings() -> None:
    """Readings whose /proc scans took 650 and 330 ms (a busy machine) but whose loop reads
    took 0.2 ms: a loop at a third of its time is not saturated (by the whole readings'
    spans it could not be told from one busy throughout); one busy throughout still is."""

    def row(at_s: float, busy: float | None) -> tuple[int, float, dict]:
        t, _, d = _reading(at_s, 650.0, busy)
        return t, 650.0, {**d, "loop_read_mono_ns": t + 300 * MS, "loop_read_ms": 0.2}

    readings = busy_readings([row(0, None), row(1, 0.33), row(2, 0.9997)])
    assert [round(r.bound, 4) for r in readings] == [0.9896, 0.9896]
    assert (readings[0].prev_ns, readings[0].at_ns) == (300 * MS, S + 300 * MS)
    assert saturated_spans(readings) == [(S + 300 * MS, 2 * S + 300 * MS, 0.9997)]
    old = busy_readings([_reading(0, 650.0, None), _reading(1, 330.0, 0.33)])
    assert saturated_spans(old) == [(0, S, 0.33)]  # recorded before: only the whole span


def test_the_gil_held_by_the_loops_own_process_may_have_kept_it_busy() -> None:
    """A Python loop waiting for the GIL is off a CPU: 97.5 % on its own with another
    thread of its process running 3 % of the interval may have had work throughout (bound
    0.985); 33 % with 5 % did not."""

    def row(at_s: float, busy: float | None, others: float) -> tuple[int, float, dict]:
        t, span, d = _reading(at_s, 2.0, busy)
        return t, span, {**d, "loop_others": others}

    readings = busy_readings([row(0, None, 0.0), row(1, 0.975, 0.03), row(2, 0.33, 0.05)])
    assert [r.busy_throughout for r in readings] == [True, False]
    assert saturated_spans(readings) == [(0, S, 0.975)]
    alone = busy_readings([row(0, None, 0.0), row(1, 0.975, 0.0)])
    assert saturated_spans(alone) == []


def test_the_first_reading_of_a_process_has_no_share() -> None:
    assert busy_readings([_reading(0, 1.0, None), _reading(1, 1.0, None)]) == []


def _fail(*times: int) -> CheckResult:
    return CheckResult(
        "ip_throttle_within_window",
        "fail",
        observed="",
        expected="",
        witnesses=[{"mono_ns": t} for t in times],
    )


def test_a_failure_wholly_inside_the_fronts_saturation_is_unknown() -> None:
    front = CheckResult(NAME, "unknown", observed="front saturated 3–5 s", expected="",
                        data={"windows_ns": [(3_000 * MS, 5_000 * MS)]})  # fmt: skip
    inside, straddles, edge = _fail(3_000 * MS, 4_999 * MS), _fail(4_000 * MS, 5_000 * MS), _fail()
    many = _fail(*[4_000 * MS] * 10)  # as many as a check lists: more may exist unlisted
    saturated([front, inside, straddles, edge, many])
    assert inside.verdict == "unknown" and "front saturated 3–5 s" in inside.explanation
    assert straddles.verdict == "fail"  # the end of a window is outside it
    assert edge.verdict == "fail" and many.verdict == "fail"


def test_without_saturation_every_failure_stays() -> None:
    front = CheckResult(NAME, "pass", observed="", expected="", data={})
    f = _fail(1)
    saturated([front, f])
    assert f.verdict == "fail"


def test_a_reading_shorter_than_its_reads_judges_nothing() -> None:
    """The last reading at the stop, 3 ms after the periodic one with reads of 2 ms each:
    an idle loop (0 %) reads above its bound (1 - 4/3 < 0); it is left out, not saturated."""
    rows = [_reading(0, 2.0, None), _reading(1, 2.0, 0.1), _reading(1.003, 2.0, 0.0)]
    readings = busy_readings(rows)
    assert [round(r.at_ns / S, 3) for r in readings] == [1.0]
    assert saturated_spans(readings) == []


def test_the_peak_is_printed_beside_the_ceiling_of_its_process_model() -> None:
    assert against_ceiling((1019, 12.0), "single") == (
        "peak 1,019 accepted/s (at 12 s) of ~900 forwarded or ~4,400 bare/s held here (single)"
    )
    assert against_ceiling(None, "split").endswith(
        "~800 forwarded or ~3,400 bare/s held here (split)"
    )
