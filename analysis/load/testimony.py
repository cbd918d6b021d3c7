"""Whose limits: the runner's `config` rows (what it intended) against the enforcer's (what it
recorded), each runner version pinned where the enforcer applied it; per broker of a cluster."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.load.timeline import (
    ConfigTimeline,
    config_timeline,
    is_runner_row,
    limit_values,
    parse,
)
from analysis.model import Limits

if TYPE_CHECKING:
    pass


@dataclass
class Testimony:
    """Both writers' config rows, (mono_ns, parsed detail) sorted by time."""

    runner: list[tuple[int, dict[str, Any]]]
    enforcer: list[tuple[int, dict[str, Any]]]


def as_stated(want: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """The enforcer's values (`limit_values`) for what the runner stated: a runner that did
    not state the release to enforce as or its metadata mode (older runs, a launcher that
    does not set them, compose) is not contradicted by the enforcer naming its default."""
    for key in ("kafka.version", "kafka.metadata"):
        if want.get(key) is None and key in got:
            got = {**got, key: None}
    return got


#: the cause on a front's `config` row when it applied a change another front of its
#: cluster took (acceptor.server: read from the shared metadata log)
PROPAGATED = "metadata_log"


def applied_on_front(testimony: Testimony, i: int, want: Any) -> int | None:
    """A fronted cluster: when this front applied the runner's change ``i`` that another
    front took (Kafka's brokers apply a committed quota record each in its own time): its
    first `PROPAGATED` row after the runner's acknowledgement and before the runner started
    its next change, carrying the runner's limits ``want`` (`limit_values`); None if it
    wrote none."""
    runner = testimony.runner
    ack_ns = runner[i][0]
    nxt = runner[i + 1][1].get("applied_from_mono_ns") if i + 1 < len(runner) else None
    until_ns = int(nxt) if isinstance(nxt, int) else None
    for e_ns, d in testimony.enforcer:
        if e_ns <= ack_ns:
            continue
        if until_ns is not None and e_ns >= until_ns:
            break
        vals = as_stated(want, limit_values(Limits.from_config(d)))
        if d.get("cause") == PROPAGATED and vals == want:
            return e_ns
    return None


def pinned_runner_rows(testimony: Testimony, propagated: bool = False) -> list[tuple[int, str]]:
    """The runner's rows, each at the instant the enforcer recorded the same limits inside
    the runner's bracket (else at the runner's acknowledgement). ``propagated`` (one front
    of a cluster): a change the front applied from the metadata log after the runner's
    acknowledgement holds from then (`applied_on_front`)."""
    out: list[tuple[int, str]] = []
    enforcer = [(ns, limit_values(Limits.from_config(d))) for ns, d in testimony.enforcer]
    for i, (ns, detail) in enumerate(testimony.runner):
        at = ns
        lo = detail.get("applied_from_mono_ns")
        if isinstance(lo, int):
            want = limit_values(Limits.from_config(detail))
            inside = [
                e_ns
                for e_ns, vals in enforcer
                if lo <= e_ns <= ns and as_stated(want, vals) == want
            ]
            if inside:
                at = inside[-1]
            elif propagated:
                at = applied_on_front(testimony, i, want) or ns
        out.append((at, json.dumps(detail)))
    return out


def testimony_of(cfg_rows: list[tuple[int, str | None]]) -> Testimony:
    """`config` rows split into what the runner intended and what the enforcer applied."""
    parsed = sorted(((ns, parse(ns, d)) for ns, d in cfg_rows), key=lambda r: r[0])
    return Testimony(
        runner=[r for r in parsed if is_runner_row(r[1])],
        enforcer=[r for r in parsed if not is_runner_row(r[1])],
    )


def for_node(testimony: Testimony, node: int | None) -> Testimony:
    """The runner's rows for one broker of a cluster: once a broker has a per-broker change
    of its own (Kafka's BROKER resource "<id>"), the runner writes, for every change, one
    row of the cluster's limits and one per such broker (``node.id``) with that broker's;
    broker ``node`` is judged by its own row of each change where there is one, else by the
    cluster's. ``node`` None: the cluster's rows only."""
    chosen: dict[tuple[Any, Any], tuple[int, dict[str, Any]]] = {}
    for ns, d in testimony.runner:
        tagged = d.get("node.id")
        if tagged is not None and tagged != node:
            continue
        key = (d.get("cause"), d.get("applied_from_mono_ns", ns))
        if tagged is not None or key not in chosen:
            chosen[key] = (ns, d)
    return Testimony(sorted(chosen.values(), key=lambda r: r[0]), testimony.enforcer)


def timeline_of(
    testimony: Testimony, limits: Any, node: int | None = None, propagated: bool = False
) -> ConfigTimeline:
    """The limits judged at every instant of a run with runner rows: the runner's rows for
    ``node`` (`for_node`), each pinned where the enforcer recorded it
    (`pinned_runner_rows`)."""
    pinned = pinned_runner_rows(for_node(testimony, node), propagated=propagated)
    return config_timeline(pinned, limits if isinstance(limits, dict) else None)
