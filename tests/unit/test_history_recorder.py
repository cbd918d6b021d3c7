"""The acceptor's recorder: one typed row per call, the writer's schema, nothing lost or added."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from acceptor.recorder import ConnInfo, Recorder
from base.history import HistoryWriter, read_history
from base.history.rows import (
    AcceptorAccept,
    AcceptorClose,
    AcceptorLoopLag,
    AcceptorRegister,
    AcceptorRequest,
    ClientConnectOk,
)


def _info() -> ConnInfo:
    return ConnInfo("CLIENT-7", "CLIENT", "127.0.0.5", 41000, "127.0.0.9", 9093)


def test_connection_rows_carry_identity_fields_and_detail(tmp_path: Path) -> None:
    rec = Recorder(HistoryWriter(tmp_path, "acceptor", "run", background=False))
    info = _info()
    detail = {"registered": True, "requests": 3}
    rec.write(AcceptorAccept(100, info, detail='{"protected": false}'))
    rec.write(AcceptorRegister(101, info, processor=2, delay_ms=0.25))
    rec.write(
        AcceptorRequest(
            102,
            info,
            api_key=3,
            client_id="c",
            principal="User:ANONYMOUS",
            latency_ms=1.5,
            bytes=60,
            processor=2,
        )
    )
    rec.closed(info, 103, "client_eof", processor=2, bytes=60, **detail)
    detail["registered"] = False  # the recorder keeps what was recorded
    info.client_port = 1  # and the identity as it was at the call
    rec.write(AcceptorLoopLag(104, reason="stall", delay_ms=12.0, detail={"period_ms": 5.0}))
    rec.close()
    rows = sorted(read_history(tmp_path).to_pylist(), key=lambda r: r["seq"])
    assert [r["event"] for r in rows] == ["accept", "register", "request", "close", "loop_lag"]
    for r in rows[:4]:
        assert (r["conn_id"], r["listener"], r["client_ip"], r["client_port"]) == (
            "CLIENT-7",
            "CLIENT",
            "127.0.0.5",
            41000,
        )
        assert (r["sock_ip"], r["sock_port"], r["source"], r["run_id"]) == (
            "127.0.0.9",
            9093,
            "acceptor",
            "run",
        )
    accept, register, request, close, lag = rows
    assert [r["mono_ns"] for r in rows] == [100, 101, 102, 103, 104]
    assert accept["detail"] == '{"protected": false}' and accept["processor"] is None
    assert (register["processor"], register["delay_ms"], register["reason"]) == (2, 0.25, None)
    assert (request["api_key"], request["client_id"], request["principal"]) == (
        3,
        "c",
        "User:ANONYMOUS",
    )
    assert (request["latency_ms"], request["bytes"], request["detail"]) == (1.5, 60, None)
    assert json.loads(close["detail"]) == {"registered": True, "requests": 3}
    assert close["reason"] == "client_eof" and close["bytes"] == 60
    assert lag["conn_id"] is None and json.loads(lag["detail"]) == {"period_ms": 5.0}


def test_a_misspelt_field_or_another_sources_row_fails_at_the_call(tmp_path: Path) -> None:
    rec = Recorder(HistoryWriter(tmp_path, "acceptor", "run", background=False))
    with pytest.raises(TypeError, match="byte"):
        AcceptorClose(1, _info(), byte=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="api_key"):
        AcceptorAccept(1, _info(), api_key=3)  # type: ignore[call-arg]  # not an accept column
    with pytest.raises(KeyError, match="no detail key"):
        rec.closed(_info(), 1, "client_eof", byte=3)
    with pytest.raises(ValueError, match="not a acceptor event"):
        rec.write(ClientConnectOk(1, "c1"))
    rec.close()
    assert read_history(tmp_path).num_rows == 0


def test_without_history_and_after_close_rows_are_dropped(tmp_path: Path) -> None:
    Recorder(None).write(AcceptorAccept(1, _info()))  # no writer: nothing, no error
    rec = Recorder(HistoryWriter(tmp_path, "acceptor", "run", background=False))
    rec.write(AcceptorAccept(1, _info()))
    rec.close()
    rec.closed(_info(), 2, "shutdown")  # late row at shutdown: dropped
    rec.write(AcceptorLoopLag(3, reason="stall"))
    assert [r["event"] for r in read_history(tmp_path).to_pylist()] == ["accept"]


def test_history_on_freezes_the_start_up_heap_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acceptor.recorder as recorder

    gc.unfreeze()
    monkeypatch.setattr(recorder, "_frozen", False)
    Recorder(None)  # no history: nothing imported, nothing frozen
    assert gc.get_freeze_count() == 0
    rec = Recorder(HistoryWriter(tmp_path, "acceptor", "run", background=False))
    frozen = gc.get_freeze_count()
    assert frozen > 0
    keep = [[i] for i in range(1000)]  # later objects stay collectable
    Recorder(HistoryWriter(tmp_path, "acceptor", "run2", background=False)).close()
    # once per process: no second freeze took `keep` out of the collector's generations
    # (the count itself may fall: a frozen object that dies leaves the permanent generation)
    assert any(o is keep for o in gc.get_objects())
    assert gc.get_freeze_count() <= frozen
    rec.close()
    gc.unfreeze()
