"""The history writer is the one contract every part shares: test it directly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from base.history import SCHEMA, HistoryWriter, read_history
from base.history.rows import (
    AcceptorAccept,
    AcceptorAdmit,
    AcceptorClose,
    AcceptorReject,
    AcceptorRequest,
    ClientClosed,
    ClientConnectInvoke,
    ConnInfo,
    HarnessPhaseStart,
)


def _info(conn_id: str = "c1", port: int = 5000) -> ConnInfo:
    return ConnInfo(conn_id, "CLIENT", "127.0.0.2", port, "127.0.0.2", port)


def test_rows_round_trip_with_schema_seq_and_json_detail(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "acceptor", "run-1", background=False)
    w.append(AcceptorAccept(10, _info()))
    w.append(AcceptorReject(11, _info(), reason="ip_count", detail={"count": 6, "max": 5}))
    w.close()
    table = read_history(tmp_path)
    assert table.schema == SCHEMA
    rows = table.to_pylist()
    assert [(r["seq"], r["event"]) for r in rows] == [(1, "accept"), (2, "reject")]
    assert rows[0]["client_port"] == 5000 and rows[0]["detail"] is None
    assert json.loads(rows[1]["detail"]) == {"count": 6, "max": 5}
    assert {r["source"] for r in rows} == {"acceptor"} and {r["run_id"] for r in rows} == {"run-1"}


def test_parts_are_atomic_and_named_per_writer(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "client", "r", name="client-a", background=False)
    w.append(ClientConnectInvoke(1, "c1"))
    first = w.flush()
    w.append(ClientClosed(2, "c1", reason="done"))
    w.close()
    files = sorted(p.name for p in (tmp_path / "client").iterdir())
    assert files == ["client-a-00001.parquet", "client-a-00002.parquet"]
    assert first is not None and pq.read_table(first).num_rows == 1
    assert w.flush() is None  # nothing buffered: no empty part


def test_background_thread_flushes_when_buffer_is_full(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "harness", "r", max_rows=10, flush_interval_s=30)
    for _ in range(25):
        w.append(HarnessPhaseStart(1, detail={"name": "storm"}))
    w.close()
    assert read_history(tmp_path, "harness").num_rows == 25
    assert not [p for p in (tmp_path / "harness").iterdir() if p.name.startswith(".")]


def test_rejects_another_sources_rows_unknown_columns_and_sources(tmp_path: Path) -> None:
    w = HistoryWriter(tmp_path, "client", "r", background=False)
    with pytest.raises(ValueError, match="not a client event"):
        w.append(AcceptorAccept(1, _info()))
    with pytest.raises(TypeError, match="bogus"):
        ClientClosed(1, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown history source"):
        HistoryWriter(tmp_path, "nobody", "r")
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.append(ClientClosed(1))


def test_rows_given_whole_or_by_their_class_share_seq_ts_and_columns(tmp_path: Path) -> None:
    from base.history.writer import ROW

    w = HistoryWriter(tmp_path, "acceptor", "run-2", background=False)
    values = {name: None for name in ROW}
    values.update(
        ts_ns=1_700_000_000_123_456_789,
        mono_ns=42,
        event="close",
        conn_id="c9",
        listener="CLIENT",
        client_ip="127.0.0.3",
        client_port=40000,
        sock_ip="127.0.0.4",
        sock_port=9092,
        processor=1,
        reason="client_eof",
        delay_ms=0.5,
        bytes=77,
        detail={"registered": True, "path": tmp_path},
    )
    w.append(AcceptorAccept(41, _info("c9"), detail='{"protected": false}', ts_ns=5000))
    w.append(tuple(values[name] for name in ROW))  # type: ignore[arg-type]
    w.append(AcceptorRequest(43, _info(), api_key=18, latency_ms=1.25, principal="User:A"))
    w.close()
    rows = sorted(read_history(tmp_path).to_pylist(), key=lambda r: r["seq"])
    assert [(r["seq"], r["event"]) for r in rows] == [(1, "accept"), (2, "close"), (3, "request")]
    accept, close, request = rows
    assert accept["detail"] == '{"protected": false}'  # a string is stored as given
    assert int(accept["ts"].timestamp() * 1_000_000) == 5
    assert int(close["ts"].timestamp() * 1_000_000) == 1_700_000_000_123_456  # ns -> µs
    assert {k: close[k] for k in ("conn_id", "client_port", "sock_ip", "sock_port")} == {
        "conn_id": "c9",
        "client_port": 40000,
        "sock_ip": "127.0.0.4",
        "sock_port": 9092,
    }
    assert (close["processor"], close["reason"], close["delay_ms"], close["bytes"]) == (
        1,
        "client_eof",
        0.5,
        77,
    )
    # a mapping is encoded as json.dumps(sort_keys=True, default=str) would
    assert close["detail"] == json.dumps(values["detail"], sort_keys=True, default=str)
    assert (request["api_key"], request["latency_ms"], request["principal"]) == (18, 1.25, "User:A")
    assert request["conn_id"] == "c1" and request["detail"] is None


def test_a_large_flush_is_one_part_in_chunks_with_contiguous_seq(tmp_path: Path) -> None:
    from base.history.writer import CHUNK

    w = HistoryWriter(tmp_path, "acceptor", "r", background=False)
    n = 2 * CHUNK + 3
    for i in range(n):
        w.append(AcceptorAdmit(i, _info(f"c{i}"), delay_ms=float(i)))
    part = w.flush()
    w.close()
    assert part is not None
    table = pq.read_table(part)
    assert table.schema == SCHEMA  # exactly the shared schema, no metadata added
    assert table.column("seq").to_pylist() == list(range(1, n + 1))
    assert table.column("mono_ns").to_pylist() == list(range(n))
    assert table.column("conn_id").to_pylist()[-1] == f"c{n - 1}"


def test_append_checks_the_event_and_refuses_after_close(tmp_path: Path) -> None:
    from base.history.writer import ROW

    w = HistoryWriter(tmp_path, "acceptor", "r", background=False)
    row = [None] * len(ROW)
    row[:3] = [1, 2, "connect_ok"]  # a client event
    with pytest.raises(ValueError, match="not a acceptor event"):
        w.append(tuple(row))
    row[2] = "accept"
    w.append(tuple(row))
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.append(tuple(row))
    assert read_history(tmp_path).num_rows == 1


def test_flushes_from_two_threads_keep_every_row_once_in_seq_order(tmp_path: Path) -> None:
    import threading

    w = HistoryWriter(tmp_path, "harness", "r", max_rows=7, flush_interval_s=0.001)

    def produce(k: int) -> None:
        for i in range(500):
            w.append(HarnessPhaseStart(k * 1000 + i))

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    files = sorted((tmp_path / "harness").glob("*.parquet"))
    seqs = [s for f in files for s in pq.read_table(f).column("seq").to_pylist()]
    assert seqs == list(range(1, 1501))  # parts in order, each row once
    assert sorted(read_history(tmp_path).column("mono_ns").to_pylist()) == sorted(
        k * 1000 + i for k in range(3) for i in range(500)
    )


def test_a_part_that_cannot_be_written_stops_the_writer_and_leaves_a_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk at the second part: the first stays as written, the half part becomes
    the marker with the reason, and every later row is counted lost, never raised into the
    caller (an acceptor must keep enforcing)."""
    import errno

    from base.history.writer import incomplete_markers

    w = HistoryWriter(tmp_path, "acceptor", "r", name="acc", background=False)
    w.append(AcceptorAccept(1, _info()))
    first = w.flush()
    assert first is not None
    written = first.read_bytes()
    real = pq.write_table

    def full(table: object, where: Path, **kw: object) -> None:
        Path(where).write_bytes(b"PAR1half")  # a part cut short by the full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq, "write_table", full)
    for i in range(3):
        w.append(AcceptorAccept(2 + i, _info(f"c{2 + i}")))
    assert w.flush() is None
    w.append(AcceptorClose(9, _info(), reason="client_eof"))  # after: counted, not kept
    monkeypatch.setattr(pq, "write_table", real)
    w.close()
    assert w.failure is not None and "No space left on device" in w.failure
    assert w.rows_written == 1 and w.rows_lost == 4
    assert first.read_bytes() == written  # what was written is untouched
    assert sorted(p.name for p in (tmp_path / "acceptor").iterdir()) == [
        ".acc.incomplete-ENOSPC-4",  # the error and the rows lost, even with no room for text
        "acc-00001.parquet",
    ]
    (marker,) = incomplete_markers(tmp_path)
    assert marker["writer"] == "acc" and marker["rows_lost"] == 4
    assert "No space left on device" in marker["reason"]
    assert read_history(tmp_path).num_rows == 1
    assert "writing stopped" in capsys.readouterr().out


def test_an_empty_marker_still_says_the_history_is_incomplete(tmp_path: Path) -> None:
    from base.history.writer import incomplete_markers

    (tmp_path / "client").mkdir()
    (tmp_path / "client" / ".client-7.incomplete-ENOSPC-12").write_bytes(b"")  # no room for text
    (marker,) = incomplete_markers(tmp_path)
    assert marker["writer"] == "client-7" and marker["rows_lost"] == 12
    assert marker["reason"] == "No space left on device (ENOSPC)"
