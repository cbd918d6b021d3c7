"""Compare two runs of one scenario side by side: `harness compare RUN_A RUN_B [--out FILE]`.

Typically the same storm against the acceptor and against the broker's own enforcement.
Both sides are described from the client's view (the one thing both targets have): accept
rate, ready-latency distribution, drops (EOF after accept, refused, timeouts), plus each
run's per-check verdicts (analysing a run first when it has no report/verdict.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from analysis.load import Run


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="first run directory (e.g. target acceptor)")
    parser.add_argument("run_b", metavar="RUN_B", help="second run directory (e.g. target broker)")
    parser.add_argument(
        "--out", default=None, help="compare.html path (default RUN_A/report/compare.html)"
    )
    parser.add_argument("--spark-master", default=None, help="Spark master URL (default local[*])")
    parser.add_argument(
        "--reanalyze", action="store_true", help="ignore existing verdict.json files"
    )


def client_stats(run: Run) -> dict[str, Any]:
    """Client-side numbers comparable across targets."""
    from pyspark.sql import functions as F

    from analysis.frames import client_conns

    out: dict[str, Any] = {"target": run.target, "scenario": run.meta.get("scenario")}
    if not run.has_source("client"):
        return out
    cc = client_conns(run)
    row = cc.agg(
        F.count(F.lit(1)).alias("attempts"),
        F.sum(F.when(F.col("connect_ok_ns").isNotNull(), 1).otherwise(0)).alias("connected"),
        F.sum(F.when(F.col("ready_ns").isNotNull(), 1).otherwise(0)).alias("served"),
        F.sum(
            F.when(F.col("ready_ns").isNull() & F.col("eof_ns").isNotNull(), 1).otherwise(0)
        ).alias("eof"),
        F.sum(F.when(F.col("fail_reason") == "refused", 1).otherwise(0)).alias("refused"),
        F.sum(F.when(F.col("fail_reason") == "timeout", 1).otherwise(0)).alias("timeout"),
        F.sum(F.when(F.col("fail_reason") == "not_offered", 1).otherwise(0)).alias("not_offered"),
        F.min("connect_ok_ns").alias("first"),
        F.max("connect_ok_ns").alias("last"),
        F.percentile_approx("ready_latency_ms", [0.5, 0.9, 0.99], 10000).alias("ready_pct"),
        F.max("ready_latency_ms").alias("ready_max"),
    ).first()
    assert row is not None
    d = row.asDict()
    span_s = max(((d.pop("last") or 0) - (d.pop("first") or 0)) / 1e9, 1e-9)
    pct = d.pop("ready_pct") or [None, None, None]
    d.update(
        served_per_s=(d["served"] or 0) / span_s,
        ready_p50_ms=pct[0],
        ready_p90_ms=pct[1],
        ready_p99_ms=pct[2],
    )
    if run.has_source("acceptor"):
        from analysis.frames import acceptor_conns

        oc = {r[0]: r[1] for r in acceptor_conns(run).groupBy("outcome").count().collect()}
        d["acceptor_rejects"] = oc.get("reject", 0)
        d["acceptor_throttle_closes"] = oc.get("throttle_close", 0)
    lat = (
        cc.where(F.col("ready_latency_ms").isNotNull())
        .select(F.round("ready_latency_ms").alias("ms"))
        .groupBy("ms")
        .count()
        .toPandas()
    )
    out.update(d)
    out["_latency"] = lat
    return out


def _verdict(spark: SparkSession, run_dir: Path, reanalyze: bool, say: Any) -> dict[str, Any]:
    path = run_dir / "report" / "verdict.json"
    if path.exists() and not reanalyze:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    from analysis import analyze_run

    say(f"analysing {run_dir} (no report/verdict.json yet)…")
    return analyze_run(run_dir, spark=spark, progress=lambda m: say("  " + m))


ROWS = [
    ("target", "target"),
    ("attempts", "connection attempts"),
    ("served", "served (ready)"),
    ("served_per_s", "served / s"),
    ("eof", "EOF after accept"),
    ("refused", "refused"),
    ("timeout", "timeout"),
    ("not_offered", "not offered"),
    ("acceptor_rejects", "acceptor rejects"),
    ("acceptor_throttle_closes", "acceptor throttle-closes"),
    ("ready_p50_ms", "ready p50 ms"),
    ("ready_p90_ms", "ready p90 ms"),
    ("ready_p99_ms", "ready p99 ms"),
    ("ready_max", "ready max ms"),
]


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.1f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def table(
    a: dict[str, Any], b: dict[str, Any], va: dict[str, Any], vb: dict[str, Any]
) -> list[tuple[str, str, str]]:
    rows = [("verdict", va["verdict"].upper(), vb["verdict"].upper())]
    rows += [(label, _cell(a.get(k)), _cell(b.get(k))) for k, label in ROWS]
    checks_a = {c["name"]: c["verdict"] for c in va["checks"]}
    checks_b = {c["name"]: c["verdict"] for c in vb["checks"]}
    for name in list(dict.fromkeys([*checks_a, *checks_b])):
        rows.append((f"check {name}", checks_a.get(name, "n/a"), checks_b.get(name, "n/a")))
    return rows


def _chart(a: dict[str, Any], b: dict[str, Any], la: str, lb: str) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.report import figure_png

    if "_latency" not in a and "_latency" not in b:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.2))
    for stats, label in ((a, la), (b, lb)):
        lat = stats.get("_latency")
        if lat is None or not len(lat):
            continue
        lat = lat.sort_values("ms")
        cdf = lat["count"].cumsum() / lat["count"].sum()
        ax.plot(lat["ms"], cdf, label=label)
    ax.set_xscale("symlog")
    ax.set_xlabel("client ready latency ms (connect → first response)")
    ax.set_ylabel("fraction of served connections")
    ax.legend()
    ax.set_title("Ready latency CDF: delays as the clients felt them")
    return figure_png(fig)


def run(args: argparse.Namespace) -> int:
    from analysis.load import RunDirError, load_run
    from analysis.session import build_session

    dirs = [Path(args.run_a), Path(args.run_b)]
    for d in dirs:
        if not d.is_dir():
            print(f"harness compare: {d}: no such run directory", file=sys.stderr)
            return 2

    def say(msg: str) -> None:
        print(msg, flush=True)

    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    own = spark is None  # an active session belongs to the caller: never stop it
    if spark is None:
        say("starting Spark…")
        spark = build_session(args.spark_master, app_name="harness-compare")
    try:
        stats, verdicts = [], []
        for d in dirs:
            verdicts.append(_verdict(spark, d, args.reanalyze, say))
            say(f"client-side statistics for {d}…")
            run_ = load_run(spark, d)
            stats.append(client_stats(run_))
            run_.release()
    except RunDirError as exc:
        print(f"harness compare: {exc}", file=sys.stderr)
        return 2
    finally:
        if own:
            spark.stop()
    la, lb = (f"{d.name} ({s.get('target')})" for d, s in zip(dirs, stats, strict=True))
    rows = table(stats[0], stats[1], verdicts[0], verdicts[1])
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(la), *(len(r[1]) for r in rows))
    print(f"\n{'':<{w0}}  {la:<{w1}}  {lb}")
    for name, x, y in rows:
        print(f"{name:<{w0}}  {x:<{w1}}  {y}")
    out = Path(args.out) if args.out else dirs[0] / "report" / "compare.html"
    from analysis.report import render

    html = render(
        {"verdict": "compare"},
        [],
        None,
        template="compare.html.j2",
        rows=rows,
        la=la,
        lb=lb,
        chart=_chart(stats[0], stats[1], la, lb),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    print(f"\ncompare: {out}")
    return 0
