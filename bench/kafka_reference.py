"""The catalog against Kafka's own enforcement: a reference table next to the acceptor.

    .venv/bin/python -m bench.kafka_reference [--scenarios a,b] [--acceptor]
        [--acceptor-runs DIR] [--out runs/kafka-reference] [--doc docs/kafka-reference.md]
    .venv/bin/python -m bench.kafka_reference --versions 2.8.2,3.6.2,4.4.0 [--scenarios a,b]

Runs every catalog scenario whose `targets` include `broker` with
`harness run SCENARIO --target broker --launcher local` (the JMX exporter on), one at a
time, and reads each run's verdict.json. A scenario whose phases connect from each
worker's own address (`source_ips: per-worker`) runs with `--workers N --worker-netns`
(its N worker hosts as network namespaces: root only, else it is skipped with the
reason). The acceptor's verdict comes from a run made
here (`--acceptor`) or from the newest `<scenario>-acceptor-*` run under
`--acceptor-runs`. On a broker target the acceptor-side checks a scenario expects are
judged by their broker-side equivalents (analysis.checks.broker_side.BROKER_EQUIVALENTS);
the table shows the runner's verdict and the verdict with those expectations, the checks
that did not pass, and how close the span checks came to their bounds (peak / allowed).
The table is written between the markers in the doc; the raw results go to
`<out>/results.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- kafka-reference:begin -->", "<!-- kafka-reference:end -->"
VERSIONS_DOC = Path("docs/kafka-versions.md")
SPAN_CHECKS = ("client_broker_rate_span", "client_listener_rate_span", "client_ip_rate_span")
#: count and throttle checks whose peak / limit is also reported (how tight on Kafka)
PEAK_CHECKS = (
    "client_connection_count",
    "kafka_metric_connection_count",
    "client_ip_concurrency",
    "client_request_throttle",
    "kafka_metric_throttle_bounded",
)


def say(msg: str) -> None:
    print(f"[kafka-reference] {msg}", flush=True)


#: Issue 12's reference set first: these must PASS on Kafka; the rest follow.
FIRST = ("ci-gate", "demo-storm", "broker-rate", "ip-rate-override", "quota-change")


def broker_scenarios() -> list[str]:
    from harness.runner.catalog import entries

    names = [e.scenario.name for e in entries() if e.scenario and "broker" in e.scenario.targets]
    return [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]


def worker_hosts_args(scenario: str) -> list[str] | str:
    """``--workers N --worker-netns`` for a catalog scenario with a `per-worker` phase (its
    N worker hosts made here as namespaces), [] for the rest; a string: why it cannot run
    on this machine (namespaces need root)."""
    from harness.runner.catalog import entries
    from harness.runner.scenario import PER_WORKER

    sc = next((e.scenario for e in entries() if e.scenario and e.scenario.name == scenario), None)
    if sc is None or not any(getattr(p, "source_ips", "") == PER_WORKER for p in sc.load):
        return []
    from harness.runner import netns

    why = netns.permitted()
    if why:
        return f"its {sc.workers} worker hosts need network namespaces: {why}"
    return ["--workers", str(sc.workers), "--worker-netns"]


def catalog_table_verdicts(doc: Path = Path("docs/scenarios.md")) -> dict[str, str]:
    """Acceptor verdicts from the catalog table in docs/scenarios.md (an earlier run)."""
    out: dict[str, str] = {}
    if not doc.is_file():
        return out
    for line in doc.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1] == "acceptor" and cells[0].startswith("`"):
            out[cells[0].strip("`")] = cells[2].split(" ")[0]
    return out


def run_one(
    scenario: str,
    target: str,
    out: Path,
    kafka_version: str | None = None,
    extra: Sequence[str] = (),
) -> Path | None:
    before = set(out.glob(f"{scenario}-{target}-*")) if out.exists() else set()
    log = out / f"{scenario}-{target}.log"
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "harness", "run", scenario, "--target", target]
    argv += ["--launcher", "local", "--out", str(out), *extra]
    if kafka_version:
        argv += ["--kafka-version", kafka_version]
    t0 = time.monotonic()
    say(f"{scenario} on {target}" + (f" (Kafka {kafka_version})" if kafka_version else "")
        + f": running (log {log})")  # fmt: skip
    with open(log, "w") as fh:
        subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, timeout=1800, check=False)
    new = sorted(set(out.glob(f"{scenario}-{target}-*")) - before)
    dirs = [p for p in new if p.is_dir()]
    say(f"{scenario} on {target}: done in {time.monotonic() - t0:.0f} s")
    return dirs[-1] if dirs else None


def run_row(
    scenario: str, target: str, out: Path, reuse: bool, kafka_version: str | None = None
) -> dict[str, Any]:
    """One scenario on ``target``: the newest run under ``out`` (``reuse``) or a new one,
    summarised; a scenario this machine cannot run is skipped with the reason."""
    found = newest(out, scenario, target) if reuse else None
    if found is None:
        extra = worker_hosts_args(scenario)
        if isinstance(extra, str):
            say(f"{scenario} on {target}: skipped, {extra}")
            return {"verdict": "skipped", "reason": extra}
        found = run_one(scenario, target, out, kafka_version=kafka_version, extra=extra)
    return summarise(found)


def newest(runs: Path, scenario: str, target: str) -> Path | None:
    found = sorted(
        (
            p
            for p in runs.glob(f"{scenario}-{target}-*")
            if (p / "report" / "verdict.json").is_file()
        ),
        key=lambda p: p.name,
    )
    return found[-1] if found else None


def judged_on_broker(verdict: dict[str, Any]) -> tuple[str, list[str]]:
    """The run's verdict with the scenario's expected checks mapped to the broker side."""
    from analysis.checks.base import CheckResult
    from analysis.checks.broker_side import broker_expectations
    from analysis.verdict import overall

    results = []
    for c in verdict.get("checks", []):
        r = CheckResult(
            c["name"],
            c["verdict"],
            c.get("observed", ""),
            c.get("expected", ""),
            judged=int(c.get("judged") or 0),
            exercised=c.get("exercised"),
            peak=c.get("peak"),
            limit=c.get("limit"),
            judges_limit=bool(c.get("judges_limit")),
        )
        results.append(r)
    expect = list((verdict.get("expect") or {}).get("checks") or [])
    return overall(results, broker_expectations(expect))


def summarise(run_dir: Path | None) -> dict[str, Any]:
    out: dict[str, Any]
    if run_dir is None or not (run_dir / "report" / "verdict.json").is_file():
        return {"verdict": "no run", "run": str(run_dir) if run_dir else None}
    v = json.loads((run_dir / "report" / "verdict.json").read_text())
    meta = (
        json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").is_file() else {}
    )
    v.setdefault("expect", meta.get("expect") or {})
    checks = v.get("checks", [])
    not_passing = [
        f"{c['name']}={c['verdict']}" for c in checks if c["verdict"] in ("fail", "unknown")
    ]
    spans = {
        c["name"]: f"{c['peak']:g}/{c['limit']:g}"
        for c in checks
        if c["name"] in SPAN_CHECKS and c.get("peak") is not None and c.get("limit")
    }
    peaks = {
        c["name"]: f"{c['peak']:g}/{c['limit']:g}"
        for c in checks
        if c["name"] in PEAK_CHECKS and c.get("peak") is not None and c.get("limit")
    }
    out = {
        "run": str(run_dir),
        "verdict": v.get("verdict"),
        "not_passing": not_passing,
        "spans": spans,
        "peaks": peaks,
        "kafka": (meta.get("versions") or {}).get("kafka"),
        "replay_agreement": next(
            (c.get("observed") for c in checks if c["name"] == "model_replay"), None
        ),
    }
    if meta.get("target") == "broker":
        out["broker_verdict"], out["broker_reasons"] = judged_on_broker(v)
    return out


def table(rows: list[dict[str, Any]], kafka: str) -> str:
    lines = [
        f"Kafka {kafka} (local launcher, JMX exporter on) vs the acceptor; generated by "
        "`make kafka-reference` (bench/kafka_reference.py).",
        "",
        "| scenario | Kafka: runner verdict | Kafka: broker-side expectations "
        "| Kafka: checks not passing | span peak / allowed | acceptor |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        k, a = r["broker"], r["acceptor"]
        spans = ", ".join(f"{n.removeprefix('client_')} {v}" for n, v in k.get("spans", {}).items())
        lines.append(
            f"| `{r['scenario']}` | {str(k.get('verdict')).upper()} | "
            f"{str(k.get('broker_verdict', '-')).upper()} | "
            f"{', '.join(k.get('not_passing', [])) or k.get('reason') or '-'} | {spans or '-'} | "
            f"{_shout(str(a.get('verdict')))} |"
        )
    return "\n".join(lines)


def _shout(verdict: str) -> str:
    """Upper-case the verdict word only: "pass (docs/scenarios.md)" -> "PASS (docs/…)"."""
    word, _, rest = verdict.partition(" ")
    return f"{word.upper()} {rest}".strip()


def write_doc(doc: Path, text: str, begin: str = BEGIN, end: str = END) -> None:
    body = doc.read_text() if doc.exists() else ""
    block = f"{begin}\n{text}\n{end}"
    if begin in body and end in body:
        head, _, rest = body.partition(begin)
        _, _, tail = rest.partition(end)
        body = head + block + tail
    else:
        body = body.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(body)


_SHORT = {
    "client_broker_rate_span": "broker",
    "client_listener_rate_span": "listener",
    "client_ip_rate_span": "ip",
    "client_connection_count": "count",
    "kafka_metric_connection_count": "Kafka count",
    "client_ip_concurrency": "ip count",
    "client_request_throttle": "throttle ms",
    "kafka_metric_throttle_bounded": "Kafka throttle avg ms",
}


def passes_table(passes: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """Several passes side by side: per scenario the broker-side verdict of each pass, the
    checks that did not pass, and peak / allowed of each span and count check per pass."""
    names: list[str] = []
    for _, rows in passes:
        names += [r["scenario"] for r in rows if r["scenario"] not in names]
    head = " | ".join(f"{label}" for label, _ in passes)
    lines = [
        f"| scenario | {head} | not passing (pass: checks) | peak / allowed per pass |",
        "|---|" + "---|" * len(passes) + "---|---|",
    ]
    for name in names:
        verdicts, failing, peaks = [], [], []
        for label, rows in passes:
            row = next((r for r in rows if r["scenario"] == name), None)
            if row is None:
                verdicts.append("-")
                continue
            b = row["broker"]
            verdicts.append(str(b.get("broker_verdict") or b.get("verdict")).upper())
            bad = [x for x in b.get("not_passing", []) if not x.startswith("model_replay=")]
            bad += [b["reason"]] if b.get("reason") else []
            if bad:
                failing.append(f"{label}: {', '.join(bad)}")
            vals = {**b.get("spans", {}), **b.get("peaks", {})}
            if vals:
                peaks.append(
                    f"{label}: " + ", ".join(f"{_SHORT.get(k, k)} {v}" for k, v in vals.items())
                )
        lines.append(
            f"| `{name}` | {' | '.join(verdicts)} | {'; '.join(failing) or '-'} | "
            f"{'<br>'.join(peaks) or '-'} |"
        )
    return "\n".join(lines)


MATRIX_BEGIN, MATRIX_END = "<!-- kafka-matrix:begin -->", "<!-- kafka-matrix:end -->"


def matrix_main(versions: list[str], names: list[str], out: Path, doc: Path, reuse: bool) -> int:
    """``--versions``: every scenario on every release (broker target, the local launcher;
    ZooKeeper mode where the release defaults to it), one column per release: the verdict
    judged on the broker side, the checks that did not pass, and peak / allowed. Writes
    ``<out>/matrix.json``, ``matrix.md``, ``matrix.html`` and the table into ``doc``."""
    passes: list[tuple[str, list[dict[str, Any]]]] = []
    for version in versions:
        vout = out / version
        rows: list[dict[str, Any]] = []
        for name in names:
            row = run_row(name, "broker", vout, reuse, kafka_version=version)
            rows.append({"scenario": name, "broker": row})
            say(f"Kafka {version} {name}: {row.get('broker_verdict') or row.get('verdict')}")
        passes.append((version, rows))
        out.mkdir(parents=True, exist_ok=True)
        (out / "matrix.json").write_text(json.dumps(dict(passes), indent=2))
    text = (
        "Release × scenario on the broker target (`python -m bench.kafka_reference --versions "
        f"{','.join(versions)}`); each cell the verdict with the scenario's expectations "
        "judged on the broker side.\n\n" + passes_table(passes)
    )
    (out / "matrix.md").write_text(text + "\n")
    (out / "matrix.html").write_text(_html(text))
    write_doc(doc, text, MATRIX_BEGIN, MATRIX_END)
    say(f"matrix written to {doc} and {out / 'matrix.html'}; results in {out / 'matrix.json'}")
    return 0


def _html(markdown: str) -> str:
    """The matrix's markdown table as a small HTML page."""
    import html

    rows = [ln for ln in markdown.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    cells = [[html.escape(c.strip()).replace("&lt;br&gt;", "<br>") for c in r.strip("|").split("|")]
             for r in rows]  # fmt: skip
    head = "".join(f"<th>{c}</th>" for c in cells[0]) if cells else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in cells[1:])
    intro = html.escape(markdown.split("\n\n")[0])
    return (
        "<!doctype html><meta charset=utf-8><title>Kafka release matrix</title>"
        "<style>td,th{border:1px solid #ccc;padding:4px;font:13px sans-serif}</style>"
        f"<p>{intro}</p><table><tr>{head}</tr>{body}</table>\n"
    )


