"""A small run's `harness analyze --gate` on the warm analysis server (`analysis/server.py`)
against Spark's own client/server, a warm local Spark Connect server, in one run.

Usage: .venv/bin/python -m bench.connect_vs_server RUN_DIR --site DIR [--warm 5] [--out FILE]

Rounds are interleaved: a cold analysis on each (the server started by it), then `--warm`
rounds of one analysis on each, A (the analysis server) before B (Connect). Each side judges
its own copy of RUN_DIR (in a scratch directory), so neither reads the other's report.

- A: `harness analyze COPY --gate` with ``HARNESS_ANALYSIS_SERVER`` set.
- B: this module's `--client COPY --gate`: `analysis.cli.run` in a Spark Connect session of
  PySpark's own warm local server (``spark.local.connect.reuse``, its discovery file in the
  scratch directory), started by the first client with the driver settings a small run's
  session gets (`analysis.session.build_session(small=True)`'s options, read from its
  builder: C1 only, the class archive, 3 g).

Per analysis: wall time of the client command, the client's CPU (its rusage), the server's
CPU (its live process tree from /proc, the difference over the analysis; a cold analysis
counts the server's start), the load average before it, and every check's verdict, judged
count and observation, compared between the two sides.

The Connect client needs packages the project does not install (pyspark's `connect`
extra): ``.venv/bin/pip install --target DIR 'grpcio>=1.76' 'grpcio-status>=1.76'
'googleapis-common-protos>=1.71' 'zstandard>=0.25'`` and pass ``--site DIR`` (put on the
client's PYTHONPATH only). Not a test: numbers depend on whoever else shares the cores;
compare the two sides' ratios round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from base import procfs
from bench.output import args_record, write_results

ROOT = Path(__file__).resolve().parent.parent


class _Captured(Exception):
    """`build_session`'s builder options, taken instead of starting a JVM."""


def small_run_options() -> dict[str, str]:
    """The options `build_session(small=True)` gives its builder, without starting Spark."""
    from pyspark.sql import SparkSession

    from analysis.session import build_session

    def capture(builder: Any) -> None:
        raise _Captured(dict(builder._options))

    with mock.patch.object(SparkSession.Builder, "getOrCreate", capture):
        try:
            build_session(small=True)
        except _Captured as got:
            return dict(got.args[0])
    raise RuntimeError("build_session started no builder")


def connect_session() -> Any:
    """A session of PySpark's warm local Connect server: static options seed the server
    the first client starts (they cannot be set on a session), SQL options each session."""
    from pyspark.sql import SparkSession

    options = small_run_options()
    master = options.pop("spark.master")
    static = {k: v for k, v in options.items() if not k.startswith("spark.sql.")}
    os.environ["PYSPARK_REMOTE_INIT_CONF_LEN"] = "1"
    os.environ["PYSPARK_REMOTE_INIT_CONF_0"] = json.dumps(static)
    builder = SparkSession.builder.remote(master).config("spark.local.connect.reuse", "true")
    for key, value in options.items():
        if key.startswith("spark.sql."):
            builder = builder.config(key, value)
    return builder.getOrCreate()


def client(argv: list[str]) -> int:
    """`harness analyze ARGV` in a Connect session (side B)."""
    from analysis import cli

    os.environ.pop("HARNESS_ANALYSIS_SERVER", None)
    parser = argparse.ArgumentParser(prog="harness analyze")
    cli.configure(parser)
    args = parser.parse_args(argv)
    spark = connect_session()
    try:
        return cli.run(args)
    finally:
        spark.stop()  # this client's session on the server; the server stays up


