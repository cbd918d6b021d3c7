"""Writes `base/history/rows.py`, the typed row of every event of `events.ALL`.

    python -m base.history.codegen          # rewrite rows.py
    python -m base.history.codegen --check  # exit 1 if rows.py is stale

`events.py` stays the one definition; rows.py is its static-typed image (one frozen row
class and one `detail` TypedDict per event), so mypy sees a column or `detail` key an
event does not have, and `tests/unit/test_history_rows.py` fails when the two disagree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

from base.history.events import ALL, CONN, OPEN, VOCABULARIES, Event

TARGET = Path(__file__).with_name("rows.py")

#: the writer's buffered row (`base.history.writer.ROW`), in order, with its Python types
SLOTS: tuple[tuple[str, str], ...] = (
    ("ts_ns", "int"),
    ("mono_ns", "int"),
    ("event", "str"),
    ("conn_id", "str"),
    ("listener", "str"),
    ("client_ip", "str"),
    ("client_port", "int"),
    ("sock_ip", "str"),
    ("sock_port", "int"),
    ("processor", "int"),
    ("reason", "str"),
    ("delay_ms", "float"),
    ("api_key", "int"),
    ("client_id", "str"),
    ("principal", "str"),
    ("latency_ms", "float"),
    ("bytes", "int"),
    ("detail", "object"),
)
_CONN = tuple(name for name, _ in SLOTS if name in CONN)

HEAD = '''"""The typed row of every history event. GENERATED from `base/history/events.py` by
`python -m base.history.codegen`: do not edit by hand.

One frozen row class per event (``<Source><Event>``): its constructor takes only the
event's columns and a `detail` of the event's TypedDict (``<Source><Event>Detail``, only
its declared keys), so mypy refuses a column or key the event does not have. At run time
a row IS the writer's buffered tuple (`base.history.writer.ROW` order), a plain one: the
class is its type and its constructor, never its instances' class. CPython untracks a
plain tuple of atoms at its first collection and frees it on the fast path, never a
tuple subclass's instance: the hot writers build hundreds of thousands of rows (measured
in bench/results/NOTES.md, "Typed history rows"). ``ts_ns`` None: the writer derives it
from ``mono_ns``. Readers parse a stored `detail` with the row class's ``parse`` into its
TypedDict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, cast

from base.history.events import loads_detail


class Ident(Protocol):
    """A connection's identity columns (the acceptor's `ConnInfo`)."""

    @property
    def conn_id(self) -> str: ...
    @property
    def listener(self) -> str: ...
    @property
    def client_ip(self) -> str: ...
    @property
    def client_port(self) -> int: ...
    @property
    def sock_ip(self) -> str: ...
    @property
    def sock_port(self) -> int: ...


#: a client connection's identity columns, in order (conn_id, listener, client_ip,
#: client_port, sock_ip, sock_port): what a client row's constructor takes first
ClientIds = tuple[str | None, str | None, str | None, int | None, str | None, int | None]


def client_ids(
    conn_id: str | None,
    listener: str | None,
    ip: str | None,
    port: int | None,
    sock_ip: str | None = None,
) -> ClientIds:
    """A client connection's identity columns: the socket's address is the client's, but
    for ``sock_ip`` when a PROXY header claimed ``ip`` (the port is the socket's in both)."""
    return (conn_id, listener, ip, port, sock_ip or ip, port)


@dataclass(slots=True)
class ConnInfo:
    """A connection's identity columns (an `Ident`): the acceptor's, one per connection."""

    conn_id: str
    listener: str
    client_ip: str
    client_port: int
    sock_ip: str
    sock_port: int


