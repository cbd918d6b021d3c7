"""Run the quota-enforcing acceptor in front of a Kafka broker.

Reads a properties file (Kafka's keys plus listener.name.<l>.upstream=host:port), prints
each listener's address and upstream, the metrics URL and "ready"; SIGTERM/SIGINT stop it
cleanly (parked and queued sockets closed, connections closed, history flushed).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="acceptor properties file")
    parser.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override one property (repeatable); KEY= removes it",
    )
    parser.add_argument("--history", metavar="DIR", help="history directory (runs/<id>/history)")
    parser.add_argument("--run-id", default="adhoc", help="run id written in every history row")
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="write {listeners, metrics_url, pid} as JSON here once listening",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="event loop implementation (auto = uvloop when installed)",
    )


def run(args: argparse.Namespace) -> int:
    import asyncio
    import json
    import os
    import signal
    import sys
    from pathlib import Path

    from acceptor.config import load_config
    from acceptor.eventloop import new_event_loop
    from acceptor.server import Acceptor
    from base import procfs
    from base.quota.config import ConfigError

    if not args.config and not args.set:
        print("harness acceptor: give --config FILE (and/or --set key=value)", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config, args.set)
    except ConfigError as exc:
        print(f"harness acceptor: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"harness acceptor: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2

    if cfg.nice:  # every thread so far (imports start some); later ones inherit it
        try:
            for tid in procfs.thread_ids("self"):
                os.setpriority(os.PRIO_PROCESS, tid, cfg.nice)
        except OSError as exc:
            print(
                f"harness acceptor: invalid configuration: acceptor.nice={cfg.nice}: cannot be "
                f"applied ({exc}; a negative value needs root or CAP_SYS_NICE)",
                file=sys.stderr,
            )
            return 2
    loop = new_event_loop(args.loop)
    asyncio.set_event_loop(loop)
    try:
        acceptor = Acceptor(cfg, history_dir=args.history, run_id=args.run_id, out=sys.stdout)
    except (ValueError, OSError) as exc:
        print(f"harness acceptor: {exc}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    acceptor.on_failure = stop.set  # a processor process ended on its own

    async def main() -> None:
        await acceptor.start()
        for name, la in acceptor.listeners.items():
            s = la.settings
            print(
                f"{name}: {la.host}:{la.port} -> {s.upstream_host}:{s.upstream_port}"
                f" (proxy.protocol={s.proxy}{', protected' if la.protected else ''})",
                flush=True,
            )
        print(f"metrics: {acceptor.metrics.url or 'disabled'}", flush=True)
        if args.ready_file:
            ready = {
                "listeners": {
                    n: {"host": la.host, "port": la.port} for n, la in acceptor.listeners.items()
                },
                "metrics_url": acceptor.metrics.url,
                "pid": os.getpid(),
            }
            tmp = Path(args.ready_file).with_suffix(".tmp")
            tmp.write_text(json.dumps(ready), encoding="utf-8")
            os.replace(tmp, args.ready_file)
        print("ready", flush=True)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("stopping: closing listeners, parked sockets and connections", flush=True)
        await acceptor.stop()

    try:
        loop.run_until_complete(main())
    except OSError as exc:
        print(f"harness acceptor: cannot listen: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a processor process that did not start
        print(f"harness acceptor: cannot start: {exc}", file=sys.stderr)
        return 2
    finally:
        loop.close()
    if args.history:
        print(f"history written to {Path(args.history).resolve()}", flush=True)
    else:
        print("history: not recorded (no --history)", flush=True)
    if acceptor.failure is not None:
        print(f"harness acceptor: stopped on a failure: {acceptor.failure}", file=sys.stderr)
        return 1
    return 0
