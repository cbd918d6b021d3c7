"""Benchmark: request-quota throttling by the acceptor against Kafka's own, side by side.

Kafka 4.3.1 charges a request its handler-thread time. The acceptor charges, by default, the
broker time it sees, forward -> response, less a long-poll fetch's `max_wait_ms`; reading the
broker's request log (`upstream.request.log`) it charges Kafka's own handler time
(`localTimeMs` of each request's line; docs/acceptor.md, "What is charged"). This measures
what each does to a client: the same workload under the same `request_percentage` quota,
against one real broker (started with its request log on) directly (Kafka charges and
throttles), through an acceptor charging wall time (path `acceptor`, the old charge) and
through one reading the request log (path `acceptor_log`), in alternating rounds. Each round
uses fresh client ids (fresh quota buckets).

Workload: `--clients` connections per round, each sending Metadata (no topics) requests
back to back for `--seconds` (the next request right after the previous response: a muted
channel holds it until the throttle ends, on all paths). Per path: requests answered per
second, the share of responses that carried a throttle, the summed throttle_time_ms per
client per second; then what was charged per request: Kafka's `localTimeMs` for the direct
rounds (from the request log), the acceptors' `charged_ms` (from their history), and for the
log-reading acceptor the share of charges that came from the log, how many responses were
held for their line and how long. The load average is printed with every round.

    .venv/bin/python -m bench.request_charge [--seconds 12] [--clients 2] [--quota 10] \
        [--rounds 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from acceptor.testing import wait_until
from base.admin.client import KafkaWire, alter_client_quota, describe_client_quotas
from base.history.rows import AcceptorRequest
from base.localnet import free_port
from bench.toolkit.fronts import stop_process

PATHS = ("kafka", "acceptor", "acceptor_log")


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def start_acceptor(
    work: Path, tag: str, port: int, upstream: int, sets: list[str]
) -> subprocess.Popen[bytes]:
    """`harness acceptor` as its own process (history on), with extra `--set`s."""
    ready = work / f"ready-{tag}.json"
    extra = [a for kv in sets for a in ("--set", kv)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "acceptor",
         "--set", f"listeners=CLIENT://127.0.0.1:{port}",
         "--set", f"listener.name.client.upstream=127.0.0.1:{upstream}",
         "--set", "metrics.port=-1", *extra,
         "--history", str(work / f"history-{tag}"),
         "--run-id", f"bench-{tag}", "--ready-file", str(ready)],
        stdout=open(work / f"acceptor-{tag}.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, 60, 0.1, "the acceptor")
    except AssertionError:
        pass
    if not ready.exists():
        stop_process(proc)
        raise SystemExit(f"acceptor {tag} did not start; see {work / f'acceptor-{tag}.log'}")
    return proc


def kafka_charges(request_log: Path, prefix: str) -> tuple[list[float], list[float]]:
    """`localTimeMs` and `sendTimeMs` of the Metadata requests of clients `prefix*` in the
    broker's request log (and its rolled-over previous file)."""
    out: list[float] = []
    send: list[float] = []
    needle = f'"clientId":"{prefix}'.encode()
    for path in (Path(f"{request_log}.1"), request_log):
        if not path.exists():
            continue
        with open(path, "rb") as f:
            for line in f:
                if needle in line and b'"requestApiKey":3,' in line:
                    body = json.loads(line.partition(b":")[2])
                    out.append(float(body["localTimeMs"]))
                    send.append(float(body["sendTimeMs"]))
    return out, send


def acceptor_charges(history: Path) -> dict[str, Any]:
    """What an acceptor charged its Metadata requests (its `request` rows)."""
    from base.history.writer import read_history

    rows = read_history(history).to_pylist()
    charged: list[float] = []
    sources: dict[str, int] = {}
    held: list[float] = []
    network: list[float] = []
    for row in rows:
        if row.get("event") != "request" or row.get("api_key") != 3:
            continue
        detail = AcceptorRequest.parse(row.get("detail"))
        charged.append(float(detail.get("charged_ms", row["latency_ms"])))
        source = detail.get("charge_source", "wall")
        sources[source] = sources.get(source, 0) + 1
        if "held_ms" in detail:
            held.append(float(detail["held_ms"]))
        network.append(float(detail.get("network_ms", 0.0)))
    return {"charged_ms": charged, "sources": sources, "held_ms": held, "network_ms": network}


def _charge_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "mean_ms": statistics.mean(values),
        "median_ms": statistics.median(values),
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
    }


