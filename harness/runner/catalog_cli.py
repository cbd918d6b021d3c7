"""List the scenario catalog: each scenario, what it covers, its length and expected checks."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="show one scenario in full")
    parser.add_argument(
        "--check", action="store_true", help="validate every file; exit 1 if one is broken"
    )
    parser.add_argument(
        "--runs",
        metavar="DIR",
        help="summarise the runs under DIR as a markdown table (verdict, durations per target)",
    )


def run(args: argparse.Namespace) -> int:
    from harness.runner.catalog import catalog_dir, entries, load
    from harness.runner.scenario import ScenarioError
    from harness.runner.schedule import build_timeline

    if args.runs:
        from pathlib import Path

        from harness.runner.summary import markdown_table, summarise

        print(markdown_table(summarise(Path(args.runs))))
        return 0
    if args.name:
        try:
            sc = load(args.name)
        except ScenarioError as exc:
            print(f"harness scenarios: {exc}")
            return 1
        print(f"{sc.name} ({sc.source})\n  {sc.description}")
        print(f"  covers: {', '.join(sc.covers)}")
        print(f"  targets: {', '.join(sc.targets)} (default {sc.target}); {sc.duration:g}s of load")
        print(f"  limits: {dict(sc.limits)}  ip_quotas: {dict(sc.ip_quotas)}")
        for ev in build_timeline(sc):
            print(f"  {ev.at:6.1f}s  {ev.label}")
        for t in sc.targets:
            e = sc.expect_for(t)
            print(f"  expect on {t}: {e.verdict}; checks {', '.join(e.checks)}")
        return 0
    broken = 0
    rows = []
    all_entries = entries()
    for entry in all_entries:
        if entry.scenario is None:
            broken += 1
            rows.append((entry.path.stem, "BROKEN", "", entry.error or ""))
            continue
        sc = entry.scenario
        rows.append((sc.name, f"{sc.duration:g}s", "/".join(sc.targets), ", ".join(sc.covers)))
        rows.append(
            ("", "", "", "checks: " + ", ".join(sc.expect.checks) + f" -> {sc.expect.verdict}")
        )
    w0 = max([len(r[0]) for r in rows] + [8])
    print(f"{'scenario':{w0}}  {'load':>5}  {'targets':16}  covers / expected checks")
    for name, dur, targets, what in rows:
        print(f"{name:{w0}}  {dur:>5}  {targets:16}  {what}")
    print(
        f"\n{len(all_entries)} scenarios in {catalog_dir()}; "
        "`harness scenarios NAME` shows one, `harness run NAME` runs it"
    )
    return 1 if broken else 0
