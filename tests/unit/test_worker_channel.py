"""Histories home over Locust's channel: chunks, their assembly, the roster and its verdict
(loadprofiles.workers, the pure parts and the master's side without Locust)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadprofiles.workers import (
    Assembly,
    ChunkError,
    MasterSide,
    chunks,
    home_name,
    parquet_rows,
    problems,
    read_roster,
)

pytestmark = pytest.mark.unit


def parquet(rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"seq": list(range(rows))}), sink)
    return sink.getvalue()


def test_a_file_goes_in_chunks_and_comes_back_whole() -> None:
    data = bytes(range(256)) * 10  # 2,560 bytes
    msgs = chunks(2, "client-h-7-00001.parquet", data, rows=9, size=1000)
    assert [len(m["data"]) for m in msgs] == [1000, 1000, 560]
    assert {(m["count"], m["size"], m["rows"], m["worker"]) for m in msgs} == {(3, 2560, 9, 2)}
    a = Assembly.first(msgs[0])
    assert a.add(msgs[0]) is None and a.add(msgs[1]) is None
    assert a.add(msgs[2]) == data


def test_an_empty_file_is_one_chunk() -> None:
    (msg,) = chunks(0, "f.parquet", b"", rows=0)
    assert Assembly.first(msg).add(msg) == b""


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda m: {**m[1], "seq": 2}, "came after 1 chunks"),
        (lambda m: {**m[1], "size": 9}, "announces another file"),
        (lambda m: {**m[1], "rows": 8}, "announces another file"),
    ],
)
def test_a_chunk_out_of_order_or_of_another_file_is_refused(change, error) -> None:  # type: ignore[no-untyped-def]
    msgs = chunks(1, "f.parquet", b"x" * 30, rows=9, size=10)
    a = Assembly.first(msgs[0])
    a.add(msgs[0])
    with pytest.raises(ChunkError, match=error):
        a.add(change(msgs))


def test_the_announced_size_is_checked() -> None:
    msgs = chunks(1, "f.parquet", b"x" * 30, rows=1, size=10)
    msgs = [{**m, "size": 31} for m in msgs]
    a = Assembly.first(msgs[0])
    a.add(msgs[0]), a.add(msgs[1])
    with pytest.raises(ChunkError, match="30 bytes arrived, 31 announced"):
        a.add(msgs[2])


def test_a_workers_file_lands_under_the_master_pid() -> None:
    assert home_name("client-box-812-00003.parquet", 2, 4400) == (
        "client-box-w2-4400-00003.parquet"
    )
    assert home_name("client-a-b-9-00001.parquet", 0, 1) == "client-a-b-w0-1-00001.parquet"


def _master(tmp_path: Path) -> MasterSide:
    # not under a `history` folder: these hand-built files are no writer's history
    return MasterSide(tmp_path / "ready", tmp_path / "home" / "client", master_pid=4400)


def _send(m: MasterSide, node: str, index: int, name: str, data: bytes, rows: int) -> None:
    for msg in chunks(index, name, data, rows, size=700):
        m.part(node, msg, parquet_rows)


def test_the_master_writes_each_file_checked_and_the_roster(tmp_path: Path) -> None:
    m = _master(tmp_path)
    m.hello(
        "n1",
        {"index": 1, "host": "h1", "pid": 812, "addresses": ["198.18.3.12"], "home": "channel"},
    )
    m.marker("n1", "ready", {"slot": 1})
    m.progress("n1", {"rows": 120, "clock_offset_ns": 5, "clock_rtt_ns": 40})
    _send(m, "n1", 1, "client-h1-812-00001.parquet", parquet(100), 100)
    _send(m, "n1", 1, "client-h1-812-00002.parquet", parquet(20), 20)
    m.done("n1", {"rows": 120, "files": 2, "intended": 50, "offered": 50})

    files = sorted((tmp_path / "home" / "client").iterdir())
    assert [f.name for f in files] == [
        "client-h1-w1-4400-00001.parquet",
        "client-h1-w1-4400-00002.parquet",
    ]
    assert pq.read_metadata(files[0]).num_rows == 100
    ready = tmp_path / "ready"
    assert sorted(p.name for p in ready.iterdir()) == ["w1.done", "w1.ready", "workers.json"]
    assert json.loads((ready / "w1.done").read_text())["offered"] == 50
    roster = read_roster(ready)
    w = roster["workers"]["n1"]
    assert (w["rows_received"], w["clock_offset_ns"], w["addresses"]) == (120, 5, ["198.18.3.12"])
    assert problems(roster, expected=1) == []


def test_a_file_whose_rows_differ_is_refused_and_named(tmp_path: Path) -> None:
    m = _master(tmp_path)
    m.hello("n1", {"index": 0, "host": "h", "pid": 1, "addresses": ["198.18.3.11"]})
    _send(m, "n1", 0, "client-h-1-00001.parquet", parquet(10), 11)  # says 11, holds 10
    m.done("n1", {"rows": 11, "files": 1})
    assert not (tmp_path / "home" / "client").exists() or not any(
        (tmp_path / "home" / "client").glob("*.parquet")
    )
    (p,) = problems(read_roster(tmp_path / "ready"), expected=1)
    assert "10 rows arrived, 11 sent" in p.reason and "198.18.3.11" in p.worker


def test_a_local_worker_writes_its_own_markers(tmp_path: Path) -> None:
    """--processes workers (history-home local) mark themselves: the master adds none."""
    m = _master(tmp_path)
    m.hello("n1", {"index": 0, "host": "h", "pid": 1, "addresses": [], "home": "local"})
    m.done("n1", {"rows": 3, "files": 0})
    m.gone("n1")
    assert [p.name for p in (tmp_path / "ready").iterdir()] == ["workers.json"]


def test_a_worker_gone_mid_phase_is_done_for_the_runner_and_named_with_its_rows(
    tmp_path: Path,
) -> None:
    m = _master(tmp_path)
    for i, node in enumerate(("a", "b")):
        m.hello(
            node,
            {
                "index": i,
                "host": node,
                "pid": 10 + i,
                "addresses": [f"198.18.3.{11 + i}"],
                "home": "channel",
            },
        )
        m.progress(node, {"rows": 300})
    _send(m, "a", 0, "client-a-10-00001.parquet", parquet(300), 300)
    m.done("a", {"rows": 300, "files": 1})
    m.gone("b")
    m.gone("a")  # a worker that said it was done is not gone
    assert json.loads((tmp_path / "ready" / "w1.done").read_text())["gone"] is True
    (p,) = problems(read_roster(tmp_path / "ready"), expected=2)
    assert p.worker.startswith("1 (198.18.3.12")
    assert p.rows_lost == 300 and "went missing mid-phase" in p.reason
    assert p.text().endswith("300 rows lost")


def test_workers_that_never_joined_are_named_by_the_hosts_the_run_made() -> None:
    roster = {
        "workers": {
            "a": {
                "index": 0,
                "addresses": ["198.18.3.11"],
                "done": {"rows": 0},
                "rows_received": 0,
                "files": [],
            }
        }
    }
    found = problems(roster, expected=3, hosts=["198.18.3.11", "198.18.3.12", "198.18.3.13"])
    assert [(p.worker, p.reason, p.rows_lost) for p in found] == [
        ("198.18.3.12", "never joined the master", None),
        ("198.18.3.13", "never joined the master", None),
    ]
    # without hosts it counts them
    assert [p.worker for p in problems({"workers": {}}, expected=2)] == ["#1 of 2", "#2 of 2"]


def test_a_worker_silent_after_joining_lost_an_unknown_number_of_rows() -> None:
    roster = {"workers": {"a": {"index": 0, "rows_received": 0, "files": []}}}
    (p,) = problems(roster, expected=1)
    assert p.rows_lost is None and "never said it was done" in p.reason
    assert "an unknown number of rows lost" in p.text()
