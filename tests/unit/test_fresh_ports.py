"""broker.local.on_fresh_ports: the one "start on fresh ports, retry when one was
taken" loop of a broker and a cluster, driven with stand-ins (no JVM, no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.local import PORT_ATTEMPTS, PortInUse, on_fresh_ports

pytestmark = pytest.mark.unit


class Node:
    def __init__(self, fail: BaseException | None) -> None:
        self.fail = fail
        self._temp_workdir = True
        self.stopped = False

    def start(self) -> None:
        if self.fail is not None:
            raise self.fail

    def stop(self) -> None:
        self.stopped = True


def _run(tmp_path: Path, failures: list[BaseException | None]) -> tuple[list[Node], list[str]]:
    built: list[Node] = []
    said: list[str] = []

    def build() -> Node:
        built.append(Node(failures[len(built)]))
        return built[-1]

    on_fresh_ports(
        build, Node.start, workdir=tmp_path, temp_workdir=True, progress=said.append,
        what="the cluster ",
    )  # fmt: skip
    return built, said


def test_a_taken_port_is_retried_on_fresh_ones(tmp_path: Path) -> None:
    built, said = _run(tmp_path, [PortInUse("CLIENT in use"), None])
    assert len(built) == 2 and built[0].stopped and not built[1].stopped
    assert not built[0]._temp_workdir  # the directory survives for the next attempt
    assert said == ["a port was taken while starting; retrying the cluster on fresh ports…"]
    assert tmp_path.exists()


def test_every_attempt_losing_its_ports_removes_a_temporary_dir(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    with pytest.raises(PortInUse):
        _run(work, [PortInUse("taken")] * PORT_ATTEMPTS)
    assert not work.exists()


def test_another_failure_stops_at_once_and_keeps_the_logs(tmp_path: Path) -> None:
    built: list[Node] = []

    def build() -> Node:
        built.append(Node(RuntimeError("exited")))
        return built[-1]

    with pytest.raises(RuntimeError, match="exited"):
        on_fresh_ports(build, Node.start, workdir=tmp_path, temp_workdir=True, progress=print)
    assert len(built) == 1 and built[0].stopped and not built[0]._temp_workdir
    assert tmp_path.exists()
