"""compose/demo.py runs through the runner: its `ComposeTarget` and `ComposeLoad` are what
`Orchestrator` is given, so run.json, the runner's rows, the phase rows, the samplers, the
shutdown order and the analysis are `harness run`'s own. Here without a Docker engine: the
stack's synchronous calls are recorded (and `up -d` writes the fronts' ready files, as the
acceptor containers would), the load's compose process is a process that exits at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

COMPOSE = Path(__file__).resolve().parents[2] / "compose"

pytestmark = pytest.mark.local  # it picks free loopback ports (base.localnet)


def _demo() -> Any:
    sys.path.insert(0, str(COMPOSE))
    try:
        import demo
    finally:
        sys.path.remove(str(COMPOSE))
    return demo


def _rows(history: Path) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for f in sorted(history.glob("harness/*.parquet")):
        t = pq.read_table(f, columns=["event", "detail"]).to_pydict()
        out += [
            (e, json.loads(d) if d else {}) for e, d in zip(t["event"], t["detail"], strict=True)
        ]
    return out


def test_a_compose_run_is_the_runners_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo = _demo()
    from harness.runner import catalog
    from harness.runner.admin_changes import Changes
    from harness.runner.orchestrator import Orchestrator, RunOptions

    calls: list[tuple[str, ...]] = []
    quotas: list[str] = []

    def compose(stack: Any, *a: str, check: bool = True, timeout: float = 300) -> int:
        calls.append(a)
        if a[:2] == ("up", "-d"):  # each acceptor container writes its ready file
            for props in sorted(stack.run_dir.glob("acceptor*.properties")):
                listeners = dict(
                    line.split("=", 1) for line in props.read_text().splitlines() if "=" in line
                )["listeners"]
                ready = {
                    name: {"host": "127.0.0.1", "port": int(addr.rsplit(":", 1)[1])}
                    for name, addr in (x.split("://") for x in listeners.split(","))
                }
                ready_path = props.with_name(props.name.replace(".properties", ".ready.json"))
                ready_path.write_text(json.dumps({"listeners": ready}))
        return 0

    monkeypatch.setattr(demo.Stack, "__call__", compose)
    monkeypatch.setattr(demo, "wait_kafka", lambda port, deadline, brokers=1: None)
    monkeypatch.setattr(Changes, "apply_initial_quotas", lambda self: quotas.append(self.bootstrap))
    said: list[str] = []
    monkeypatch.setattr(demo, "say", said.append)

    sc = catalog.load("ci-gate")
    stack = demo.Stack([sys.executable, "-c", "pass"])  # the load's `compose up`: exits at once
    opts = RunOptions("acceptor", out=tmp_path, duration=1.0, analyze=False, placement="off")
    orch = Orchestrator(
        sc,
        opts,
        said.append,
        target=lambda plan: demo.ComposeTarget(plan, stack, dict),
        launcher=demo.ComposeLoad(stack),
        label="compose",
        notes={"launcher": "compose"},
    )
    stack.attach(orch.rd.root, orch.run_id)
    result = orch.run()

    assert result.started and result.error is None, said
    assert "-compose-" in orch.run_id
    assert calls[0] == ("up", "-d", "kafka", "acceptor")
    assert [c[0] for c in calls[1:]] == ["stop", "logs", "down"]  # the stack down at the end
    meta = json.loads((orch.rd.root / "run.json").read_text())
    assert meta["launcher"] == "compose" and meta["target"] == "acceptor"
    port = int(meta["listeners"]["CLIENT"].rsplit(":", 1)[1])
    assert quotas == [f"127.0.0.1:{port}"]  # the scenario's quotas, at the acceptor
    props = (orch.rd.root / "acceptor.properties").read_text()
    assert f"listeners=CLIENT://127.0.0.1:{port}" in props
    assert "listener.name.client.upstream=127.0.0.1:" in props
    env = (orch.rd.root / "compose.env").read_text()
    assert "--master" in env and "--expect-workers 2" in env and "HARNESS_SERVER_PROPERTIES" in env
    events = [e for e, _ in _rows(orch.rd.history)]
    for event in ("config", "run_start", "phase_start", "phase_end", "run_end"):
        assert event in events, events
    config = next(d for e, d in _rows(orch.rd.history) if e == "config")
    assert config["origin"] == "runner" and config["kafka.version"]
    phase_end = next(d for e, d in _rows(orch.rd.history) if e == "phase_end")
    assert phase_end["name"] == sc.load[0].name and phase_end["never_flowed"] is True


def test_a_cluster_in_compose_gets_a_front_per_broker(tmp_path: Path) -> None:
    """The fronted cluster's configuration: each front's properties (its node id, its own
    broker upstream), one compose file naming them all, the fronts' services to bring up."""
    demo = _demo()
    import dataclasses

    from harness.runner import catalog
    from harness.runner.plan import RunPlan

    sc = dataclasses.replace(catalog.load("ci-gate"), brokers=3)
    stack = demo.Stack(["docker", "compose"])
    stack.attach(tmp_path, "r")
    (tmp_path / "logs").mkdir()
    target = demo.ComposeTarget(RunPlan(sc, tmp_path, run_id="r"), stack, dict)
    services = target.configure()
    try:
        assert services == [f"{k}-{i}" for k in ("kafka", "acceptor") for i in (1, 2, 3)]
        upstreams = set()
        for i in (1, 2, 3):
            props = (tmp_path / f"acceptor-{i}.properties").read_text()
            assert f"node.id={i}" in props
            upstreams.add(next(x for x in props.splitlines() if ".upstream=" in x))
        assert len(upstreams) == 3  # each front before its own broker
        assert stack.file == tmp_path / "docker-compose.yaml" and stack.file.exists()
    finally:
        for k in target.kafkas:
            k.remove()
