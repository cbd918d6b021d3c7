"""A run whose load generator could not offer its intended arrivals proves nothing: the
harness says so itself (`offered_load` unknown, every check that needs the load unknown,
the verdict unknown with "give the load generator room"). On a shared runner a neighbour
can starve the generator for seconds; the tests that ask for a PASS tell that honest
UNKNOWN apart from a product's failure here, in one place.

A shortfall counts as the machine's only when the generator itself measured it: every
arrival it did not offer says cause ``cpu`` (it started more than ``max_lag_ms`` late, or
too many were in flight). One not offered for another cause (a refused socket, an address
it could not bind) is not noise, and the test fails on it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

#: the words the verdict's reason uses for a generator that fell short (`verdict.hint_for`)
ROOM_HINT = "give the load generator room"


def verdict_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report" / "verdict.json").read_text())  # type: ignore[no-any-return]


def not_offered_causes(run_dir: Path) -> Counter[str]:
    """How many intended arrivals the generator did not offer, by the cause it recorded."""
    from base.history.rows import ClientConnectFail
    from base.history.writer import read_history

    rows = read_history(run_dir, "client").to_pylist()
    return Counter(
        str(ClientConnectFail.parse(r["detail"]).get("cause"))
        for r in rows
        if r["event"] == "connect_fail" and r["reason"] == "not_offered"
    )


def fell_short(run_dir: Path | None) -> str | None:
    """Why the run proves nothing because its generator fell short on a busy machine (the
    `offered_load` observation and the causes it measured), or None: the run offered its
    load, has no verdict, or fell short for a cause that is not the machine's (a failure)."""
    if run_dir is None or not (run_dir / "report" / "verdict.json").is_file():
        return None
    v = verdict_of(run_dir)
    offered = next((c for c in v["checks"] if c["name"] == "offered_load"), None)
    if v["verdict"] != "unknown" or offered is None or offered["verdict"] == "pass":
        return None
    causes = not_offered_causes(run_dir)
    if set(causes) - {"cpu"}:
        return None
    return f"{offered['observed']}; not offered by cause: {dict(causes)}"


def assert_short_honestly(run_dir: Path, code: int, why: str) -> dict[str, Any]:
    """A run that fell short says so and claims nothing: exit 2, UNKNOWN with the hint to
    give the generator room, no check failed. Returns its verdict."""
    v = verdict_of(run_dir)
    print(f"the generator fell short on this machine, so the run proves nothing: {why}")
    assert (code, v["verdict"]) == (2, "unknown"), v["reasons"]
    assert any(ROOM_HINT in r for r in v["reasons"]), v["reasons"]
    assert not [c["name"] for c in v["checks"] if c["verdict"] == "fail"], v["reasons"]
    return v
