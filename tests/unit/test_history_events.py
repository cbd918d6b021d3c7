"""The one definition of each history event: what it allows, and that readers' keys exist."""

from __future__ import annotations

import json

import pytest

from base.history.events import ALL, BY_SOURCE, OPEN, conformance, event
from base.history.schema import COLUMNS, EVENTS, SOURCES


def test_schema_events_are_the_definitions() -> None:
    assert set(EVENTS) == set(SOURCES) == set(BY_SOURCE)
    for source in SOURCES:
        assert EVENTS[source] == frozenset(BY_SOURCE[source])
    assert len({(e.source, e.name) for e in ALL}) == len(ALL)  # each once


def test_every_declared_column_is_in_the_schema() -> None:
    for e in ALL:
        assert e.columns <= set(COLUMNS), (e.name, e.columns - set(COLUMNS))


def test_key_is_checked_against_the_event() -> None:
    assert event("acceptor", "register").key("queue_depth") == "queue_depth"
    with pytest.raises(KeyError, match="no detail key 'queue_dept'"):
        event("acceptor", "register").key("queue_dept")
    assert event("harness", "config").detail is OPEN
    assert event("harness", "config").key("max.connections") == "max.connections"


def _row(source: str, name: str, detail: object = None, **cols: object) -> dict[str, object]:
    row: dict[str, object] = {"source": source, "event": name, "mono_ns": 1, **cols}
    if detail is not None:
        row["detail"] = json.dumps(detail)
    return row


def test_conformance_passes_declared_rows_and_names_each_kind_of_stray() -> None:
    good = [
        _row("acceptor", "register", {"queue_depth": 1, "iteration": 2, "in_iteration": 1},
             conn_id="c", listener="CLIENT", processor=0, delay_ms=0.1),
        _row("harness", "config", {"anything.at.all": 1}, reason="start"),
        _row("client", "closed", {"outcome": "served"}, reason="done", client_id="x"),
    ]  # fmt: skip
    assert conformance(good) == []
    bad = [
        _row("acceptor", "acept"),
        _row("acceptor", "admit", None, api_key=3),
        _row("acceptor", "delay", {"broker_ms": 5}),
        {**_row("client", "ready"), "detail": "not json"},
    ]
    assert conformance(bad) == [
        "unknown event acceptor/acept",
        "acceptor/admit: column api_key is not one of its columns",
        "acceptor/delay: detail key 'broker_ms' is not one of its keys",
        "client/ready: detail is not JSON",
    ]
    assert len(conformance([_row("x", f"e{i}") for i in range(50)], limit=5)) == 5


def test_a_detail_is_built_only_from_the_events_declared_keys() -> None:
    from base.history.events import detail

    assert detail("acceptor", "register", queue_depth=3, iteration=9, in_iteration=1) == (
        '{"in_iteration": 1, "iteration": 9, "queue_depth": 3}'
    )
    with pytest.raises(KeyError, match="queue_dept"):
        detail("acceptor", "register", queue_dept=3)
    with pytest.raises(TypeError):
        detail("acceptor", "register", queue_depth=object())


def test_a_detail_template_takes_its_integers_in_sorted_key_order() -> None:
    from base.history.events import detail_template

    t = detail_template(
        "client", "connect_invoke", slots=("intended_mono_ns", "broker"), profile="50%"
    )
    assert json.loads(t % (2, 77)) == {"broker": 2, "intended_mono_ns": 77, "profile": "50%"}
    with pytest.raises(KeyError):
        detail_template("client", "connect_invoke", slots=("intended_ns",))
