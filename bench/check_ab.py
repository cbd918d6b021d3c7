"""One check's code at another tree against this tree's, on the same loaded runs.

Usage:
  .venv/bin/python -m bench.check_ab --old-tree DIR --check MODULE:FUNCTION [--rounds 3] RUN...

DIR is a checkout of another commit (`git worktree add /tmp/old REV`); MODULE is a
module of this tree (`analysis.checks.secured`) and FUNCTION a check in it
(`check_principal_agreement`). The old code is loaded from DIR's copy of that module file
(it imports everything else from this tree). Each run is loaded once, with one warm
session, and its shared per-connection tables are built first, as in a full analysis;
then the old and the new check alternate for `--rounds` rounds. It prints each one's
median wall time and verdict per run: how a change to one check moves its cost, apart
from the JVM's start and the other checks.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def load_old(tree: Path, module: str) -> Any:
    path = tree / (module.replace(".", "/") + ".py")
    spec = importlib.util.spec_from_file_location(f"old_{module.replace('.', '_')}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no module file {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old-tree", type=Path, required=True)
    p.add_argument("--check", required=True, help="MODULE:FUNCTION")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("runs", nargs="+", type=Path)
    args = p.parse_args(argv)
    module, _, function = args.check.partition(":")
    new = getattr(importlib.import_module(module), function)
    old = getattr(load_old(args.old_tree, module), function)

    from analysis.frames import acceptor_conns, client_conns
    from analysis.load import load_run
    from analysis.session import build_session, sized_for

    spark = build_session(None, small=True)
    try:
        for run_dir in args.runs:
            run = load_run(spark, run_dir)
            times: dict[str, list[float]] = {"old": [], "new": []}
            verdicts: dict[str, str] = {}
            with sized_for(spark, run.history.count()):
                if run.has_source("client"):
                    client_conns(run).count()
                if run.has_source("acceptor"):
                    acceptor_conns(run).count()
                for _ in range(args.rounds):
                    for label, fn in (("old", old), ("new", new)):
                        t = time.monotonic()
                        verdicts[label] = fn(run).verdict
                        times[label].append(time.monotonic() - t)
            cells = "  ".join(
                f"{label} {statistics.median(times[label]):.2f} s ({verdicts[label]})"
                for label in ("old", "new")
            )
            print(f"{run_dir.name[:44]:<44} {cells}", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
