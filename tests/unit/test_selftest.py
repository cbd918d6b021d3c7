"""`harness selftest`: the fault->scenario plan and the kill table (no runs: injected)."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path

import pytest

from base.quota.faults import FAULTS
from harness.runner.catalog import load
from harness.selftest.plan import CI_FAULTS, FAULT_SCENARIOS, Job, PlanError, build_plan
from harness.selftest.run import JobResult, Selftest, summarize


def test_every_fault_has_scenarios_that_exist_and_target_the_acceptor() -> None:
    assert set(FAULT_SCENARIOS) == {f.name for f in FAULTS}
    for fault, scenarios in FAULT_SCENARIOS.items():
        assert scenarios, fault
        for name in scenarios:
            assert "acceptor" in load(name).targets, (fault, name)


def test_ci_subset_is_three_faults_on_one_short_scenario() -> None:
    jobs = build_plan(",".join(CI_FAULTS))
    assert len(CI_FAULTS) >= 3
    assert {j.scenario for j in jobs} == {"ci-gate"}
    assert [j.fault for j in jobs if j.fault is None] == [None]  # one clean run
    assert load("ci-gate").duration <= 20


def test_plan_runs_faults_then_one_clean_run_per_scenario() -> None:
    jobs = build_plan()
    faulty = [j for j in jobs if j.fault]
    clean = [j for j in jobs if j.fault is None]
    assert jobs == faulty + clean
    assert sorted(j.scenario for j in clean) == sorted({j.scenario for j in faulty})
    only = build_plan(scenarios="broker-rate")
    assert {j.scenario for j in only} == {"broker-rate"}
    assert {j.fault for j in only if j.fault} == {
        f for f, s in FAULT_SCENARIOS.items() if "broker-rate" in s
    }


@pytest.mark.parametrize(
    ("faults", "scenarios", "message"),
    [
        ("nope", None, "unknown"),
        (None, "demo-stormy", "cover no fault"),
        ("delay_doubled", "ci-gate", "no fault"),
    ],
)
def test_bad_selections_are_refused(
    faults: str | None, scenarios: str | None, message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        build_plan(faults, scenarios)


def r(
    fault: str | None, verdict: str, scenario: str = "s", failing: tuple[str, ...] = ()
) -> JobResult:
    return JobResult(scenario, fault, verdict, list(failing), witness="w" if failing else "")


def test_caught_only_when_the_clean_run_does_not_fail_too() -> None:
    s = summarize(
        [
            r("a", "fail", failing=("x",)),
            r("b", "pass"),
            r("c", "unknown"),
            r(None, "pass"),
            r("d", "fail", "t", ("y", "z")),
            r(None, "fail", "t", ("y",)),
        ]
    )
    assert s["killed"] == ["a", "d"]  # d adds z to what the clean run of t fails
    assert s["survived"] == ["b", "c"]
    assert s["false_fails"] == ["t"]
    assert not s["ok"]
    d = next(row for row in s["rows"] if row["fault"] == "d")
    assert d["new_failures"] == ["z"] and d["caught"]
    same = summarize([r("e", "fail", "t", ("y",)), r(None, "fail", "t", ("y",))])
    assert same["survived"] == ["e"]
    assert summarize([r("a", "fail", failing=("x",)), r(None, "pass")])["ok"]


def test_selftest_writes_summary_and_html_linking_runs(tmp_path: Path) -> None:
    def fake(job: Job, runs: Path, log: Path) -> JobResult:
        run_dir = runs / job.slug
        (run_dir / "report").mkdir(parents=True)
        (run_dir / "report" / "report.html").write_text("r")
        verdict = "fail" if job.fault else "pass"
        res = r(job.fault, verdict, job.scenario, ("ip_rate_span",) if job.fault else ())
        res.run_dir, res.report = str(run_dir), str(run_dir / "report" / "report.html")
        return res

    out: list[str] = []

    class Sink:
        def write(self, text: str) -> int:
            out.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    st = Selftest(
        build_plan(",".join(CI_FAULTS)),
        tmp_path,
        run_one=fake,
        analyze_one=lambda res, spark, log: res,
        spark=lambda: None,
        say=Sink(),  # type: ignore[arg-type]
        stamp="T",
    )
    summary = st.run()
    assert summary["ok"] and summary["kill_rate"] == 1.0
    saved = json.loads((tmp_path / "selftest-T" / "summary.json").read_text())
    assert saved["killed"] == sorted(CI_FAULTS)
    page = (tmp_path / "selftest-T" / "index.html").read_text()
    assert 'href="runs/clean--ci-gate/report/report.html"' in page
    assert any("CAUGHT" in line for line in out)
    again = Selftest.reanalyze(
        tmp_path / "selftest-T", analyze_one=lambda res, spark, log: res, spark=lambda: None
    )
    assert [(r.fault, r.verdict) for r in again.results] == [
        (r.fault, r.verdict) for r in st.results
    ]
    assert again.analyze()["ok"]


def test_extra_acceptor_properties_reach_every_run_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harness selftest --set-acceptor K=V`: every run's acceptor gets it beside its fault,
    each run a `harness run SCENARIO --no-analyze` of its own."""
    import subprocess

    from harness.selftest import run as selftest_run
    from harness.selftest.run import run_job

    seen: list[list[str]] = []

    def recorded(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        out = Path(argv[argv.index("--out") + 1])
        (out / f"run{len(seen)}" / "history" / "acceptor").mkdir(parents=True)
        (out / f"run{len(seen)}" / "history" / "acceptor" / "a.parquet").touch()
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(selftest_run.subprocess, "run", recorded)
    extra = {"acceptor.process.model": "split"}
    st = Selftest(
        build_plan("skip_ip_rate_check"),
        tmp_path,
        run_one=partial(run_job, acceptor=extra),
        analyze_one=lambda res, spark, log: res,
        spark=lambda: None,
        stamp="T",
        acceptor=extra,
    )
    summary = st.run()
    props = [[a for a in argv if "=" in a] for argv in seen]
    assert props == [
        ["acceptor.process.model=split", "harness.test.fault=skip_ip_rate_check"],
        ["acceptor.process.model=split"],  # the clean run
    ]
    assert all(argv[3:7] == ["run", "ci-gate", "--target", "acceptor"] for argv in seen)
    assert all("--no-analyze" in argv for argv in seen)
    assert [r["verdict"] for r in summary["clean"]] == ["recorded"]
    saved = json.loads((tmp_path / "selftest-T" / "summary.json").read_text())
    assert saved["acceptor_properties"] == extra


def test_jobs_run_at_once_and_keep_the_plans_order(tmp_path: Path) -> None:
    """`--jobs N`: N loads at a time (each waits here for the other: run one after the
    other, the barrier breaks), their results in the plan's order whichever ends first, and
    the Spark session started while they run."""
    import threading

    jobs = [Job("ci-gate", "skip_ip_rate_check"), Job("ci-gate", None)]
    both = threading.Barrier(2, timeout=10)
    started: list[str] = []

    def together(job: Job, runs: Path, log: Path) -> JobResult:
        both.wait()
        if job.fault:  # the first job ends last
            time.sleep(0.2)
        return r(job.fault, "fail" if job.fault else "pass", job.scenario)

    def spark() -> object:
        started.append("spark")
        return None

    st = Selftest(
        jobs,
        tmp_path,
        run_one=together,
        analyze_one=lambda res, spark, log: res,
        spark=spark,
        stamp="T",
        at_once=2,
    )
    summary = st.run()
    assert [(res.fault, res.verdict) for res in st.results] == [
        ("skip_ip_rate_check", "fail"),
        (None, "pass"),
    ]
    assert summary["ok"] and started == ["spark"]


def test_a_run_that_broke_is_an_error_naming_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from harness.selftest import run as selftest_run
    from harness.selftest.run import run_job

    folder = True

    def broke(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if folder:  # the run's folder, with what broke in its run.json
            run_dir = Path(argv[argv.index("--out") + 1]) / "run1"
            run_dir.mkdir(parents=True)
            (run_dir / "run.json").write_text(json.dumps({"error": "broker did not start"}))
        return subprocess.CompletedProcess(argv, 3)

    monkeypatch.setattr(selftest_run.subprocess, "run", broke)
    log = tmp_path / "job.log"
    res = run_job(Job("ci-gate", None), tmp_path / "runs", log)
    assert res.verdict == "error" and res.run_dir == str(
        tmp_path / "runs" / "clean--ci-gate" / "run1"
    )
    assert res.error == "broker did not start"
    folder = False  # no folder made (a bad command line): the exit code says it
    res = run_job(Job("ci-gate", None), tmp_path / "runs2", log)
    assert res.verdict == "error" and res.run_dir is None
    assert res.error == f"harness run exited 3 (its output: {log})"
