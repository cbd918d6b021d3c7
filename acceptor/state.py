"""Run-time quota changes as a metadata log every front of a cluster applies in one order.

Kafka keeps IP and client quotas and dynamic broker configs in its KRaft metadata log
(`ClientQuotaRecord`, `ConfigRecord`): a change sent to any broker is committed once and
every broker applies the committed records in log order, each keeping the per-broker
configs of its own node id only. The acceptor does the same in miniature: `state.dir` holds
``metadata.log``, one JSON line per committed batch (the records of one admin request
resource, applied together); a front appends under a file lock and applies what the log
holds up to its end, and every front of a cluster (the fronts share `state.dir`) tails the
file (`MetadataLog.read_new`). A restarted front replays the whole log, as a restarted
broker replays its metadata: the quotas set before a crash hold after it.

Why a file and not a controller process: the fronts run on one machine and the run is
bounded; an append-only file gives one total order (the lock), durability, and an operator
can read what every front applies. Nothing here knows sockets or the event loop: records in,
the image out (`Image`); the server polls (`acceptor.dynamic`).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_FILE = "metadata.log"

#: a quota entity as Kafka's ClientQuotaRecord names it: ((type, name or None), ...),
#: type one of "ip", "user", "client-id"; None is the default entity
Entity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class ClientQuotaRecord:
    """One quota key of one entity set (value None: removed)."""

    entity: Entity
    key: str
    value: float | None


@dataclass(frozen=True)
class ConfigRecord:
    """One dynamic broker config: ``node`` None is the cluster default (resource ""),
    else that broker's own layer (resource "<node id>"; value None: deleted)."""

    node: int | None
    name: str
    value: str | None


Record = ClientQuotaRecord | ConfigRecord


@dataclass
class Image:
    """What the log says is in force, as one front applies it."""

    #: "default" -> rate for the default IP entity, "<ip>" -> rate (the name as given)
    ip_quotas: dict[str, int] = field(default_factory=dict)
    #: dynamic broker keys: the cluster-default layer and this front's node layer
    broker_config: dict[str, str] = field(default_factory=dict)
    node_config: dict[str, str] = field(default_factory=dict)
    #: request quotas by entity key, e.g. "user=alice,client-id=<default>"
    request_quotas: dict[str, dict[str, float]] = field(default_factory=dict)


def encode(batch: list[Record]) -> bytes:
    """One committed batch as its log line."""
    out: list[dict[str, Any]] = []
    for r in batch:
        if isinstance(r, ClientQuotaRecord):
            out.append(
                {"type": "client_quota", "entity": [list(e) for e in r.entity],
                 "key": r.key, "value": r.value}
            )  # fmt: skip
        else:
            out.append({"type": "config", "node": r.node, "name": r.name, "value": r.value})
    return (json.dumps({"records": out}, sort_keys=True) + "\n").encode()


def decode(line: bytes, where: str) -> list[Record]:
    """A log line back to its batch; ValueError naming ``where`` when it is not one."""
    try:
        raw = json.loads(line)
        batch: list[Record] = []
        for r in raw["records"]:
            if r["type"] == "client_quota":
                entity = tuple((str(t), None if n is None else str(n)) for t, n in r["entity"])
                rate = None if r["value"] is None else float(r["value"])
                batch.append(ClientQuotaRecord(entity, str(r["key"]), rate))
            elif r["type"] == "config":
                node = None if r["node"] is None else int(r["node"])
                value = None if r["value"] is None else str(r["value"])
                batch.append(ConfigRecord(node, str(r["name"]), value))
            else:
                raise ValueError(f"unknown record type {r['type']!r}")
        return batch
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(
            f"state.dir: {where} is not a metadata log line ({exc!r}); fix or remove the "
            "file to start from the configured limits"
        ) from exc


class MetadataLog:
    """``<state.dir>/metadata.log``: append a batch (under an exclusive lock, one write),
    read what was appended since the last read (whole lines only)."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / LOG_FILE
        self.offset = 0  # bytes read and applied so far
        self._line = 0

    def append(self, batch: list[Record]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, encode(batch))
            os.fsync(fd)
        finally:
            os.close(fd)  # releases the lock

    def changed(self) -> bool:
        """Whether the file grew past what was read (one stat, for the poll)."""
        try:
            return self.path.stat().st_size > self.offset
        except FileNotFoundError:
            return False

    def read_new(self) -> list[list[Record]]:
        try:
            with self.path.open("rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)  # no half-written batch
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        out = []
        for line in data[:end].splitlines():
            self._line += 1
            if line.strip():
                out.append(decode(line, f"{self.path} line {self._line}"))
        self.offset += end
        return out
