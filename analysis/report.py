"""report/report.html: one self-contained page someone who did not run the test can read.

A verdict banner, the checks (observed / expected / tolerance / witnesses), and charts
with the quota lines drawn in, config changes marked and faults shaded. Charts are
matplotlib PNGs embedded as base64, so the page has no external references.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analysis.frames import acceptor_conns, client_conns
from analysis.model import INT_MAX
from analysis.verdict import write_atomically

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from pyspark.sql import Column

    from analysis.load import Run

TEMPLATES = Path(__file__).parent / "templates"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def figure_png(fig: Figure) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _markers(ax: Axes, ctx: dict[str, Any]) -> None:
    """Faults shaded red, storm phases shaded grey, config changes dashed."""
    t0 = ctx["t0"]
    for p in ctx["phases"]:
        if str(p.get("profile") or p["name"]) != "steady":
            ax.axvspan((p["start"] - t0) / 1e9, (p["end"] - t0) / 1e9, color="#999", alpha=0.08)
    for f in ctx["faults"]:
        ax.axvspan(
            (f["start"] - t0) / 1e9,
            (f["end"] - t0) / 1e9,
            color="#d62728",
            alpha=0.15,
            label=f"fault: {f['reason']}",
        )
    for i, ns in enumerate(ctx["changes"]):
        ax.axvline(
            (ns - t0) / 1e9, color="#444", ls="--", lw=1, label="config change" if i == 0 else None
        )


def _step_line(ax: Axes, ctx: dict[str, Any], pick: Any, label: str, color: str) -> None:
    """A quota line that follows the config timeline."""
    tl = ctx["timeline"]
    t0, t_end = ctx["t0"], ctx["t_end"]
    xs: list[float] = []
    ys: list[float] = []
    for i, lim in enumerate(tl.limits):
        start = max(tl.starts[i], t0)
        end = tl.starts[i + 1] if i + 1 < len(tl.starts) else t_end
        if end <= t0:
            continue
        value = float(pick(lim))
        if value >= INT_MAX:
            value = float("nan")
        xs += [(start - t0) / 1e9, (end - t0) / 1e9]
        ys += [value, value]
    if xs and any(y == y for y in ys):
        ax.plot(xs, ys, color=color, ls=":", lw=2, label=label)


def _per_second(df: pd.DataFrame, col: str, t0: int, by: str | None = None) -> pd.DataFrame:
    out = df.copy()
    out["sec"] = ((out[col] - t0) // 1_000_000_000).astype("int64")
    keys = ["sec"] + ([by] if by else [])
    return out.groupby(keys).size().rename("n").reset_index()


def chart_data(run: Run) -> dict[str, Any]:
    """Small per-second aggregates from Spark, for the charts (and compare)."""
    from pyspark.sql import functions as F

    from analysis.checks.clients import phases

    t0, t_end = run.span_ns()

    def sec(c: str) -> Column:
        return F.floor((F.col(c) - F.lit(t0)) / F.lit(1e9)).cast("long")

    data: dict[str, Any] = {
        "t0": t0,
        "t_end": t_end,
        "timeline": run.timeline,
        "changes": [c for c in run.timeline.changes if c >= t0],
    }
    data["phases"] = phases(run)
    faults = []
    open_f: dict[str, int] = {}
    for r in run.events("fault_start", "fault_end", source="harness").orderBy("mono_ns").collect():
        reason = r["reason"] or "fault"
        if r["event"] == "fault_start":
            open_f[reason] = int(r["mono_ns"])
        elif reason in open_f:
            faults.append({"reason": reason, "start": open_f.pop(reason), "end": int(r["mono_ns"])})
    faults += [{"reason": k, "start": v, "end": t_end} for k, v in open_f.items()]
    data["faults"] = faults
    if run.has_source("acceptor"):
        conns = acceptor_conns(run)
        data["accepts"] = (
            conns.where(F.col("accept_ns").isNotNull())
            .groupBy(sec("accept_ns").alias("sec"), "listener")
            .count()
            .toPandas()
        )
        top = [
            r[0]
            for r in conns.groupBy("client_ip").count().orderBy(F.desc("count")).limit(4).collect()
        ]
        data["top_ips"] = top
        data["ip_steps"] = (
            conns.where(F.col("client_ip").isin(*top) & F.col("outcome").isNotNull())
            .groupBy(sec("t1_ns").alias("sec"), "client_ip", "outcome")
            .count()
            .toPandas()
        )
        data["delays"] = (
            conns.where(F.col("delay_ms") > 0)
            .select(F.round("delay_ms").alias("ms"))
            .groupBy("ms")
            .count()
            .toPandas()
        )
        data["throttles"] = (
            conns.where(F.col("throttle_ms") > 0)
            .select(F.round("throttle_ms").alias("ms"))
            .groupBy("ms")
            .count()
            .toPandas()
        )
        adm = conns.where(F.col("admit_ns").isNotNull())
        ups = adm.select(sec("admit_ns").alias("sec"), "listener", F.lit(1).alias("d"))
        downs = adm.where(F.col("close_ns").isNotNull()).select(
            sec("close_ns").alias("sec"), "listener", F.lit(-1).alias("d")
        )
        data["conc"] = (
            ups.unionByName(downs).groupBy("sec", "listener").agg(F.sum("d").alias("d")).toPandas()
        )
        data["outcomes"] = conns.groupBy("outcome").count().toPandas()
    else:
        cc = client_conns(run).where(F.col("connect_ok_ns").isNotNull())
        data["accepts"] = (
            cc.groupBy(
                sec("connect_ok_ns").alias("sec"),
                F.lower(F.coalesce("c_listener", F.lit("client"))).alias("listener"),
            )
            .count()
            .toPandas()
        )
        data["outcomes"] = (
            cc.select(
                F.when(F.col("ready_ns").isNotNull(), "served")
                .when(F.col("eof_ns").isNotNull(), "eof")
                .otherwise("other")
                .alias("outcome")
            )
            .groupBy("outcome")
            .count()
            .toPandas()
        )
        data["delays"] = (
            cc.where(F.col("ready_latency_ms").isNotNull())
            .select(F.round("ready_latency_ms").alias("ms"))
            .groupBy("ms")
            .count()
            .toPandas()
        )
    data["per_broker"] = _per_broker_accepts(run, t0)
    if run.has_source("client"):
        steady = (
            client_conns(run).where(F.col("profile") == "steady").select("client_ip", "client_port")
        )
        req = run.events("request_ok", source="client").join(
            F.broadcast(steady), ["client_ip", "client_port"]
        )
        data["steady"] = (
            req.groupBy(sec("mono_ns").alias("sec"))
            .agg(
                F.percentile_approx("latency_ms", 0.5).alias("p50"),
                F.max("latency_ms").alias("max"),
            )
            .toPandas()
        )
    return data


def _per_broker_accepts(run: Run, t0: int) -> pd.DataFrame | None:
    """A cluster: the served connections per second on each broker (client intervals'
    ready instants, attributed as the per-broker checks attribute them); None otherwise."""
    from analysis.checks.base import cluster_nodes
    from analysis.checks.broker_side import attempts

    if not cluster_nodes(run):
        return None
    df = attempts(run).df
    served = df[df["ready_ns"].notna() & df["broker"].notna()]
    if served.empty:
        return None
    out = _per_second(served.astype({"ready_ns": "int64"}), "ready_ns", t0, by="broker")
    return out.astype({"broker": "int64"})


def charts(ctx: dict[str, Any]) -> list[dict[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[dict[str, str]] = []
    acc = ctx.get("accepts")
    if acc is not None and len(acc):
        fig, ax = plt.subplots(figsize=(11, 3.4))
        for i, (name, g) in enumerate(sorted(acc.groupby("listener"), key=lambda x: str(x[0]))):
            g = g.sort_values("sec")
            c = COLORS[i % len(COLORS)]
            ax.plot(g["sec"], g["count"], color=c, lw=1.2, label=f"accepts/s {name}")
            _step_line(ax, ctx, lambda lim, n=name: lim.listener_rate_for(n), f"quota {name}", c)
        _step_line(ax, ctx, lambda lim: lim.broker_rate, "max.connection.creation.rate", "#d62728")
        _markers(ax, ctx)
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("connections / s")
        ax.legend(loc="upper right", fontsize=8, ncol=2)
        ax.set_title("Accepted connections per second vs the rate quotas (dotted)")
        out.append(
            {
                "title": "Accept rate per listener",
                "png": figure_png(fig),
                "caption": "Dotted: quota in force (steps at config changes, dashed). Kafka "
                "admits a burst of bound·(n−1)·w first, then delays to hold the bound.",
            }
        )
    pb = ctx.get("per_broker")
    if pb is not None and len(pb):
        fig, ax = plt.subplots(figsize=(11, 3.4))
        for i, (node, g) in enumerate(sorted(pb.groupby("broker"), key=lambda x: int(x[0]))):
            g = g.sort_values("sec")
            ax.plot(g["sec"], g["n"], color=COLORS[i % len(COLORS)], lw=1.2, label=f"broker {node}")
        _step_line(
            ax, ctx, lambda lim: lim.broker_rate, "max.connection.creation.rate (each)", "#d62728"
        )
        _markers(ax, ctx)
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("served connections / s")
        ax.legend(loc="upper right", fontsize=8, ncol=2)
        ax.set_title("Served connections per second on each broker vs its own rate limit")
        out.append(
            {
                "title": "Accept rate per broker",
                "png": figure_png(fig),
                "caption": "Each broker enforces its limits alone: every line is held to the "
                "dotted rate by itself (the per-broker checks judge each broker's spans).",
            }
        )
    steps = ctx.get("ip_steps")
    if steps is not None and len(steps):
        fig, ax = plt.subplots(figsize=(11, 3.4))
        for i, ip in enumerate(ctx["top_ips"]):
            g = steps[(steps["client_ip"] == ip) & (steps["outcome"] != "throttle_close")]
            g = g.groupby("sec")["count"].sum().reset_index()
            th = steps[(steps["client_ip"] == ip) & (steps["outcome"] == "throttle_close")]
            c = COLORS[i % len(COLORS)]
            ax.plot(g["sec"], g["count"], color=c, lw=1.2, label=f"{ip} admitted+rejected/s")
            if len(th):
                th = th.groupby("sec")["count"].sum().reset_index()
                ax.scatter(
                    th["sec"],
                    th["count"],
                    color=c,
                    marker="x",
                    s=12,
                    label=f"{ip} throttle-closed/s",
                )
            _step_line(ax, ctx, lambda lim, ip=ip: lim.ip_quota(ip), f"ip quota {ip}", c)
        _markers(ax, ctx)
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("connections / s (symlog)")
        ax.set_yscale("symlog", linthresh=10)
        ax.legend(loc="upper right", fontsize=7, ncol=2)
        ax.set_title("Top client IPs: per-IP rate vs connection_creation_rate (dotted)")
        out.append(
            {
                "title": "Per-IP connection rate",
                "png": figure_png(fig),
                "caption": "x: connections closed by the per-IP rate throttle.",
            }
        )
    dl, th = ctx.get("delays"), ctx.get("throttles")
    if (dl is not None and len(dl)) or (th is not None and len(th)):
        fig, ax = plt.subplots(figsize=(11, 3.0))
        if dl is not None and len(dl):
            ax.hist(
                dl["ms"],
                weights=dl["count"],
                bins=50,
                alpha=0.7,
                label="broker/listener rate delay ms",
            )
        if th is not None and len(th):
            ax.hist(th["ms"], weights=th["count"], bins=50, alpha=0.7, label="per-IP throttle ms")
        lim = ctx["timeline"].limits[0]
        ax.axvline(
            lim.window_ms, color="#d62728", ls=":", lw=2, label=f"cap w = {lim.window_ms} ms"
        )
        ax.set_yscale("log")
        ax.set_xlabel("ms")
        ax.set_ylabel("connections")
        ax.legend(fontsize=8)
        ax.set_title(
            "Delay distributions"
            if ctx.get("throttles") is not None
            else "Client ready latency (target broker: the delay as the client saw it)"
        )
        out.append(
            {"title": "Delays", "png": figure_png(fig), "caption": "No delay may pass the cap."}
        )
    conc = ctx.get("conc")
    if conc is not None and len(conc):
        fig, ax = plt.subplots(figsize=(11, 3.4))
        total = conc.groupby("sec")["d"].sum().sort_index().cumsum()
        ax.plot(total.index, total.values, color="#333", lw=1.4, label="all listeners")
        for i, (name, g) in enumerate(sorted(conc.groupby("listener"), key=lambda x: str(x[0]))):
            s = g.groupby("sec")["d"].sum().sort_index().cumsum()
            c = COLORS[i % len(COLORS)]
            ax.plot(s.index, s.values, color=c, lw=1.0, label=f"{name}")
            _step_line(ax, ctx, lambda lim, n=name: lim.listener_max_for(n), f"max {name}", c)
        _step_line(ax, ctx, lambda lim: lim.max_connections, "max.connections", "#d62728")
        _markers(ax, ctx)
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("open connections")
        ax.legend(loc="upper right", fontsize=8, ncol=2)
        ax.set_title("Admitted connections open (end of each second) vs count limits (dotted)")
        out.append(
            {
                "title": "Concurrency",
                "png": figure_png(fig),
                "caption": "Per-second view; the concurrency checks use exact event order.",
            }
        )
    st = ctx.get("steady")
    if st is not None and len(st):
        st = st.sort_values("sec")
        fig, ax = plt.subplots(figsize=(11, 3.0))
        ax.plot(st["sec"], st["p50"], lw=1.2, label="p50 ms")
        ax.plot(st["sec"], st["max"], lw=0.8, alpha=0.7, label="max ms")
        _markers(ax, ctx)
        ax.set_xlabel("seconds since run start")
        ax.set_ylabel("request latency ms")
        ax.legend(fontsize=8)
        ax.set_title("Steady clients' request latency (storm phases shaded)")
        out.append(
            {
                "title": "Steady clients",
                "png": figure_png(fig),
                "caption": "What the storm cost the well-behaved clients.",
            }
        )
    return out


def _limits_rows(run: Run) -> list[dict[str, Any]]:
    rows = []
    tl = run.timeline
    keys = (
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "ip_quotas",
        "quota.window.num",
        "quota.window.size.seconds",
    )
    for i, raw in enumerate(tl.raw):
        shown = {k: raw[k] for k in keys if k in raw}
        shown.update({k: v for k, v in raw.items() if k.startswith("listener.name.")})
        rows.append(
            {
                "version": i,
                "from_ns": tl.starts[i] if tl.starts[i] > -(2**61) else None,
                "limits": json.dumps(shown, sort_keys=True),
            }
        )
    return rows


def render(
    verdict: dict[str, Any],
    chart_list: list[dict[str, str]],
    run: Run | None,
    template: str = "report.html.j2",
    meta: dict[str, Any] | None = None,
    **extra: Any,
) -> str:
    """The report's HTML; `meta` (run.json) defaults to the run's own."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
    )
    return env.get_template(template).render(
        v=verdict,
        charts=chart_list,
        limits=_limits_rows(run) if run is not None else [],
        meta=meta if meta is not None else run.meta if run is not None else {},
        **extra,
    )


@dataclass
class Drawn:
    """The report's charts and its connections by outcome: all it reads from Spark, drawn
    before the verdict is known (`draw`), so they can be drawn while the checks run."""

    charts: list[dict[str, str]]
    outcomes: dict[str, int]


def draw(run: Run) -> Drawn:
    ctx = chart_data(run)
    outcomes = ctx.get("outcomes")
    summary = (
        {}
        if outcomes is None
        else {str(r["outcome"]): int(r["count"]) for _, r in outcomes.iterrows()}
    )
    return Drawn(charts(ctx), summary)


def write_report(run: Run, verdict: dict[str, Any], path: Path, drawn: Drawn | None = None) -> Path:
    """report.html for ``verdict``, with the charts `draw` made (drawn here when not given)."""
    drawn = drawn if drawn is not None else draw(run)
    html = render(verdict, drawn.charts, run, outcomes=drawn.outcomes)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, html)
    return path