def merge_main(specs: list[str]) -> int:
    """``--merge LABEL=results.json ...``: print the passes table (markdown) to stdout."""
    passes = []
    for spec in specs:
        label, _, path = spec.partition("=")
        passes.append((label, json.loads(Path(path).read_text())))
    print(passes_table(passes))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", help="comma-separated (default: every broker-target scenario)")
    ap.add_argument("--acceptor", action="store_true", help="run the acceptor side too")
    ap.add_argument("--acceptor-runs", type=Path, default=Path("runs"))
    ap.add_argument("--out", type=Path, default=Path("runs/kafka-reference"))
    ap.add_argument("--doc", type=Path, default=Path("docs/kafka-reference.md"))
    ap.add_argument("--reuse", action="store_true", help="use existing broker runs under --out")
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="LABEL=RESULTS",
        help="print a table of several passes' results.json side by side, and exit",
    )
    ap.add_argument(
        "--versions",
        help="comma-separated Kafka releases: the matrix of release × scenario instead "
        "(its table goes into docs/kafka-versions.md unless --doc says otherwise)",
    )
    args = ap.parse_args(argv)
    if args.merge:
        return merge_main(args.merge)
    names = args.scenarios.split(",") if args.scenarios else broker_scenarios()
    if args.versions:
        doc = args.doc if args.doc != Path("docs/kafka-reference.md") else VERSIONS_DOC
        out = args.out if args.out != Path("runs/kafka-reference") else Path("runs/kafka-matrix")
        return matrix_main(args.versions.split(","), names, out, doc, args.reuse)
    say(f"{len(names)} scenario(s): {', '.join(names)}; runs under {args.out}")
    rows: list[dict[str, Any]] = []
    earlier = catalog_table_verdicts()
    for name in names:
        broker = run_row(name, "broker", args.out, args.reuse)
        acc = run_row(name, "acceptor", args.out, False) if args.acceptor else {"verdict": "no run"}
        if acc["verdict"] == "no run":
            adir = newest(args.acceptor_runs, name, "acceptor") or newest(
                args.out, name, "acceptor"
            )
            acc = summarise(adir)
        if acc["verdict"] == "no run" and name in earlier:
            acc = {"verdict": f"{earlier[name]} (docs/scenarios.md)"}
        rows.append({"scenario": name, "broker": broker, "acceptor": acc})
        say(
            f"{name}: Kafka {rows[-1]['broker'].get('verdict')} "
            f"(broker-side {rows[-1]['broker'].get('broker_verdict')}), "
            f"acceptor {rows[-1]['acceptor'].get('verdict')}"
        )
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2))
        kafka = next((b["kafka"] for b in (r["broker"] for r in rows) if b.get("kafka")), "?")
        write_doc(args.doc, table(rows, str(kafka)))  # after each: a cut-short run keeps its rows
    say(f"table written to {args.doc}; results in {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
