"""Replay the recorded arrivals through the checker's own model and compare decisions.

The broker meter couples listeners, and a per-IP throttle un-records from the IP, the
listener and the broker meters, so the replay is one sequential pass over the run in
mono_ns order: accept (t0: broker/listener rate step), the IP step at t1 (admit /
throttle_close's throttle_start_mono_ns / reject), closes (count release) and config
changes (re-bound the meters, keep their samples — Kafka swaps the MetricConfig).

Counts follow the *recorded* admissions and closes, so one wrong decision cannot cascade
into the per-IP count decisions that follow; the meters follow the model's own decisions
(what Kafka would have done). `replay_frame` is the pass, a pure function of a pandas
frame; `replay` feeds it the per-connection table through Arrow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.model import INT_MAX, AdmissionModel, Limits

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

    from analysis.load import Run

MS = 1_000_000
MAX_DISAGREEMENTS = 200

OUT_SCHEMA = (
    "kind string, conn_id string, client_ip string, client_port int, listener string, "
    "mono_ns long, what string, recorded double, model double, n_conns long, n_agree long, "
    "n_steps long, n_delayed_recorded long, n_delayed_model long, max_abs_delay_diff double"
)


@dataclass(frozen=True)
class ReplayParams:
    starts: tuple[int, ...]
    limits: tuple[Limits, ...]
    delay_tol_ms: float = 2.0
    mode: str = "acceptor"  # "acceptor" | "client"


def replay_frame(pdf: pd.DataFrame, params: ReplayParams) -> pd.DataFrame:
    """One sequential pass; returns a summary row plus the first disagreeing connections.

    Input columns: conn_id, listener, client_ip, client_port, accept_ns, delay_ms, t1_ns,
    outcome, throttle_ms, close_ns. In "client" mode (target broker) t1_ns is unknown and
    the model's own delay places the IP step; `outcome` is the client's view (admit /
    eof), and delay_ms is the client's ready latency (a lower bound is all it tells).
    """
    import pandas as pd

    n = len(pdf)
    model = AdmissionModel(params.limits[0])
    events: list[tuple[int, int, int]] = []  # (ns, order, index); order: cfg, close, accept, ip
    for i, start in enumerate(params.starts[1:], start=1):
        events.append((int(start), 0, i))

    def ints(col: str) -> list[int | None]:
        s = pdf[col]
        return [
            None if m else int(v)
            for v, m in zip(s.fillna(0).tolist(), s.isna().tolist(), strict=True)
        ]

    accept = ints("accept_ns")
    t1 = ints("t1_ns")
    close = ints("close_ns")
    outcome = [None if o is None or o != o else str(o) for o in pdf["outcome"].tolist()]
    listener = pdf["listener"].fillna("").astype(str).str.lower().tolist()
    ip = pdf["client_ip"].fillna("").astype(str).tolist()
    rec_delay = pdf["delay_ms"].fillna(0.0).astype(float).tolist()
    rec_throttle = pdf["throttle_ms"].fillna(0.0).astype(float).tolist()
    client_mode = params.mode == "client"
    for k in range(n):
        a = accept[k]
        if a is not None:
            events.append((a, 2, k))
        if not client_mode:
            t = t1[k]
            if t is not None and outcome[k] is not None:
                events.append((t, 3, k))
            c = close[k]
            if c is not None and outcome[k] == "admit":
                events.append((c, 1, k))
    events.sort()
    import heapq

    pending: list[tuple[int, int, int]] = []  # client mode: IP steps placed by the model
    model_delay = [0] * n
    disagreements: list[dict[str, Any]] = []
    n_agree = 0
    n_steps = 0
    max_diff = 0.0
    n_delay_rec = 0
    n_delay_model = 0
    tol = params.delay_tol_ms
    bad_conns: set[int] = set()

    def note(k: int, what: str, recorded: float, modeled: float, ns: int) -> None:
        bad_conns.add(k)
        if len(disagreements) < MAX_DISAGREEMENTS:
            disagreements.append(
                {"k": k, "what": what, "recorded": recorded, "model": modeled, "mono_ns": ns}
            )

    def ip_step(ns: int, k: int) -> None:
        nonlocal n_steps
        n_steps += 1
        lim = model.limits
        L, A = listener[k], ip[k]
        rec = outcome[k]
        throttle = 0
        if lim.ip_quota(A) != INT_MAX:
            throttle = model.ip_rate_step(L, A, ns // MS)
        if throttle > 0:
            mod = "throttle_close"
        else:
            count, cap = model.ip_counts.get(A, 0), lim.max_for_ip(A)
            mod = "reject" if count >= cap else "admit"
        if client_mode:
            if rec is None:  # neither served nor dropped (timeout, still open): no verdict
                return
            served = rec == "admit"
            if served != (mod == "admit"):
                note(k, f"outcome: client {'served' if served else 'EOF'}, model {mod}", 0, 0, ns)
            if served:
                model.admit_count(L, A)
                c = close[k]
                if c is not None:
                    heapq.heappush(pending, (c, 1, k))
            return
        if rec != mod:
            note(k, f"outcome: recorded {rec}, model {mod}", 0.0, 0.0, ns)
        elif mod == "throttle_close" and abs(rec_throttle[k] - throttle) > tol:
            note(k, "ip throttle ms", float(rec_throttle[k]), float(throttle), ns)
        if rec == "admit":
            model.admit_count(L, A)

    version = 0
    i = 0
    while i < len(events) or pending:
        if pending and (i >= len(events) or pending[0] < events[i]):
            ns, order, k = heapq.heappop(pending)
        else:
            ns, order, k = events[i]
            i += 1
        if order == 0:
            version = k
            model.reconfigure(params.limits[version])
        elif order == 1:
            model.release(listener[k], ip[k])
        elif order == 2:
            b_ms, l_ms = model.rate_delays(listener[k], ns // MS)
            d = b_ms if b_ms > l_ms else l_ms
            model_delay[k] = d
            rec = float(rec_delay[k])
            n_delay_model += d > 0
            if client_mode:
                # the client's ready latency includes the delay: it can only be longer
                if rec + tol < d and outcome[k] == "admit":
                    note(k, "served sooner than the model's delay (ready latency ms)", rec, d, ns)
                heapq.heappush(pending, (ns + d * MS, 3, k))
            else:
                n_delay_rec += rec > 0
                diff = abs(rec - d)
                max_diff = max(max_diff, diff)
                if diff > tol:
                    note(k, "rate delay ms", rec, float(d), ns)
        else:
            ip_step(ns, k)
    n_agree = n - len(bad_conns)
    rows = [
        {
            "kind": "summary",
            "n_conns": n,
            "n_agree": n_agree,
            "n_steps": n_steps,
            "n_delayed_recorded": n_delay_rec,
            "n_delayed_model": n_delay_model,
            "max_abs_delay_diff": max_diff,
        }
    ]
    for dis in disagreements:
        k = dis["k"]
        port = pdf["client_port"].iloc[k]
        rows.append(
            {
                "kind": "disagree",
                "conn_id": None if pd.isna(pdf["conn_id"].iloc[k]) else str(pdf["conn_id"].iloc[k]),
                "client_ip": ip[k],
                "client_port": None if pd.isna(port) else int(port),
                "listener": listener[k],
                "mono_ns": dis["mono_ns"],
                "what": dis["what"],
                "recorded": dis["recorded"],
                "model": dis["model"],
            }
        )
    cols = [c.split()[0] for c in OUT_SCHEMA.split(", ")]
    out = pd.DataFrame(rows, columns=cols)
    for name in (
        "client_port",
        "mono_ns",
        "n_conns",
        "n_agree",
        "n_steps",
        "n_delayed_recorded",
        "n_delayed_model",
    ):
        out[name] = out[name].fillna(-1).astype("int64")  # -1: not applicable to this row kind
    out["max_abs_delay_diff"] = out["max_abs_delay_diff"].astype("float64")
    for name in ("recorded", "model"):
        out[name] = out[name].astype("float64")
    for name in ("kind", "conn_id", "client_ip", "listener", "what"):
        col = out[name].astype(object)
        out[name] = col.where(col.notna(), None)
    return out


def _input(run: Run, mode: str) -> DataFrame:
    from pyspark.sql import functions as F

    from analysis.frames import acceptor_conns, client_conns

    if mode == "acceptor":
        return acceptor_conns(run).select(
            "conn_id",
            "listener",
            "client_ip",
            "client_port",
            "accept_ns",
            F.coalesce("delay_ms", F.lit(0.0)).alias("delay_ms"),
            "t1_ns",
            "outcome",
            "throttle_ms",
            "close_ns",
        )
    cc = client_conns(run).where(F.col("connect_ok_ns").isNotNull())
    default_listener = _default_client_listener(run)
    return cc.select(
        F.lit(None).cast("string").alias("conn_id"),
        F.lower(F.coalesce("c_listener", F.lit(default_listener))).alias("listener"),
        "client_ip",
        "client_port",
        F.col("connect_ok_ns").alias("accept_ns"),
        F.coalesce("ready_latency_ms", F.lit(0.0)).alias("delay_ms"),
        F.lit(None).cast("long").alias("t1_ns"),
        F.when(F.col("ready_ns").isNotNull(), F.lit("admit"))
        .when(F.col("eof_ns").isNotNull(), F.lit("eof"))
        .alias("outcome"),
        F.lit(None).cast("double").alias("throttle_ms"),
        F.col("closed_ns").alias("close_ns"),
    )


def _default_client_listener(run: Run) -> str:
    lim = run.timeline.limits[0]
    for name in lim.listeners:
        if not lim.is_protected(name):
            return name
    return "client"


def replay(run: Run, mode: str | None = None) -> pd.DataFrame:
    """Run the replay on the per-connection table; returns the small result frame.

    The pass is sequential (the broker meter couples every connection), so it runs in
    this process on the table fetched through Arrow: one task either way, without a
    shuffle to a single partition or a Python worker to start. Rows are ordered by
    (accept_ns, conn_id, client address) so that ties at one instant replay in the same
    order every time.
    """
    from pyspark.sql import functions as F

    mode = mode or ("acceptor" if run.has_source("acceptor") else "client")
    params = ReplayParams(
        tuple(run.timeline.starts),
        tuple(run.timeline.limits),
        float(run.expect.get("delay_tolerance_ms") or 2.0),
        mode,
    )
    pdf: pd.DataFrame = _input(run, mode).where(F.col("accept_ns").isNotNull()).toPandas()
    order = ["accept_ns", "conn_id", "client_ip", "client_port"]
    pdf = pdf.sort_values(order, kind="stable").reset_index(drop=True)
    return replay_frame(pdf, params)
