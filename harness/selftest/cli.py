"""Prove the gate catches enforcement bugs: run each seeded acceptor fault against the
catalog scenario covering its rule (expecting FAIL), then the same scenarios without any
fault (expecting no FAIL). Prints a kill table; exit 0 only if every fault is caught and no
clean run fails (1 otherwise, 3 for a bad command line).
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from harness.runner.cli import add_noise, add_set_acceptor


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--faults", metavar="A,B", help="only these faults (default: all)")
    parser.add_argument(
        "--scenarios", metavar="X,Y", help="only faults run on these scenarios (default: all)"
    )
    parser.add_argument(
        "--ci", action="store_true", help="the fast CI subset (three faults on ci-gate)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="runs whose load goes at once, each with its own broker and acceptor (default 1; "
        "more share the machine's CPUs, so keep N small on a small machine)",
    )
    parser.add_argument("--list", action="store_true", help="print the plan and exit")
    parser.add_argument(
        "--reanalyze",
        type=Path,
        metavar="DIR",
        help="analyse the runs of an earlier selftest (runs/selftest-...) again, with the "
        "current checks, and rewrite its table",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs"), help="parent of the selftest folder (runs/)"
    )
    add_set_acceptor(parser, "for every run, e.g. acceptor.process.model=split")
    add_noise(parser)


def run(args: argparse.Namespace) -> int:
    from base.quota.faults import FAULTS
    from harness.selftest.plan import CI_FAULTS, PlanError, build_plan
    from harness.selftest.run import Selftest, run_job

    if args.reanalyze is not None:
        if not (args.reanalyze / "summary.json").is_file():
            print(f"harness selftest: --reanalyze {args.reanalyze}: no summary.json there")
            return 3
        st = Selftest.reanalyze(args.reanalyze)
        return _report(st.root, st.analyze())
    if not 1 <= args.jobs <= 16:
        print(f"harness selftest: --jobs={args.jobs}: expected 1..16")
        return 3
    faults = ",".join(CI_FAULTS) if args.ci and not args.faults else args.faults
    try:
        jobs = build_plan(faults, args.scenarios)
    except PlanError as exc:
        print(f"harness selftest: {exc}")
        return 3
    if args.list:
        rules = {f.name: f.rule for f in FAULTS}
        for j in jobs:
            rule = rules.get(j.fault or "", "control: no fault, must not fail")
            print(f"{j.fault or 'clean':30} {j.scenario:28} {rule}")
        return 0
    acceptor = dict(args.set_acceptor)
    st = Selftest(
        jobs,
        args.out,
        # several runs at once would each confine their brokers and loads to the same
        # "other" CPUs and share the loop's: placement is for one run on the machine
        run_one=partial(run_job, acceptor=acceptor, noise=args.noise, placement_off=args.jobs > 1),
        acceptor=acceptor,
        at_once=args.jobs,
        noise=args.noise,
    )
    return _report(st.root, st.run())


def _report(root: Path, summary: dict[str, Any]) -> int:
    print()
    print(f"{'fault':30} {'scenario':28} {'verdict':8} {'':9} failing checks / first witness")
    for r in summary["rows"]:
        mark = "caught" if r["caught"] else "SURVIVED"
        failing = ", ".join(r["failing"])
        print(f"{r['fault']:30} {r['scenario']:28} {r['verdict']:8} {mark:9} {failing}")
        if r["witness"]:
            print(f"{'':78} {r['witness'][:120]}")
    for r in summary["clean"]:
        mark = "FALSE FAIL" if r["verdict"] == "fail" else ""
        print(
            f"{'(clean)':30} {r['scenario']:28} {r['verdict']:8} {mark:9} {', '.join(r['failing'])}"
        )
    print()
    print(
        f"kill rate {len(summary['killed'])}/{summary['faults']} ({summary['kill_rate']:.0%}); "
        f"survivors: {', '.join(summary['survived']) or 'none'}; "
        f"false fails: {', '.join(summary['false_fails']) or 'none'}; "
        f"{summary['wall_s']:.0f} s"
    )
    print(f"SELFTEST: {'PASS' if summary['ok'] else 'FAIL'}")
    print(f"results: {root / 'summary.json'}, {root / 'index.html'}")
    return 0 if summary["ok"] else 1
