"""Which analyses `harness analyze` sends to an analysis server, and what it does when none
can take one (analysis/remote.py); what the server does with a client running other code
or gone (analysis/server.py). Judging on a server: tests/spark/test_analysis_server.py."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from analysis import cli, load, remote, server, session


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    "argv",
    [["runs/x"], ["runs/x", "--gate"], ["/r", "--gate", "--quiet", "--no-html"], ["r", "--quiet"]],
)
def test_the_arguments_reach_the_server_unchanged(argv: list[str]) -> None:
    args = _args(*argv)
    assert _args(*cli._argv(args)) == args


@pytest.fixture
def small_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "history").mkdir()
    monkeypatch.setattr(load, "history_rows", lambda _run_dir: session.SMALL_RUN_EVENTS - 1)
    monkeypatch.setenv(remote.SERVER_ENV, "/tmp/some.sock")
    monkeypatch.delenv("SPARK_MASTER", raising=False)
    # a Spark test module on the same worker may have left a session in this process
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda _cls: None))
    return tmp_path


def test_a_small_run_goes_to_the_named_server(small_run: Path) -> None:
    assert cli._server_for(_args(str(small_run))) == Path("/tmp/some.sock")


def test_a_run_of_small_run_events_rows_is_judged_here(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "history_rows", lambda _run_dir: session.SMALL_RUN_EVENTS)
    assert cli._server_for(_args(str(small_run))) is None


def test_a_named_spark_master_or_no_server_is_judged_here(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli._server_for(_args(str(small_run), "--spark-master", "spark://h:7077")) is None
    monkeypatch.setenv("SPARK_MASTER", "spark://h:7077")
    assert cli._server_for(_args(str(small_run))) is None
    monkeypatch.delenv("SPARK_MASTER")
    monkeypatch.setenv(remote.SERVER_ENV, "")
    assert cli._server_for(_args(str(small_run))) is None


def test_a_damaged_history_is_left_to_the_analysis_to_name(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def damaged(_run_dir: Path) -> int:
        raise load.RunDirError("1 history file(s) not readable as Parquet")

    monkeypatch.setattr(load, "history_rows", damaged)
    assert cli._server_for(_args(str(small_run))) is None


def test_no_server_where_none_can_start_says_so_and_leaves_the_analysis_here(
    tmp_path: Path,
) -> None:
    (tmp_path / "file").write_text("")
    err = io.StringIO()
    status = remote.analyze_remotely(tmp_path / "file" / "s.sock", ["run"], err=err)
    assert status is None
    assert f"no analysis server at {tmp_path / 'file' / 's.sock'}" in err.getvalue()
    assert "analysing here" in err.getvalue()


def test_the_fingerprint_follows_the_analysis_code(tmp_path: Path) -> None:
    for part in ("analysis/checks", "analysis/templates", "base/history"):
        (tmp_path / part).mkdir(parents=True)
    (tmp_path / "analysis" / "checks" / "a.py").write_text("x = 1\n")
    (tmp_path / "analysis" / "templates" / "r.html.j2").write_text("<p>\n")
    (tmp_path / "base" / "history" / "events.py").write_text("E = 1\n")
    (tmp_path / "analysis" / "notes.txt").write_text("not code\n")
    before = remote.fingerprint(tmp_path)
    (tmp_path / "analysis" / "notes.txt").write_text("still not code\n")
    assert remote.fingerprint(tmp_path) == before
    for path in (
        "analysis/checks/a.py",
        "analysis/templates/r.html.j2",
        "base/history/events.py",
    ):
        (tmp_path / path).write_text("changed\n")
        assert remote.fingerprint(tmp_path) != before
        before = remote.fingerprint(tmp_path)


def test_a_process_with_its_own_session_judges_there(
    small_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda _cls: object()))
    assert cli._server_for(_args(str(small_run))) is None


def _request(code: str) -> tuple[bool, list[dict[str, object]]]:
    """One request to `server._serve_one` over a socket pair (AF_UNIX): whether the server
    keeps serving, and what it answered."""
    import json
    import socket

    client, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with client, end:
        client.sendall(remote.frame({"argv": ["run"], "cwd": "/", "code": code}))
        keep = server._serve_one(end, code="this code")
        end.shutdown(socket.SHUT_WR)
        answers = [json.loads(line) for line in client.makefile("r")]
    return keep, answers


def test_a_client_running_other_code_is_refused_and_the_server_leaves() -> None:
    assert _request("other code") == (False, [{"stale": True}])


def test_a_client_gone_before_it_asked_leaves_the_server_serving() -> None:
    import socket

    client, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with end:
        client.close()
        assert server._serve_one(end, code="this code") is True


def test_a_client_gone_while_it_waited_for_its_turn_leaves_the_server_serving() -> None:
    import socket

    client, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with end:
        client.sendall(remote.frame({"argv": ["run"], "cwd": "/", "code": "this code"}))
        client.close()  # its request was sent; the answer has nobody to go to
        assert server._serve_one(end, code="this code") is True
