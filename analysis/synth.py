"""Synthetic run directories: the checker's input before (and besides) real runs.

A conforming history comes from an event-driven simulation of one broker's acceptors
(one accept thread per listener, the broker meter shared) whose admission decisions come
from `analysis.model` — the same independent model the replay uses, so a conforming
history must replay with full agreement. Each `broken` flag breaks exactly one rule the
checks guard, so every check has a history that must fail it. Sizes go from a few hundred
rows (tests at window edges) to 10 M events (bench): rows are written in Parquet parts
with the shared schema, like `HistoryWriter` does.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.model import INT_MAX, AdmissionModel, Limits
from base.history.rows import (
    AcceptorAccept,
    AcceptorAdmit,
    AcceptorClose,
    AcceptorDelay,
    AcceptorRegister,
    AcceptorReject,
    AcceptorRequest,
    AcceptorRequestThrottle,
    AcceptorThrottleClose,
    ClientClosed,
    ClientConnectFail,
    ClientConnectInvoke,
    ClientConnectInvokeDetail,
    ClientConnectOk,
    ClientIds,
    ClientReady,
    ClientRequestFail,
    ClientRequestOk,
    ConnInfo,
    HarnessConfig,
    HarnessPhaseEnd,
    HarnessPhaseStart,
    HarnessRunEnd,
    HarnessRunStart,
    Outcome,
    Row,
    client_ids,
)
from base.history.schema import SCHEMA

BROKEN_FLAGS = frozenset(
    {
        "ip_count",  # per-IP count limit not enforced
        "delay_over_window",  # rate delays longer than the quota window
        "ip_rate",  # per-IP connection rate not enforced
        "broker_rate",  # broker/listener connection rate not enforced
        "protected_delayed",  # inter-broker listener delayed by the broker-wide rate
        "queue_over",  # a processor queue deeper than 20
        "exempt_throttle",  # request throttle on WriteTxnMarkers, the one exempt API
        "client_disagree",  # client outcomes contradict the acceptor's records
        "short_load",  # generator offered < 95 % of the intended arrivals
        "lost_change",  # the enforcer never records the runner's dynamic change
    }
)

BASE_MONO_NS = 1_000_000_000_000  # CLOCK_MONOTONIC of "run start" (arbitrary, fixed)
BASE_WALL_US = 1_798_761_600_000_000  # 2027-01-01T00:00:00Z
MS = 1_000_000


def default_config(scale: float = 1.0) -> dict[str, Any]:
    """Initial limits of a synthetic run (Kafka keys), rates multiplied by `scale`."""

    def r(x: float) -> int:
        return max(1, round(x * scale))

    return {
        "quota.window.num": 11,
        "quota.window.size.seconds": 1,
        "listeners": "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093",
        "inter.broker.listener.name": "INTERNAL",
        "max.connections": 1000,
        "listener.name.client.max.connections": 900,
        "max.connections.per.ip": 50,
        "max.connections.per.ip.overrides": "127.0.0.9:5",
        "max.connection.creation.rate": r(25),
        "listener.name.client.max.connection.creation.rate": r(30),
        "ip_quotas": {"default": r(10), "127.0.0.9": r(2)},
        "request_quotas": {},
    }


@dataclass
class SynthSpec:
    """What to generate. `cycles` storm cycles of `cycle_s`; or set `target_events`."""

    run_id: str = "synth"
    seed: int = 7
    scale: float = 1.0
    cycles: int = 2
    target_events: int | None = None
    cycle_s: float = 30.0
    burst: int = 900  # storm arrivals per cycle (× scale), spread over burst_s
    burst_s: float = 3.0
    storm_ips: int = 40
    flood_rate: float = 10.0  # arrivals/s from the single flood IP 127.0.0.9 (× scale)
    internal_rate: float = 2.0  # inter-broker listener arrivals/s
    baseline_s: float = 5.0
    target: str = "acceptor"
    broken: frozenset[str] = frozenset()
    config: dict[str, Any] | None = None
    config_change: dict[str, Any] | None = None  # applied halfway through the storm
    fairness_p99_ratio: float | None = 3.0
    part_rows: int = 250_000
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.broken) - BROKEN_FLAGS
        if unknown:
            raise ValueError(
                f"synth: broken={sorted(unknown)}: unknown flag(s); known: {sorted(BROKEN_FLAGS)}"
            )


class _Parts:
    """Buffers rows of one source and writes them as Parquet parts of the shared schema."""

    def __init__(
        self, history: Path, source: str, run_id: str, part_rows: int, name: str | None = None
    ):
        self.name = name or f"{source}-synth"
        self.dir = history / source
        self.dir.mkdir(parents=True, exist_ok=True)
        self.source = source
        self.run_id = run_id
        self.part_rows = part_rows
        self.rows: list[tuple[Any, ...]] = []
        self.seq = 0
        self.part = 0
        self.written = 0

    def put(self, row: Row) -> None:
        """One event's typed row (`base.history.rows`)."""
        self.seq += 1
        ns, detail = row[1], row[-1]  # FIELDS: mono_ns, detail
        assert ns is not None
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail, sort_keys=True)
        wall = BASE_WALL_US + (ns - BASE_MONO_NS) // 1000
        self.rows.append((self.run_id, self.source, self.seq, wall, *row[1:-1], detail))
        if len(self.rows) >= self.part_rows:
            self.flush()

    def add(
        self,
        event: str,
        ns: int,
        conn_id: str | None = None,
        listener: str | None = None,
        ip: str | None = None,
        port: int | None = None,
        processor: int | None = None,
        reason: str | None = None,
        delay_ms: float | None = None,
        api_key: int | None = None,
        latency_ms: float | None = None,
        detail: Mapping[str, Any] | None = None,
        client_id: str | None = None,
        principal: str | None = None,
    ) -> None:
        self.seq += 1
        self.rows.append(
            (
                self.run_id,
                self.source,
                self.seq,
                BASE_WALL_US + (ns - BASE_MONO_NS) // 1000,
                ns,
                event,
                conn_id,
                listener,
                ip,
                port,
                ip,
                port,
                processor,
                reason,
                delay_ms,
                api_key,
                client_id,
                principal,
                latency_ms,
                None,
                None if detail is None else json.dumps(detail, sort_keys=True),
            )
        )
        if len(self.rows) >= self.part_rows:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        cols = list(zip(*self.rows, strict=True))
        table = pa.Table.from_arrays(
            [pa.array(c, type=SCHEMA.field(i).type) for i, c in enumerate(cols)], schema=SCHEMA
        )
        self.part += 1
        name = f"{self.name}-{self.part:05d}.parquet"
        tmp = self.dir / f".{name}.tmp"
        pq.write_table(table, tmp, compression="snappy")
        tmp.rename(self.dir / name)
        self.written += len(self.rows)
        self.rows = []


