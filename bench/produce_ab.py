"""Benchmark: produce throughput through this acceptor and through another commit's, A/B.

`bench.acceptor --compare-ref` compares accept rates; this compares forwarding throughput,
where a change to the connection path (e.g. one request in flight per connection) would
show. One real broker with three listeners: PLAINTEXT (direct), FRONTED (advertised as the
current acceptor's address) and FRONTEDOLD (advertised as the other commit's acceptor, from
`git archive REF harness`), so each producer stays behind its own front after bootstrap.
Rounds alternate the order; the machine is shared, so read the per-round ratios, not one.

    .venv/bin/python -m bench.produce_ab --ref 72a4cbd [--rounds 4] [--records 30000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from base.localnet import free_port
from bench.toolkit.fronts import start_acceptor
from bench.toolkit.load import produce_throughput


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", required=True, help="the other commit (e.g. 72a4cbd)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--records", type=int, default=30000)
    ap.add_argument("--record-size", type=int, default=100)
    args = ap.parse_args(argv)
    from broker import start_broker

    work = Path(tempfile.mkdtemp(prefix="bench-produce-ab-"))
    src = work / "ref-src"
    src.mkdir()
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", args.ref, "harness"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    ports = {"current": free_port(), "ref": free_port()}
    _progress(f"starting Kafka with three listeners in {work}")
    broker = start_broker(
        launcher="local",
        listeners=("PLAINTEXT", "FRONTED", "FRONTEDOLD"),
        advertised={
            "FRONTED": f"127.0.0.1:{ports['current']}",
            "FRONTEDOLD": f"127.0.0.1:{ports['ref']}",
        },
        workdir=work / "broker",
        progress=_progress,
    )
    procs = []
    try:
        procs.append(
            start_acceptor(
                work, "current", ports["current"], broker.listener_ports["FRONTED"], "auto"
            )
        )
        procs.append(
            start_acceptor(
                work, "ref", ports["ref"], broker.listener_ports["FRONTEDOLD"], "auto", cwd=src
            )
        )
        boots = {
            "current": f"127.0.0.1:{ports['current']}",
            "ref": f"127.0.0.1:{ports['ref']}",
            "direct": f"127.0.0.1:{broker.listener_ports['PLAINTEXT']}",
        }
        res: dict[str, list[float]] = {name: [] for name in boots}
        for rnd in range(1, args.rounds + 1):
            order = ["current", "ref", "direct"] if rnd % 2 else ["ref", "current", "direct"]
            for name in order:
                r = produce_throughput(boots[name], f"ab-{name}", args.records, args.record_size)
                res[name].append(r)
                _progress(f"round {rnd} {name}: {r:.0f} records/s")
        print()
        for name, values in res.items():
            print(f"{name:8} median {statistics.median(values):8.0f}  best {max(values):8.0f}")
        pairs = [c / r for c, r in zip(res["current"], res["ref"], strict=True)]
        print(f"current/{args.ref} per round: {', '.join(f'{p:.2f}' for p in pairs)}")
        print(f"logs and history: {work}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
