"""What the closed-model profiles (steady, greedy) share under Locust: options, their
history writer, readiness markers, the load topic.

Imported by those profile files (never by pytest: it imports Locust, which
monkey-patches). The arrival profiles (storm, connect, per_request, single_ip_flood)
run on the storm engine through ``loadprofiles.driver`` instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner

from loadprofiles import readiness
from loadprofiles.client_history import ClientHistory
from loadprofiles.options import OptionError as OptionError
from loadprofiles.options import Settings as Settings
from loadprofiles.options import add_options

log = logging.getLogger("loadprofiles")


def listen(event_name: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` on Locust's ``events.<event_name>`` (typed wrapper)."""
    hook: Any = getattr(events, event_name)
    hook.add_listener(fn)


# -- options: loadprofiles.options (argparse converters), parsed once per test start ------
listen("init_command_line_parser", add_options)


def settings(env: Environment, host: str | None) -> Settings:
    """Validate the options once per process; errors name option, value and reason."""
    return Settings.from_options(env.parsed_options, host or env.host or "")


# -- history: one writer per Locust process ----------------------------------------------
_writer: Any = None


def history(env: Environment) -> Any:
    """The process's ClientHistory (None without ``--run-dir`` or on a master)."""
    global _writer
    if _writer is not None:
        return _writer
    o = env.parsed_options
    if not o or not o.run_dir or isinstance(env.runner, MasterRunner):
        return None
    run_id = o.run_id or Path(o.run_dir).name
    _writer = ClientHistory(Path(o.run_dir) / "history", run_id)
    gevent.spawn(_flush_loop, _writer)
    log.info("client history -> %s/%s-*.parquet", _writer.dir, _writer.name)
    return _writer


def _flush_loop(writer: Any, interval_s: float = 1.0) -> None:
    pool = gevent.get_hub().threadpool
    while _writer is writer:
        gevent.sleep(interval_s)
        if _writer is not writer:
            return
        try:
            writer.seal()  # rows come from this thread's greenlets: sealing here is safe
            batches = writer.drain()
            if batches:
                pool.spawn(writer.write, batches).get()
        except Exception as exc:  # keep the load running; say so loudly
            print(f"loadprofiles: history flush failed: {exc!r}", file=sys.stderr, flush=True)


def _flush_history(environment: Environment, **_: Any) -> None:
    if _writer is not None:
        _writer.seal()
        batches = _writer.drain()
        if batches:
            gevent.get_hub().threadpool.spawn(_writer.write, batches).get()


def _close_history(environment: Environment, **_: Any) -> None:
    global _writer
    if _writer is not None:
        # a flush may still be running in a native thread: let it finish its rename
        # before the last flush, or the process exit would lose its rows
        gevent.get_hub().threadpool.join()
        _writer.close()
        print(
            f"loadprofiles: client history: {_writer.rows_written} rows in {_writer.dir}",
            file=sys.stderr,
            flush=True,
        )
        _writer = None


listen("quitting", _close_history)


listen("test_stop", _flush_history)


def closed_model_readiness(environment: Environment, **_: Any) -> None:
    """Readiness markers (``--ready-dir``) of a closed-model profile (steady, greedy):
    up when every user is spawned, done at test stop (Locust's ``spawning_complete``
    carries no environment: bound here, on ``init``)."""
    if isinstance(environment.runner, MasterRunner):
        return

    def mark(kind: str) -> Any:
        def on_event(**_: Any) -> None:
            o = environment.parsed_options
            if o is not None:
                readiness.mark(o.ready_dir, kind)

        return on_event

    spawned: Any = environment.events.spawning_complete
    stopped: Any = environment.events.test_stop
    spawned.add_listener(mark(readiness.READY))
    stopped.add_listener(mark(readiness.DONE))


def prepare_topic(environment: Environment, **_: Any) -> None:
    """test_start of the producing closed-model profiles: create ``--topic`` before any
    load, or stop the run with the reason (exit 2) rather than measure a missing topic."""
    if isinstance(environment.runner, MasterRunner):
        return
    from loadprofiles.topics import ensure_load_topic

    try:
        s = settings(environment, None)
    except OptionError:
        return  # the profile reports bad options itself
    try:
        ensure_load_topic(s, history(environment))
    except ValueError as exc:
        print(f"loadprofiles: error: {exc}", file=sys.stderr, flush=True)
        environment.process_exit_code = 2
        if environment.runner is not None:
            gevent.spawn_later(0.1, environment.runner.quit)
