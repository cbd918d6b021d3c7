"""The typed rows (`base.history.rows`) are the event definitions' image: one row class
per event, taking only its columns and `detail` keys; writers refuse what an event lacks."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

from acceptor.recorder import ConnInfo
from base.history import codegen, rows
from base.history.events import ALL, CONN, OPEN, VOCABULARIES, event
from base.history.writer import ROW, HistoryWriter, read_history
from loadprofiles.outcomes import Outcome


def test_rows_py_is_generated_from_the_current_events() -> None:
    assert codegen.render() == codegen.TARGET.read_text(encoding="utf-8"), (
        "base/history/rows.py is stale: python -m base.history.codegen"
    )


def test_every_event_has_its_row_class_and_no_other_exists() -> None:
    assert set(rows.ROWS) == {(e.source, e.name) for e in ALL}
    assert rows.FIELDS == ROW
    for e in ALL:
        cls = rows.ROWS[e.source, e.name]
        assert (cls.SOURCE, cls.EVENT) == (e.source, e.name)  # type: ignore[attr-defined]
        assert cls.__slots__ == ()  # frozen, no instance dict


def _params(cls: type[rows.Row]) -> set[str]:
    return set(inspect.signature(cls.__new__).parameters) - {"cls", "mono_ns", "ts_ns"}


@pytest.mark.parametrize("e", ALL, ids=lambda e: f"{e.source}/{e.name}")
def test_a_row_class_takes_exactly_its_events_columns_and_detail_keys(e: object) -> None:
    ev = event(e.source, e.name)  # type: ignore[attr-defined]
    cls = rows.ROWS[ev.source, ev.name]
    by_info = ev.source == "acceptor" and CONN <= ev.columns
    columns = (ev.columns - CONN) | {"info"} if by_info else set(ev.columns)
    assert _params(cls) == columns | {"detail"}
    # every column given: the row fills exactly those, the rest of the writer's row is None
    info = ConnInfo("c1", "CLIENT", "10.0.0.1", 5, "10.0.0.2", 6)
    args = {p: (info if p == "info" else 1) for p in _params(cls) if p != "detail"}
    row = cls(7, **args, detail={})
    filled = {f for f, v in zip(ROW, row, strict=True) if v is not None}
    assert filled == ev.columns | {"mono_ns", "event", "detail"}
    assert type(row) is tuple  # a plain tuple at run time (the collector untracks it)
    by_name = dict(zip(ROW, row, strict=True))
    assert (by_name["event"], by_name["mono_ns"], by_name["ts_ns"]) == (ev.name, 7, None)
    # the detail's TypedDict has the event's keys, and each closed vocabulary as a Literal
    detail = getattr(rows, cls.__name__ + "Detail")
    if ev.detail is OPEN:
        assert detail == dict[str, typing.Any]
        return
    hints = typing.get_type_hints(detail)
    assert set(hints) == ev.detail
    for key, values in VOCABULARIES.items():
        if key in hints:
            assert typing.get_args(hints[key]) == values


def test_parse_gives_the_events_detail_mapping() -> None:
    assert rows.ClientConnectInvoke.parse('{"intended_mono_ns": 5}') == {"intended_mono_ns": 5}
    assert rows.HarnessPhaseEnd.parse(None) == {} == rows.HarnessPhaseEnd.parse("")
    with pytest.raises(ValueError, match="JSON object"):
        rows.HarnessPhaseEnd.parse("[1]")


def test_the_outcome_vocabulary_is_the_clients_classification() -> None:
    assert tuple(o.value for o in Outcome) == VOCABULARIES["outcome"]


def test_a_row_refuses_a_column_its_event_lacks_and_the_writer_takes_it_as_built(
    tmp_path: Path,
) -> None:
    with pytest.raises(TypeError, match="api_key"):
        rows.AcceptorAdmit(1, ConnInfo("c", "L", "i", 1, "i", 1), api_key=3)  # type: ignore[call-arg]
    with HistoryWriter(tmp_path, "acceptor", "r1", background=False) as w:
        info = ConnInfo("c", "CLIENT", "10.0.0.1", 4, "10.0.0.1", 4)
        w.append(rows.AcceptorRegister(1, info, processor=0, detail={"queue_depth": 1}))
        info = ConnInfo("c2", "CLIENT", "10.0.0.1", 5, "10.0.0.1", 6)
        w.append(rows.AcceptorAdmit(123, info, delay_ms=0.5))
    table = sorted(read_history(tmp_path, "acceptor").to_pylist(), key=lambda r: r["seq"])
    assert [r["event"] for r in table] == ["register", "admit"]
    admit = table[1]
    assert (admit["conn_id"], admit["client_port"], admit["delay_ms"]) == ("c2", 5, 0.5)
    assert admit["ts"] is not None  # derived from mono_ns at the flush


def test_mypy_refuses_a_detail_key_or_column_its_event_lacks(tmp_path: Path) -> None:
    """What keeps a writer to its event's columns and `detail` keys: the type checker
    (run here on three calls), and at run time an unknown parameter's TypeError."""
    from mypy import api

    src = tmp_path / "misuse.py"
    src.write_text(
        "from base.history.rows import ConnInfo, AcceptorRegister\n"
        "i = ConnInfo('c', 'L', 'a', 1, 'a', 1)\n"
        "AcceptorRegister(1, i, processor=0, detail={'queue_depth': 1})\n"
        "AcceptorRegister(1, i, processor=0, detail={'queue_dept': 1})\n"
        "AcceptorRegister(1, i, api_key=3)\n"
    )
    out, _, code = api.run([str(src), "--no-error-summary", "--follow-imports=silent"])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert code == 1 and len(errors) == 2, out
    assert "misuse.py:4:" in errors[0] and "AcceptorRegisterDetail" in errors[0], errors
    assert "misuse.py:5:" in errors[1] and '"api_key"' in errors[1], errors


def test_a_client_connections_identity_columns_take_the_proxied_socket_address() -> None:
    assert rows.client_ids("c1", "L", "10.0.0.1", 5) == ("c1", "L", "10.0.0.1", 5, "10.0.0.1", 5)
    claimed = rows.client_ids("c1", "L", "203.0.113.9", 5, sock_ip="127.0.0.2")
    assert claimed == ("c1", "L", "203.0.113.9", 5, "127.0.0.2", 5)
    row = rows.ClientConnectOk(1, *claimed)
    assert dict(zip(ROW, row, strict=True))["sock_ip"] == "127.0.0.2"
