"""A history is judged as the Kafka release it was recorded on (analysis.versions).

The recorded decisions come from the enforcer's engine (`base.quota`) enforcing as a
pre-3.8 release (n samples purged by start) or as 4.3.1 (n+1 samples, purged by last
event), on a per-IP trace where the two rings disagree; the checker's replay passes each
when told its release and fails it, naming the rate meter, when told the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis.checks.model_replay import check_model_replay
from analysis.load import load_run
from base.history import HistoryWriter
from base.quota.config import parse_config
from base.quota.connections import ConnectionQuotas, Outcome
from tests.handbuilt import record

S = 1_000_000_000
MS = 1_000_000
T0 = 5_000 * S
IP = "127.0.0.7"
#: 10 at t=0 and 10 at t=999 fill two samples; at t=11 000 the first sample's start is
#: n·w old (purged before 3.8) but its last event is not (kept from 3.8 on)
TRACE_MS = [0] * 10 + [999] * 10 + [11_000] * 3


def _record(tmp: Path, recorded_as: str, judged_as: str) -> Path:
    engine = ConnectionQuotas(
        parse_config({"listeners": "CLIENT://127.0.0.1:1"}),
        legacy_meter=recorded_as < "3.8",
    )
    engine.set_ip_quota(None, 2, 0)
    name = f"rec-{recorded_as}-as-{judged_as}"
    run = tmp / name
    (run / "history").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "target": "acceptor"}))
    aw = HistoryWriter(run / "history", "acceptor", name, background=False)
    hw = HistoryWriter(run / "history", "harness", name, background=False)
    record(
        hw,
        "config",
        mono_ns=T0 - 1,
        detail={
            "listeners": "CLIENT://127.0.0.1:1",
            "ip_quotas": {"default": 2},
            "kafka.version": judged_as,
            "origin": "runner",
        },
    )
    for i, t in enumerate(TRACE_MS):
        ns = T0 + t * MS + i * 1_000  # one µs apart within a millisecond
        conn = {"conn_id": f"CLIENT-{i}", "listener": "CLIENT", "client_ip": IP}
        conn["client_port"] = 40_000 + i
        step = engine.record_connection_rate("CLIENT", t)
        assert step.delay_ms == 0
        record(aw, "accept", mono_ns=ns, **conn)
        adm = engine.admit("CLIENT", IP, t)
        if adm.outcome is Outcome.THROTTLED_IP:
            record(
                aw,
                "throttle_close",
                mono_ns=ns + adm.throttle_ms * MS + 1_000,
                delay_ms=float(adm.throttle_ms),
                reason="ip_rate",
                detail={"throttle_start_mono_ns": ns + 100},
                **conn,
            )
        else:
            record(aw, "admit", mono_ns=ns + 100, delay_ms=0.0, **conn)
            record(aw, "close", mono_ns=ns + 200, reason="client_eof", **conn)
            engine.release("CLIENT", IP)
    aw.close()
    hw.close()
    return run


@pytest.mark.parametrize("recorded", ["3.7.2", "4.3.1"])
def test_a_history_passes_as_its_release_and_fails_as_the_other(
    spark: Any, tmp_path: Path, recorded: str
) -> None:
    other = "4.3.1" if recorded == "3.7.2" else "3.7.2"
    own = check_model_replay(load_run(spark, _record(tmp_path, recorded, recorded)))
    assert own.verdict == "pass", own.observed
    assert f"judged as Kafka {recorded}" in own.expected
    wrong = check_model_replay(load_run(spark, _record(tmp_path, recorded, other)))
    assert wrong.verdict == "fail", wrong.observed
    assert f"judged as Kafka {other}" in wrong.expected
    assert "rate meter: n" in wrong.expected  # the meter it was judged by is named
