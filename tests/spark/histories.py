"""A hand-built run folder: client, acceptor and harness writers, a broker-wide config row,
and whatever rows a test writes through them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from base.history import HistoryWriter
from tests.handbuilt import record

Build = Callable[[HistoryWriter, HistoryWriter, HistoryWriter], None]


def hand_built_run(
    tmp: Path,
    name: str,
    build: Build,
    *,
    config_ns: int,
    target: str = "acceptor",
    meta: dict[str, object] | None = None,
) -> Path:
    """runs/<name>/ with run.json (plus `meta`), one `config` row at `config_ns` (no
    limit), then `build(client, acceptor, harness)`."""
    run = tmp / name
    (run / "history").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": name, "target": target, **(meta or {})}))
    cw = HistoryWriter(run / "history", "client", name, background=False)
    aw = HistoryWriter(run / "history", "acceptor", name, background=False)
    hw = HistoryWriter(run / "history", "harness", name, background=False)
    record(hw, "config", mono_ns=config_ns, detail={"max.connections": 2147483647})
    build(cw, aw, hw)
    for w in (cw, aw, hw):
        w.close()
    return run
