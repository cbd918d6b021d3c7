"""Benchmark: request-quota throttling by the acceptor against Kafka's own, side by side.

Kafka 4.3.1 charges a request its handler-thread time; the acceptor charges the broker time
it sees, forward -> response, less a long-poll fetch's `max_wait_ms` (docs/acceptor.md, "What
is charged"). This measures what that difference does to a client: the same workload under
the same `request_percentage` quota, against one real broker directly (Kafka charges and
throttles) and through the acceptor (the acceptor does; the broker has no quota for those
client ids), in alternating rounds. Each round uses fresh client ids (fresh quota buckets).

Workload: `--clients` connections per round, each sending Metadata (no topics) requests
back to back for `--seconds` (the next request right after the previous response: a muted
channel holds it until the throttle ends, on both paths). Per path: requests answered per
second, the share of responses that carried a throttle, the summed throttle_time_ms per
client per second.

    .venv/bin/python -m bench.request_charge [--seconds 12] [--clients 2] [--quota 10] \
        [--rounds 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.acceptor import start_acceptor
from harness.acceptor.testing import free_port, wait_until
from harness.admin.client import KafkaWire, alter_client_quota, describe_client_quotas


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


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
    from harness.broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-charge-"))
    _progress(f"starting Kafka in {work}")
    broker = start_broker(launcher="local", workdir=work / "broker", progress=_progress)
    proc = None
    try:
        port = free_port()
        upstream = int(broker.bootstrap.rpartition(":")[2])
        proc = start_acceptor(work, "charge", port, upstream, "auto")
        paths = {
            "kafka": (broker.bootstrap, broker.bootstrap),
            "acceptor": (f"127.0.0.1:{port}", f"127.0.0.1:{port}"),
        }
        rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
        for rnd in range(1, args.rounds + 1):
            order = list(paths) if rnd % 2 else list(reversed(paths))
            for name in order:
                _progress(f"round {rnd}: {name}, {args.clients} clients x {args.seconds:.0f} s")
                boot, admin = paths[name]
                r = run_round(boot, admin, name, args.clients, args.seconds, args.quota)
                _progress(
                    f"  {r['requests_per_s']:.0f} requests/s, "
                    f"{100 * r['throttled_share']:.1f} % throttled, "
                    f"{r['throttle_ms_per_client_s']:.0f} ms throttle per client-second"
                )
                rounds[name].append(r)
        summary = {
            name: {k: statistics.mean(r[k] for r in rs) for k in rs[0]}
            for name, rs in rounds.items()
        }
        k, a = summary["kafka"], summary["acceptor"]
        print()
        print(f"request_percentage={args.quota}, {args.clients} clients, Metadata back to back")
        print(f"{'':28}{'kafka':>12}{'acceptor':>12}{'ratio':>8}")
        for key, label in (
            ("requests_per_s", "requests answered/s"),
            ("throttled_share", "responses throttled"),
            ("throttle_ms_per_client_s", "throttle ms/client-s"),
        ):
            ratio = a[key] / k[key] if k[key] else float("nan")
            print(f"{label:28}{k[key]:>12.3f}{a[key]:>12.3f}{ratio:>8.2f}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "args": vars(args) | {"json": str(args.json)},
                        "rounds": rounds,
                        "summary": summary,
                    },
                    indent=2,
                )
            )
            print(f"numbers written to {args.json}")
        print(f"acceptor log and history: {work}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
