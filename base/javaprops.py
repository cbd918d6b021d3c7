"""Java ``.properties`` text, read one way everywhere: the acceptor's configuration file and
Kafka's client files (``--command-config``, the ``client-*.properties`` the broker launcher
writes) go through `parse`.

The syntax of ``java.util.Properties.load`` that these files use: ``key=value``,
``key: value`` or ``key value`` (the key ends at the first ``=``, ``:`` or blank), ``#`` and
``!`` comment lines, a trailing ``\\`` continuing the value on the next line (its leading
blanks dropped), ``\\\\`` for a backslash. Unlike Java, a line that is a key alone and a
continuation at the end of the text are refused (a ValueError naming the line): in a
configuration file they are mistakes, not values.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["parse", "read"]

_KEY_VALUE = re.compile(r"^([^=:\s]+)\s*(?:[=:]|\s)\s*(.*)$")


def parse(text: str, source: str = "properties") -> dict[str, str]:
    """The key/value pairs of ``text``; ``source`` names it in errors."""
    out: dict[str, str] = {}
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.strip() if pending else raw.strip()
        if not pending:
            start = number
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        m = _KEY_VALUE.match(line)
        if m is None:
            raise ValueError(f"{source}: line {start}: {line!r} is not key=value")
        out[m.group(1)] = m.group(2).strip().replace("\\\\", "\\")
    if pending:
        raise ValueError(f"{source}: line {start}: continuation at the end of the text")
    return out


def read(path: str | Path) -> dict[str, str]:
    """`parse` of a UTF-8 file, errors naming the file."""
    return parse(Path(path).read_text(encoding="utf-8"), str(path))