class Sides:
    """The two servers' places in one scratch directory."""

    def __init__(self, scratch: Path, run_dir: Path, site: Path) -> None:
        self.scratch = scratch
        self.site = site
        self.socket = scratch / "analysis.sock"
        self.discovery = scratch / "connect" / "connect-local.json"
        self.discovery.parent.mkdir(parents=True, exist_ok=True)
        self.runs = {side: scratch / f"run-{side}" for side in "AB"}
        for copy in self.runs.values():
            shutil.copytree(run_dir, copy)

    def env(self, side: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_ANALYSIS_SERVER",)}
        if side == "A":
            env["HARNESS_ANALYSIS_SERVER"] = str(self.socket)
        else:
            env["PYTHONPATH"] = str(self.site)
            env["SPARK_LOCAL_CONNECT_DISCOVERY"] = str(self.discovery)
        return env

    def command(self, side: str) -> list[str]:
        run = str(self.runs[side])
        if side == "A":
            return [sys.executable, "-m", "harness", "analyze", run, "--gate"]
        return [sys.executable, "-m", "bench.connect_vs_server", "--client", run, "--gate"]

    def server_pid(self, side: str) -> int | None:
        if side == "A":
            from analysis.remote import server_pid

            return server_pid(self.socket)
        try:
            return int(json.loads(self.discovery.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    def stop(self) -> None:
        from analysis.remote import remove_server

        remove_server(self.socket)
        subprocess.run(
            [sys.executable, "-m", "pyspark.sql.connect.local_server", "--stop"],
            env=self.env("B"),
            cwd=ROOT,
            capture_output=True,
            timeout=60,
            check=False,
        )


def _tree_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    user, system = procfs.tree_cpu_times(pid)
    return user + system


def analyse(sides: Sides, side: str, label: str, scratch: Path) -> dict[str, Any]:
    """One analysis on `side`, measured."""
    before_pid = sides.server_pid(side)
    before_cpu = _tree_cpu_s(before_pid)
    load = os.getloadavg()[0]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(
        sides.command(side),
        cwd=ROOT,
        env=sides.env(side),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = sides.server_pid(side)
    server = _tree_cpu_s(pid) - (before_cpu if pid == before_pid else 0.0)
    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    (scratch / f"{label}-{side}.log").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
    verdict_path = sides.runs[side] / "report" / "verdict.json"
    verdict = json.loads(verdict_path.read_text()) if verdict_path.exists() else {}
    row = {
        "side": side,
        "label": label,
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "client_cpu_s": round(own, 2),
        "server_cpu_s": round(server, 2),
        "cpu_s": round(own + server, 2),
        "load1": round(load, 2),
        "server_pid": pid,
        "verdict": verdict.get("verdict"),
        "checks": [
            [c["name"], c["verdict"], c.get("judged", 0), c.get("observed", "")]
            for c in verdict.get("checks", [])
        ],
    }
    shown = {k: v for k, v in row.items() if k != "checks"}
    print(json.dumps(shown), flush=True)
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per warm round, B over A; their medians; whether every analysis judged alike."""
    warm = [r for r in rows if r["label"] != "cold"]
    pairs = list(zip(warm[0::2], warm[1::2], strict=True))
    out: dict[str, Any] = {
        "verdicts_identical": all(r["checks"] == rows[0]["checks"] for r in rows)
        and bool(rows[0]["checks"]),
    }
    for key in ("wall_s", "client_cpu_s", "server_cpu_s", "cpu_s"):
        ratios = [b[key] / a[key] for a, b in pairs if a[key] > 0]
        out[key] = {
            "A_median": _median([a[key] for a, _ in pairs]),
            "B_median": _median([b[key] for _, b in pairs]),
            "B_over_A": [round(x, 2) for x in ratios],
            "B_over_A_median": _median(ratios),
            "cold_B_over_A": round(rows[1][key] / rows[0][key], 2) if rows[0][key] else None,
        }
    return out


def _median(values: list[float]) -> float | None:
    """None when there is nothing (no warm round, or an A that took nothing)."""
    return round(statistics.median(values), 2) if values else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--client"]:
        return client(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench.connect_vs_server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run_dir", type=Path, help="a finished small run (copied, not written)")
    parser.add_argument("--site", type=Path, required=True, help="the Connect client's packages")
    parser.add_argument("--warm", type=int, default=5, help="warm rounds after the cold one")
    parser.add_argument("--out", type=Path, default=None, help="results JSON (bench/results/)")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="connect-vs-server-"))
    sides = Sides(scratch, args.run_dir.resolve(), args.site.resolve())
    print(f"scratch (logs, copies, both servers' files): {scratch}", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        for label in ["cold", *(f"warm{i + 1}" for i in range(args.warm))]:
            rows.append(analyse(sides, "A", label, scratch))
            rows.append(analyse(sides, "B", label, scratch))
    finally:
        sides.stop()
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    write_results(
        {"args": args_record(args), "summary": summary, "rows": rows},
        "connect-vs-server",
        args.out,
    )
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
