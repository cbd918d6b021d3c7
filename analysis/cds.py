"""Class-data sharing for the analysis JVM: the classes a small run's analysis loads, read
from one archive instead of from Spark's jars (the JDK's dynamic AppCDS).

Why: a small run's analysis is mostly the JVM's own start-up and first jobs (loading and
verifying thousands of Spark, Catalyst and Parquet classes), not its data. With the
archive, `harness analyze` of a 5,392-event `eviction-order` run took 13.8–14.3 s wall
against 16.2–17.4 s without (three runs each, same machine and run).

The archive is valid for one JVM build and one Spark classpath only, so its name carries
both (`session.archive_path`); the JVM checks it again when it maps it and, on any mismatch,
starts without it (`-Xshare:auto`: slower, never wrong). It is made once, by `make setup`
(`python -m analysis.cds`), from the analysis of a small synthetic run in a JVM of its own
that writes it on exit (`-XX:ArchiveClassesAtExit`); written under a temporary name, tried
by a JVM, then renamed, so a half-written archive is never read (a JVM may abort on one).
`HARNESS_SPARK_CDS=off` starts every JVM without it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from analysis.session import CDS_DUMP_ENV, archive_path, java_path


def build(progress: bool = True) -> Path | None:
    """Make the archive unless it exists; its path (None: no java)."""
    path = archive_path()
    if path is None:
        print("spark-cds: no java found; the analysis JVM starts without an archive")
        return None
    if path.is_file():
        if progress:
            print(f"spark-cds: archive present ({path})")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    if progress:
        print("spark-cds: making the analysis JVM's class archive (once, ~30 s)", flush=True)
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
        env = {**os.environ, CDS_DUMP_ENV: str(tmp)}
        res = subprocess.run(
            [sys.executable, "-m", "analysis.cds", "--dump-from", work],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
    why = _unusable(tmp) if res.returncode == 0 else f"exit {res.returncode}: {res.stderr[-600:]}"
    if why:
        tmp.unlink(missing_ok=True)
        print(f"spark-cds: no archive made ({why}); the analysis JVM starts without one")
        return None
    os.replace(tmp, path)
    if progress:
        print(f"spark-cds: archive made ({path}, {path.stat().st_size // 2**20} MB)")
    return path


def _unusable(archive: Path) -> str | None:
    """Why the JVM could not start with `archive` (None: it can). A JVM handed a damaged
    archive may abort rather than start without it (a truncated one: SIGABRT), so one is
    tried before it gets its final name."""
    if not archive.is_file():
        return "the JVM wrote none"
    java = java_path()
    assert java is not None
    with tempfile.TemporaryDirectory(prefix="spark-cds-try-") as cwd:  # its hs_err file
        res = subprocess.run(
            # auto, as the analysis starts it: a JVM without Spark's classpath maps none of it
            [str(java), f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-version"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
        )
    return None if res.returncode == 0 else f"a JVM would not start with it: {res.stderr[-300:]}"


def _dump_from(work: Path) -> None:
    """Analyse a small synthetic run, then end the JVM and wait for it: it writes the
    archive as it exits."""
    from pyspark import SparkContext

    from analysis import analyze_run
    from analysis.synth import generate

    run_dir = work / "run"
    generate(run_dir)
    analyze_run(run_dir, progress=lambda _msg: None)
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = gateway.proc
        gateway.shutdown()
        proc.stdin.close()  # the gateway server exits when its stdin closes
        proc.wait(timeout=300)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.cds", description=__doc__)
    ap.add_argument("--dump-from", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dump_from is not None:
        _dump_from(args.dump_from)
        return 0
    build()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
