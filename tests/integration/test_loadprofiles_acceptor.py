"""Each profile against the acceptor in front of the real broker: shapes and outcomes.

Locust runs as a subprocess (never imported here: it monkey-patches); the acceptor
runs in this process on its own thread. Every check reads both histories of one
run and joins them on (client_ip, client_port), so an outcome the client reports
is confirmed by what the acceptor decided for that very connection.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from acceptor import start_in_thread
from base.history import read_history
from loadprofiles.launch import locust_command, run

pytestmark = pytest.mark.timeout(180)

# windows of 2 x 1 s: a rate quota bites after about one second of excess, not ten
FAST_WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


@pytest.fixture
def acceptor(kafka_broker: Any, tmp_path: Path) -> Iterator[Any]:
    handles: list[Any] = []

    def start(props: Mapping[str, str], proxy: str = "off") -> Any:
        full = {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": kafka_broker.bootstrap,
            "listener.name.client.proxy.protocol": proxy,
            "metrics.port": "0",
            **FAST_WINDOWS,
            **props,
        }
        handle = start_in_thread(full, history_dir=tmp_path / "history", run_id="lp")
        handles.append(handle)
        return handle

    yield start
    for h in handles:
        h.stop()


def load(profile: str, host: str, run_dir: Path, seconds: float = 30, **options: object) -> str:
    """Run a profile to the end of its schedule (``max_arrivals``); ``seconds`` bounds it."""
    options.setdefault("max_lag_ms", 2000)  # a loaded CI box must not turn load into gaps
    argv = locust_command(
        profile, host=host, run_time_s=seconds, run_dir=run_dir, run_id="lp", options=options
    )
    done = run(argv, timeout_s=seconds + 60)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out[-4000:]
    assert done.returncode in (0, 1), out[-4000:]  # 1: Locust saw failed requests
    assert "arrivals: intended" in out, out[-4000:]
    return "\n".join(
        line for line in out.splitlines() if "locust.main" in line or "loadprof" in line
    )


def history(run_dir: Path, source: str) -> pd.DataFrame:
    df = read_history(run_dir, source).to_pandas()
    df["d"] = [json.loads(d) if isinstance(d, str) else {} for d in df["detail"]]
    return df


def outcomes(client: pd.DataFrame) -> pd.DataFrame:
    closed = client[client.event == "closed"].copy()
    closed["outcome"] = [d["outcome"] for d in closed.d]
    return closed


def joined(client: pd.DataFrame, acceptor: pd.DataFrame, event: str) -> pd.DataFrame:
    """Each acceptor ``event`` row beside the outcome of the client attempt it belongs to:
    same (client_ip, client_port), the latest attempt started before the accept (loopback
    reuses a source port within seconds: the address alone is not one connection)."""
    rows = acceptor[acceptor.event == event][
        ["conn_id", "client_ip", "client_port", "sock_ip", "reason"]
    ]
    accepts = acceptor[acceptor.event == "accept"][["conn_id", "mono_ns"]]
    rows = rows.merge(accepts.rename(columns={"mono_ns": "accept_ns"}), on="conn_id")
    invokes = client[client.event == "connect_invoke"][
        ["conn_id", "client_ip", "client_port", "mono_ns"]
    ].rename(columns={"conn_id": "attempt", "mono_ns": "invoke_ns"})
    # the port is a nullable column: float on one side, int on the other
    rows = rows.astype({"client_port": "float64", "accept_ns": "int64"})
    invokes = invokes.astype({"client_port": "float64", "invoke_ns": "int64"})
    matched = pd.merge_asof(
        rows.sort_values("accept_ns"),
        invokes.sort_values("invoke_ns"),
        left_on="accept_ns",
        right_on="invoke_ns",
        by=["client_ip", "client_port"],
        direction="backward",
    ).drop(columns=["conn_id", "client_ip", "client_port", "accept_ns", "invoke_ns"])
    return outcomes(client).merge(
        matched, left_on="conn_id", right_on="attempt", suffixes=("", "_acc")
    )


def test_storm_is_served_and_every_connection_joins_the_acceptor(
    acceptor: Any, tmp_path: Path
) -> None:
    h = acceptor({})
    out = load(
        "storm",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=40",
        max_arrivals=120,
        source_ips="127.0.0.2-127.0.0.11",
        listener_name="CLIENT",
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    invokes = client[client.event == "connect_invoke"]
    assert len(invokes) == 120, out
    assert all("intended_mono_ns" in d and d["profile"] == "storm" for d in invokes.d)
    assert set(invokes.sock_ip) == {f"127.0.0.{i}" for i in range(2, 12)}
    assert (invokes.listener == "CLIENT").all()
    closed = outcomes(client)
    assert len(closed) == 120
    # no limit is set: the acceptor delayed nothing (a slow answer on a busy box may
    # still cross the delayed threshold, so count rather than demand all "served")
    assert set(closed.outcome) <= {"served", "delayed_served"}
    assert (closed.outcome == "served").sum() >= 60
    assert not (acc.event == "delay").any()
    # intended spacing of a 40/s schedule is 25 ms: the storm followed its schedule
    intended = sorted(d["intended_mono_ns"] for d in invokes.d)
    gaps = pd.Series(intended).diff().dropna() / 1e6
    assert abs(gaps.median() - 25) < 0.5
    # the acceptor saw each of these very connections and forwarded its two requests
    both = joined(client, acc, "accept")
    assert len(both) == 120
    assert (acc[acc.event == "request"].api_key.value_counts().loc[[18, 3]] >= 120).all()


def test_per_ip_count_limit_closes_after_accept(acceptor: Any, tmp_path: Path) -> None:
    h = acceptor({"max.connections.per.ip": "3"})
    load(
        "storm",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=20",
        max_arrivals=60,
        source_ips="127.0.0.21",
        hold_ms=1500,
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    rejected = joined(client, acc, "reject")
    assert len(rejected) >= 20
    assert set(rejected.reason_acc) == {"ip_count"}
    # every connection the acceptor rejected, the client saw closed right after accept
    assert set(rejected.outcome) == {"eof_after_accept"}
    assert all(d.get("eof_ms", 0) < 1000 for d in rejected.d)
    served = outcomes(client).query("outcome == 'served'")
    assert 3 <= len(served) < 60


def test_per_ip_rate_throttle_closes_after_a_hold(acceptor: Any, tmp_path: Path) -> None:
    h = acceptor({})
    h.call(h.acceptor.set_ip_quota, "127.0.0.9", 5)
    load(
        "single_ip_flood",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=30",
        max_arrivals=120,
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    invokes = client[client.event == "connect_invoke"]
    assert set(invokes.sock_ip) == {"127.0.0.9"}  # one source address...
    accepts = acc[acc.event == "accept"]
    assert set(accepts.sock_ip) == {"127.0.0.9"} == set(accepts.client_ip)  # ...confirmed
    throttled = joined(client, acc, "throttle_close")
    assert len(throttled) >= 20
    assert set(throttled.outcome) == {"eof_after_accept"}
    # the socket was parked for the throttle time before the close reached the client
    holds = [d["eof_ms"] for d in throttled.d]
    assert max(holds) >= 100 and sorted(holds)[len(holds) // 2] >= 20
    assert "served" in set(outcomes(client).outcome)  # the quota's burst got through


def test_broker_rate_delays_then_serves(acceptor: Any, tmp_path: Path) -> None:
    h = acceptor({"max.connection.creation.rate": "10"})
    load(
        "storm",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=40",
        max_arrivals=100,
        source_ips="127.0.0.31-127.0.0.40",
        delayed_threshold_ms=150,
        request_timeout=15,
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    closed = outcomes(client)
    assert set(closed.outcome) <= {"served", "delayed_served"}
    assert (closed.outcome == "delayed_served").sum() >= 10
    delayed = joined(client, acc, "delay")
    assert len(delayed) >= 10 and set(delayed.reason_acc) == {"broker_rate"}
    ready = client[client.event == "ready"]
    assert ready.latency_ms.max() > 300


def test_per_request_produces_on_fresh_connections(acceptor: Any, tmp_path: Path) -> None:
    h = acceptor({})
    load(
        "per_request",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="poisson:rate=20",
        max_arrivals=40,
        seed=5,
        topic="lp-per-request",
        source_ips="127.0.0.41-127.0.0.45",
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    produced = client[(client.event == "request_ok") & (client.api_key == 0)]
    assert len(produced) == 40
    assert all("error_code" not in d for d in produced.d)
    # every connection answered; none held back by the acceptor (no limit is set). A first
    # answer later than the engine's delayed threshold (250 ms) on a busy machine is a slow
    # answer, not enforcement: the acceptor's own rows say which.
    assert set(outcomes(client).outcome) <= {"served", "delayed_served"}
    held = {"delay", "blocked", "reject", "throttle_close", "evict", "request_throttle"}
    assert not set(acc.event) & held
    # one produce per connection: as many distinct client ports as produces
    assert produced[["client_ip", "client_port"]].drop_duplicates().shape[0] == 40
    assert (acc[acc.event == "request"].api_key == 0).sum() == 40


def test_proxy_header_from_the_generator_sets_the_client_address(
    acceptor: Any, tmp_path: Path
) -> None:
    h = acceptor({}, proxy="required")
    load(
        "single_ip_flood",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=30",
        max_arrivals=40,
        proxy_protocol="v1",
        proxy_client_ips="127.0.1.1-127.0.1.8",
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    both = joined(client, acc, "accept")
    assert len(both) == 40 and set(both.outcome) == {"served"}
    assert set(both.sock_ip_acc) == {"127.0.0.9"}  # the TCP peer: the one flooding address
    assert set(both.client_ip) == {f"127.0.1.{i}" for i in range(1, 9)}  # the header's


@pytest.mark.skipif(not Path("/usr/sbin/haproxy").exists(), reason="Debian's haproxy missing")
def test_through_a_real_haproxy_the_header_carries_the_true_client(
    acceptor: Any, tmp_path: Path
) -> None:
    h = acceptor({}, proxy="required")
    load(
        "single_ip_flood",
        h.bootstrap("CLIENT"),
        tmp_path,
        arrival="constant:rate=30",
        max_arrivals=30,
        via_haproxy="v2",
        source_ips="127.0.0.51-127.0.0.55",
    )
    h.stop()  # flushes the acceptor's history: its last rows may still be buffered
    client, acc = history(tmp_path, "client"), history(tmp_path, "acceptor")
    both = joined(client, acc, "accept")
    assert len(both) == 30 and set(both.outcome) == {"served"}
    assert set(both.sock_ip_acc) == {"127.0.0.250"}  # the acceptor's TCP peer: HAProxy
    assert set(both.sock_ip) == set(both.client_ip)  # the generator's own sockets
    assert set(both.client_ip) == {f"127.0.0.{i}" for i in range(51, 56)}  # true clients