def _metadata_loop(boot: str, client_id: str, deadline: float, out: list[int]) -> None:
    from kafka.protocol.metadata import MetadataRequest

    with KafkaWire(boot, client_id=client_id) as wire:
        v = wire.version_for(MetadataRequest)
        req = MetadataRequest[v](
            topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        while time.monotonic() < deadline:
            out.append(int(wire.request(req).throttle_time_ms))


def run_round(
    boot: str, admin_boot: str, tag: str, clients: int, seconds: float, quota: float
) -> dict[str, Any]:
    ids = [f"charge-{tag}-{i}-{time.monotonic_ns()}" for i in range(clients)]
    for cid in ids:
        alter_client_quota(admin_boot, {"client-id": cid}, {"request_percentage": quota})
    for cid in ids:  # KRaft: in force once the metadata log is applied
        want = [({"client-id": cid}, {"request_percentage": quota})]
        wait_until(
            lambda c=cid, w=want: (
                describe_client_quotas(  # type: ignore[misc]
                    admin_boot, [("client-id", 0, c)], strict=True
                )
                == w
            ),
            timeout=30,
            what=f"quota for {cid}",
        )
    results: list[list[int]] = [[] for _ in ids]
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_metadata_loop, args=(boot, cid, deadline, res))
        for cid, res in zip(ids, results, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for cid in ids:
        alter_client_quota(admin_boot, {"client-id": cid}, {"request_percentage": None})
    answered = sum(len(r) for r in results)
    throttled = sum(1 for r in results for t in r if t > 0)
    return {
        "requests_per_s": answered / seconds,
        "throttled_share": throttled / max(answered, 1),
        "throttle_ms_per_client_s": statistics.mean(sum(r) / seconds for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--quota", type=float, default=10.0, help="request_percentage")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-charge-"))
    _progress(f"starting Kafka (request log on) in {work}")
    broker = start_broker(
        launcher="local", workdir=work / "broker", progress=_progress, request_log=True
    )
    assert broker.request_log_path is not None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        upstream = int(broker.bootstrap.rpartition(":")[2])
        ports = {"acceptor": free_port(), "acceptor_log": free_port()}
        procs.append(start_acceptor(work, "acceptor", ports["acceptor"], upstream, []))
        procs.append(
            start_acceptor(
                work,
                "acceptor_log",
                ports["acceptor_log"],
                upstream,
                [f"upstream.request.log={broker.request_log_path}"],
            )
        )
        paths = {"kafka": broker.bootstrap} | {
            name: f"127.0.0.1:{port}" for name, port in ports.items()
        }
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
        for rnd in range(1, args.rounds + 1):
            order = list(PATHS) if rnd % 2 else list(reversed(PATHS))
            for name in order:
                what = f"{args.clients} clients x {args.seconds:.0f} s"
                _progress(f"round {rnd}: {name}, {what} ({_load()})")
                boot = paths[name]
                r = run_round(boot, boot, name, args.clients, args.seconds, args.quota)
                r["load1"] = os.getloadavg()[0]
                _progress(
                    f"  {r['requests_per_s']:.0f} requests/s, "
                    f"{100 * r['throttled_share']:.1f} % throttled, "
                    f"{r['throttle_ms_per_client_s']:.0f} ms throttle per client-second"
                )
                rounds[name].append(r)
    finally:
        for proc in procs:
            stop_process(proc)
        broker.stop()
    keys = ("requests_per_s", "throttled_share", "throttle_ms_per_client_s")
    summary = {
        name: {k: statistics.mean(r[k] for r in rs) for k in keys} for name, rs in rounds.items()
    }
    local, send = kafka_charges(broker.request_log_path, "charge-kafka-")
    charges: dict[str, Any] = {"kafka": _charge_summary(local) | {"network": _charge_summary(send)}}
    for name in ("acceptor", "acceptor_log"):
        got = acceptor_charges(work / f"history-{name}")
        charges[name] = _charge_summary(got["charged_ms"]) | {
            "sources": got["sources"],
            "held": _charge_summary(got["held_ms"]),
            "network": _charge_summary(got["network_ms"]),
        }
    k = summary["kafka"]
    print()
    print(f"request_percentage={args.quota}, {args.clients} clients, Metadata back to back")
    print(f"{'':28}{'kafka':>12}{'acceptor':>12}{'ratio':>8}{'acc+log':>12}{'ratio':>8}")
    for key, label in (
        ("requests_per_s", "requests answered/s"),
        ("throttled_share", "responses throttled"),
        ("throttle_ms_per_client_s", "throttle ms/client-s"),
    ):
        row = f"{label:28}{k[key]:>12.3f}"
        for name in ("acceptor", "acceptor_log"):
            v = summary[name][key]
            ratio = v / k[key] if k[key] else float("nan")
            row += f"{v:>12.3f}{ratio:>8.2f}"
        print(row)
    print(
        "charged per Metadata request (ms), throttled + unthrottled: kafka localTimeMs and "
        "sendTimeMs (of the direct rounds), the acceptors' charged_ms and network_ms"
    )
    for name in PATHS:
        c = charges[name]
        net = c["network"]
        if c.get("n"):
            print(
                f"  {name:14} n={c['n']:<8} mean {c['mean_ms']:.4f}  median {c['median_ms']:.4f}"
                f"  p99 {c['p99_ms']:.4f}; + mean {net.get('mean_ms', 0.0):.4f}"
            )
    log = charges["acceptor_log"]
    held = log["held"]
    print(
        f"  acceptor_log charge sources {log['sources']}; held for the line: {held['n']}"
        + (
            f" (median {held['median_ms']:.3f} ms, p99 {held['p99_ms']:.3f} ms)"
            if held["n"]
            else ""
        )
    )
    print(f"loads per round: {[round(r['load1'], 1) for rs in rounds.values() for r in rs]}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"json": str(args.json)},
                    "rounds": rounds,
                    "summary": summary,
                    "charges": charges,
                },
                indent=2,
            )
        )
        print(f"numbers written to {args.json}")
    print(f"acceptor logs, histories and the broker's request log: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