'''


def class_name(ev: Event) -> str:
    return ev.source.capitalize() + "".join(p.capitalize() for p in ev.name.split("_"))


def _source_row(source: str) -> str:
    """The base class of one source's rows (``ClientRow``): what its writer takes."""
    return source.capitalize() + "Row"


def _vocab_name(key: str) -> str:
    return "".join(p.capitalize() for p in key.split("_"))


def _detail_class(ev: Event) -> str:
    name = class_name(ev) + "Detail"
    if ev.detail is OPEN:
        return f"{name} = dict[str, Any]\n"
    lines = [f"class {name}(TypedDict, total=False):"]
    if not ev.detail:
        lines.append("    pass")
    for key in sorted(ev.detail):
        kind = _vocab_name(key) if key in VOCABULARIES else "Any"
        lines.append(f"    {key}: {kind}")
    return "\n".join(lines) + "\n"


def _docstring(text: str) -> str:
    lines = textwrap.wrap(text, width=90)
    body = "\n    ".join(lines)
    return f'    """{body}"""\n' if len(lines) == 1 else f'    """{body}\n    """\n'


def _row_class(ev: Event) -> str:
    name = class_name(ev)
    detail = f"{name}Detail"
    by_info = ev.source == "acceptor" and CONN <= ev.columns
    params = ["        cls,", "        mono_ns: int,"]
    values: list[str] = []
    for slot, kind in SLOTS:
        if slot == "ts_ns":
            values.append("ts_ns")
        elif slot == "mono_ns":
            values.append("mono_ns")
        elif slot == "event":
            values.append(repr(ev.name))
        elif slot in _CONN and by_info:
            if slot == "conn_id":
                params.append("        info: Ident,")
            values.append(f"info.{slot}")
        elif slot == "detail":
            params.append(f"        detail: {detail} | str | None = None,")
            values.append("detail")
        elif slot in ev.columns:
            params.append(f"        {slot}: {kind} | None = None,")
            values.append(slot)
        else:
            values.append("None")
    params.append("        ts_ns: int | None = None,")
    body = ", ".join(values)
    return (
        f"class {name}({_source_row(ev.source)}):\n"
        + _docstring(f"{ev.source} `{ev.name}`: {ev.doc}")
        + "\n"
        f"    __slots__ = ()\n"
        f"    SOURCE = {ev.source!r}\n"
        f"    EVENT = {ev.name!r}\n\n"
        "    def __new__(\n" + "\n".join(params) + "\n"
        f"    ) -> {name}:\n"
        f"        return (  # type: ignore[return-value]  # a plain tuple (module doc)\n"
        f"            {body}\n"
        "        )\n\n"
        f"    @staticmethod\n"
        f"    def parse(text: str | None) -> {detail}:\n"
        f'        """A stored `detail` (JSON) as this event\'s mapping ({{}} when empty)."""\n'
        + (
            "        return loads_detail(text)\n"
            if ev.detail is OPEN
            else f'        return cast("{detail}", loads_detail(text))\n'
        )
    )


def render() -> str:
    out = [HEAD, "class Row(tuple[\n"]
    out += [f"    {kind} | None,  # {slot}\n" for slot, kind in SLOTS]
    out.append(
        "]):\n"
        '    """One history row as the writers buffer it: a plain tuple in `FIELDS` order\n'
        '    (the writer\'s `ROW`), read by position, never by name."""\n\n'
        "    __slots__ = ()\n\n\n"
        "#: a row's fields, in order\n"
        f"FIELDS = ({', '.join(repr(slot) for slot, _ in SLOTS)})\n\n"
    )
    for source in dict.fromkeys(ev.source for ev in ALL):
        out.append(
            f"\n\nclass {_source_row(source)}(Row):\n"
            f'    """A row of the {source} history: its writer takes only these."""\n\n'
            "    __slots__ = ()\n"
        )
    for key, values in VOCABULARIES.items():
        out.append(f"{_vocab_name(key)} = Literal[{', '.join(repr(v) for v in values)}]\n")
    for ev in ALL:
        out.append("\n\n" + _detail_class(ev) + "\n\n" + _row_class(ev))
    out.append("\n\n#: the row class of every event, by (source, event)\n")
    out.append("ROWS: dict[tuple[str, str], type[Row]] = {\n")
    for ev in ALL:
        out.append(f"    ({ev.source!r}, {ev.name!r}): {class_name(ev)},\n")
    out.append("}\n")
    return _formatted("".join(out))


def _formatted(text: str) -> str:
    """`text` as ``ruff format`` leaves it (the file is checked by the lint like any other)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if rows.py is stale")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        stale = not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text
        if stale:
            print(f"{TARGET} is stale: run python -m base.history.codegen", file=sys.stderr)
        return int(stale)
    TARGET.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