@dataclass
class _Conn:
    n: int
    listener: str
    ip: str
    port: int
    profile: str
    arrive_ns: int
    lifetime_ms: float
    requests: int
    t0_ns: int = 0
    delay_ms: int = 0

    def ids(self) -> ClientIds:
        """Its client rows' identity columns (no conn_id: joined by address)."""
        return client_ids(None, self.listener, self.ip, self.port)


# event kinds, ordered so that at one instant closes free slots before new admissions
_CONFIG, _CLOSE, _ARRIVE, _ACCEPT, _IPSTEP = range(5)


class _Sim:
    def __init__(self, spec: SynthSpec, run_dir: Path):
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.broken = spec.broken
        self.config = dict(spec.config or default_config(spec.scale))
        self.limits = Limits.from_config(self.config)
        self.enforcer_started = False
        self.model = AdmissionModel(self.limits)
        history = run_dir / "history"
        self.client = _Parts(history, "client", spec.run_id, spec.part_rows)
        self.acceptor = _Parts(history, "acceptor", spec.run_id, spec.part_rows)
        self.harness = _Parts(history, "harness", spec.run_id, spec.part_rows)
        self.heap: list[tuple[int, int, int, Any]] = []
        self.tick = 0
        self.backlog: dict[str, deque[_Conn]] = {"client": deque(), "internal": deque()}
        self.busy: dict[str, bool] = {"client": False, "internal": False}
        self.waiting: dict[str, _Conn | None] = {"client": None, "internal": None}
        self.ports: dict[str, int] = {}
        self.conns = 0
        self.storm_windows: list[tuple[int, int]] = []
        self.end_ns = BASE_MONO_NS

    # -- scheduling -----------------------------------------------------------------
    def push(self, ns: int, kind: int, payload: Any) -> None:
        self.tick += 1
        heapq.heappush(self.heap, (ns, kind, self.tick, payload))

    def new_conn(
        self, ns: int, listener: str, ip: str, profile: str, life: float, req: int
    ) -> None:
        port = self.ports.get(ip, 1024) + 1
        if port > 65535:
            port = 1025
        self.ports[ip] = port
        self.conns += 1
        conn = _Conn(self.conns, listener, ip, port, profile, ns, life, req)
        self.push(ns, _ARRIVE, conn)

    def in_storm(self, ns: int) -> bool:
        return any(a <= ns < b for a, b in self.storm_windows)

    # -- the acceptor ---------------------------------------------------------------
    def on_arrive(self, now: int, c: _Conn) -> None:
        intended = now - self.rng.randint(0, 200_000)
        detail: ClientConnectInvokeDetail = {"intended_mono_ns": intended, "profile": c.profile}
        if "short_load" in self.broken and c.profile == "storm" and self.rng.random() < 0.12:
            self.client.put(
                ClientConnectFail(
                    now,
                    *c.ids(),
                    reason="not_offered",
                    detail={
                        "cause": "cpu",
                        "intended_mono_ns": intended,
                        "profile": c.profile,
                    },
                )
            )
            return
        self.client.put(
            ClientConnectInvoke(
                now - 50_000,
                *c.ids(),
                detail=detail,
            )
        )
        self.client.put(
            ClientConnectOk(
                now + 100_000,
                *c.ids(),
                latency_ms=0.15,
            )
        )
        self.backlog[c.listener].append(c)
        if not self.busy[c.listener]:
            self.busy[c.listener] = True
            self.push(now + 20_000, _ACCEPT, c.listener)

    def on_accept(self, now: int, listener: str) -> None:
        c = self.backlog[listener].popleft()
        c.t0_ns = now
        cid = f"{listener}-{c.n}"
        protected = self.limits.is_protected(listener)
        self.acceptor.put(
            AcceptorAccept(
                now,
                ConnInfo(cid, listener, c.ip, c.port, c.ip, c.port),
                detail={"protected": protected},
            )
        )
        step = self.model.rate_step(listener, now // MS)
        broker_ms, listener_ms = step.broker_ms, step.listener_ms
        if "broker_rate" in self.broken:
            broker_ms = listener_ms = 0
        if "protected_delayed" in self.broken and protected and self.rng.random() < 0.5:
            broker_ms = 120
        delay = max(broker_ms, listener_ms)
        if "delay_over_window" in self.broken and delay > 0 and self.rng.random() < 0.05:
            delay = self.limits.window_ms + 400
            broker_ms = max(broker_ms, delay)
        c.delay_ms = delay
        if delay > 0:
            reason = "broker_rate" if broker_ms >= listener_ms else "listener_rate"
            self.acceptor.put(
                AcceptorDelay(
                    now,
                    ConnInfo(cid, listener, c.ip, c.port, c.ip, c.port),
                    reason=reason,
                    delay_ms=float(delay),
                    detail={"broker_delay_ms": broker_ms, "listener_delay_ms": listener_ms},
                )
            )
        self.push(now + delay * MS + 30_000, _IPSTEP, c)

    def on_ipstep(self, now: int, c: _Conn) -> None:
        listener = c.listener
        if not self.model.slot_available(listener):
            self.waiting[listener] = c
            return
        cid = f"{listener}-{c.n}"
        t1_ms = now // MS
        if "ip_rate" in self.broken or "ip_count" in self.broken:
            real = self.model.limits
            patched = Limits.from_config(
                {
                    **self.config,
                    **({"ip_quotas": {}} if "ip_rate" in self.broken else {}),
                    **(
                        {
                            "max.connections.per.ip": INT_MAX,
                            "max.connections.per.ip.overrides": "",
                        }
                        if "ip_count" in self.broken
                        else {}
                    ),
                }
            )
            self.model.limits = patched
            step = self.model.ip_step(listener, c.ip, t1_ms)
            self.model.limits = real
        else:
            step = self.model.ip_step(listener, c.ip, t1_ms)
        disagree = "client_disagree" in self.broken and self.rng.random() < 0.2
        if step.outcome == "admit":
            self.admit(now, c, cid, lie=disagree)
        elif step.outcome == "reject":
            self.acceptor.put(
                AcceptorReject(
                    now,
                    ConnInfo(cid, listener, c.ip, c.port, c.ip, c.port),
                    reason="ip_count",
                    detail={"count": step.count, "max": step.max},
                )
            )
            self.client_eof(now + 300_000, c, served=disagree)
        else:
            end = now + step.throttle_ms * MS + self.rng.randint(1, 20) * MS
            self.acceptor.put(
                AcceptorThrottleClose(
                    end,
                    ConnInfo(cid, listener, c.ip, c.port, c.ip, c.port),
                    reason="ip_rate",
                    delay_ms=float(step.throttle_ms),
                    detail={"throttle_start_mono_ns": now},
                )
            )
            self.client_eof(end + 300_000, c, served=disagree)
        self.next_accept(now, listener)

    def next_accept(self, now: int, listener: str) -> None:
        if self.backlog[listener]:
            self.push(now + 20_000, _ACCEPT, listener)
        else:
            self.busy[listener] = False

    def admit(self, now: int, c: _Conn, cid: str, lie: bool) -> None:
        L = c.listener
        self.acceptor.put(
            AcceptorAdmit(
                now, ConnInfo(cid, L, c.ip, c.port, c.ip, c.port), delay_ms=(now - c.t0_ns) / MS
            )
        )
        reg = now + 50_000
        depth = self.rng.randint(0, 6)
        if "queue_over" in self.broken and self.rng.random() < 0.01:
            depth = 25
        proc = c.n % 3
        self.acceptor.put(
            AcceptorRegister(
                reg,
                ConnInfo(cid, L, c.ip, c.port, c.ip, c.port),
                processor=proc,
                detail={"queue_depth": depth},
            )
        )
        t = reg
        for i in range(c.requests):
            gap = 250 * MS if c.profile == "steady" else self.rng.randint(1, 5) * MS
            t += gap
            lat = self.rng.lognormvariate(0.7, 0.25)
            if c.profile == "steady" and self.in_storm(t):
                lat *= 1.4
            api = 18 if i == 0 else 3
            done = t + int(lat * MS)
            self.acceptor.put(
                AcceptorRequest(
                    done,
                    ConnInfo(cid, L, c.ip, c.port, c.ip, c.port),
                    api_key=api,
                    latency_ms=lat * 0.8,
                )
            )
            if i == 0:
                ready_lat = (done - c.arrive_ns + 50_000) / MS
                if lie and c.delay_ms > 0:
                    ready_lat = max(0.1, c.delay_ms / 4)
                self.client.put(
                    ClientReady(
                        done,
                        *c.ids(),
                        latency_ms=ready_lat,
                    )
                )
            self.client.put(
                ClientRequestOk(
                    done,
                    *c.ids(),
                    api_key=api,
                    latency_ms=lat,
                )
            )
            if c.profile != "steady" and self.rng.random() < 0.002:
                api_t = 27 if "exempt_throttle" in self.broken else 0  # WriteTxnMarkers
                self.acceptor.put(
                    AcceptorRequestThrottle(
                        done,
                        ConnInfo(cid, L, c.ip, c.port, c.ip, c.port),
                        api_key=api_t,
                        delay_ms=float(self.rng.randint(1, 900)),
                        detail={"bucket": "client-id", "quota": 50.0},
                    )
                )
        close = max(t + MS, now + int(c.lifetime_ms * MS))
        self.push(close, _CLOSE, (c, cid))

    def client_eof(self, ns: int, c: _Conn, served: bool) -> None:
        if served:
            self.client.put(
                ClientReady(
                    ns,
                    *c.ids(),
                    latency_ms=(ns - c.arrive_ns) / MS,
                )
            )
            self.client.put(
                ClientClosed(
                    ns + MS,
                    *c.ids(),
                    reason="done",
                    detail={"outcome": "served"},
                )
            )
            return
        self.client.put(
            ClientRequestFail(
                ns,
                *c.ids(),
                reason="eof",
            )
        )
        self.client.put(
            ClientClosed(
                ns + 10_000,
                *c.ids(),
                reason="eof",
                detail={"outcome": "eof_after_accept"},
            )
        )

    def on_close(self, now: int, payload: tuple[_Conn, str]) -> None:
        c, cid = payload
        self.model.release(c.listener, c.ip)
        self.acceptor.put(
            AcceptorClose(
                now, ConnInfo(cid, c.listener, c.ip, c.port, c.ip, c.port), reason="client_eof"
            )
        )
        outcome: Outcome = "delayed_served" if c.delay_ms > 0 else "served"
        self.client.put(
            ClientClosed(
                now - 20_000,
                *c.ids(),
                reason="done",
                detail={"outcome": outcome},
            )
        )
        for listener, waiting in self.waiting.items():
            if waiting is not None and self.model.slot_available(listener):
                self.waiting[listener] = None
                self.push(now + 10_000, _IPSTEP, waiting)

    def on_config(self, now: int, change: Mapping[str, Any]) -> None:
        self.config.update(change)
        self.limits = Limits.from_config(self.config)
        self.model.reconfigure(self.limits)
        self._config_rows(now)

    def _config_rows(self, now: int) -> None:
        """The enforcer's row at the instant it applied the limits (target acceptor), and the
        runner's testimony once acknowledged, bracketing it (analysis.load)."""
        if self.spec.target == "acceptor" and "lost_change" not in self.spec.broken:
            self.harness.put(HarnessConfig(now, detail={**self.config, "cause": "synth"}))
        elif self.spec.target == "acceptor" and not self.enforcer_started:
            self.harness.put(HarnessConfig(now, detail={**self.config, "cause": "synth"}))
        self.enforcer_started = True
        runner = {**self.config, "origin": "runner", "applied_from_mono_ns": now - MS // 2}
        self.harness.put(HarnessConfig(now + MS // 2, detail=runner))

    # -- the schedule ---------------------------------------------------------------
    def schedule(self) -> tuple[int, int]:
        spec, rng, s = self.spec, self.rng, self.spec.scale
        t = BASE_MONO_NS
        self.harness.put(HarnessRunStart(t, detail={"scenario": "synth", "target": spec.target}))
        self._config_rows(t + MS)
        base_end = t + int(spec.baseline_s * 1e9)
        self.harness.put(
            HarnessPhaseStart(
                t + 2 * MS, detail={"name": "baseline", "profile": "steady", "intended_rate": 0}
            )
        )
        cycles = spec.cycles
        if spec.target_events:
            per_cycle = (
                spec.burst * s + (spec.flood_rate * s + spec.internal_rate) * spec.cycle_s
            ) * 10.5
            cycles = max(1, round(spec.target_events / per_cycle))
        storm_end = base_end + int(cycles * spec.cycle_s * 1e9)
        end = storm_end + int(3e9)
        self.storm_windows = [(base_end, storm_end)]
        for k in range(2):  # steady victims, open the whole run
            n_req = int((end - t - int(0.3e9)) / (250 * MS)) - 2
            self.new_conn(
                t + int(0.1e9) + k * MS, "client", "127.0.0.2", "steady", (end - t) / MS, n_req
            )
        self.harness.put(HarnessPhaseEnd(base_end, detail={"name": "baseline"}))
        intended = spec.burst * s / spec.cycle_s
        self.harness.put(
            HarnessPhaseStart(
                base_end, detail={"name": "storm", "profile": "storm", "intended_rate": intended}
            )
        )
        ips = [f"127.0.0.{10 + i}" for i in range(spec.storm_ips)]
        for k in range(cycles):
            c0 = base_end + int(k * spec.cycle_s * 1e9)
            for _ in range(int(spec.burst * s)):
                at = c0 + int(rng.random() * spec.burst_s * 1e9)
                self.new_conn(at, "client", rng.choice(ips), "storm", rng.uniform(300, 1200), 1)
            n_flood = int(spec.flood_rate * s * spec.cycle_s)
            for _ in range(n_flood):
                at = c0 + int(rng.random() * spec.cycle_s * 1e9)
                self.new_conn(at, "client", "127.0.0.9", "flood", 3000, 1)
            for _ in range(int(spec.internal_rate * spec.cycle_s)):
                at = c0 + int(rng.random() * spec.cycle_s * 1e9)
                self.new_conn(at, "internal", "127.0.0.3", "interbroker", 5000, 1)
        if spec.config_change:
            self.push(base_end + (storm_end - base_end) // 2, _CONFIG, spec.config_change)
        self.harness.put(HarnessPhaseEnd(storm_end, detail={"name": "storm"}))
        return t, end

    def run(self) -> dict[str, Any]:
        start, end = self.schedule()
        handlers: dict[int, Callable[[int, Any], None]] = {
            _CONFIG: self.on_config,
            _CLOSE: self.on_close,
            _ARRIVE: self.on_arrive,
            _ACCEPT: self.on_accept,
            _IPSTEP: self.on_ipstep,
        }
        heap = self.heap
        last = start
        while heap:
            ns, kind, _, payload = heapq.heappop(heap)
            handlers[kind](ns, payload)
            last = ns
        end = max(end, last + MS)
        self.harness.put(HarnessRunEnd(end, detail={"scenario": "synth"}))
        for parts in (self.client, self.acceptor, self.harness):
            parts.flush()
        self.end_ns = end
        return {"start_ns": start, "end_ns": end}


def _iso(ns: int) -> str:
    import datetime as dt

    us = BASE_WALL_US + (ns - BASE_MONO_NS) // 1000
    return dt.datetime.fromtimestamp(us / 1e6, tz=dt.UTC).isoformat()


def generate(run_dir: str | Path, spec: SynthSpec | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write a complete run directory; returns run.json plus `events` (rows written)."""
    spec = spec or SynthSpec(**kwargs)
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    sim = _Sim(spec, run)
    times = sim.run()
    if spec.target == "broker":
        for parts in (sim.acceptor,):
            for f in parts.dir.glob("*.parquet"):
                f.unlink()
            parts.dir.rmdir()
    events = sim.client.written + sim.harness.written
    events += sim.acceptor.written if spec.target != "broker" else 0
    run_json: dict[str, Any] = {
        "run_id": spec.run_id,
        "scenario": "synth-storm",
        "scenario_spec": {"generator": "analysis.synth", "broken": sorted(spec.broken)},
        "target": spec.target,
        "seed": spec.seed,
        "started_at": _iso(times["start_ns"]),
        "ended_at": _iso(times["end_ns"]),
        "versions": {"kafka": "synthetic", "harness": "synthetic"},
        "limits": dict(spec.config or default_config(spec.scale)),
        "expect": {
            "checks": [],
            "slack_ms": 50.0,
            "verdict": "fail" if spec.broken else "pass",
            **(
                {"fairness_p99_ratio": spec.fairness_p99_ratio}
                if spec.fairness_p99_ratio is not None
                else {}
            ),
        },
        "load": [
            {
                "profile": "storm",
                "intended_rate": spec.burst * spec.scale / spec.cycle_s,
                "arrival": "burst",
                "source_ips": spec.storm_ips,
            },
            {
                "profile": "flood",
                "intended_rate": spec.flood_rate * spec.scale,
                "arrival": "poisson",
                "source_ips": 1,
            },
            {"profile": "steady", "intended_rate": 0, "arrival": "persistent", "source_ips": 1},
        ],
        **spec.extra,
    }
    (run / "run.json").write_text(json.dumps(run_json, indent=2, sort_keys=True))
    return {**run_json, "events": events, "connections": sim.conns}


def write_rows(
    run_dir: str | Path, rows: Iterable[Mapping[str, Any]], run: Mapping[str, Any]
) -> Path:
    """Write hand-built rows (tests at exact window edges) as one part per source, or per
    ``writer`` when a row names one (its file name: ``acceptor-<pid>``, ``acceptor-config-<pid>``
    as one acceptor process writes them)."""
    run_dir = Path(run_dir)
    history = run_dir / "history"
    parts: dict[tuple[str, str | None], _Parts] = {}
    for r in rows:
        src, writer = str(r["source"]), r.get("writer")
        p = parts.get((src, writer))
        if p is None:
            p = _Parts(history, src, str(run.get("run_id", "t")), 10**9, writer)
            parts[(src, writer)] = p
        skip = ("source", "event", "mono_ns", "writer")
        fields = {k: v for k, v in r.items() if k not in skip}
        p.add(str(r["event"]), int(r["mono_ns"]), **fields)
    for p in parts.values():
        p.flush()
    (run_dir / "run.json").write_text(json.dumps(dict(run), indent=2, sort_keys=True))
    return run_dir
