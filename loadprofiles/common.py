"""What every connection profile shares under Locust: options, history, the arrival driver.

Imported by the profile files (never by pytest: it imports Locust, which monkey-patches).

Load is set by ``--arrival``, not by ``-u``: each Locust process runs one driver
user that starts every intended arrival as its own greenlet at its scheduled time
(open model). With ``--processes N`` or master/worker, driver ``i`` of ``N`` takes
the global arrivals ``k`` with ``k % N == i``; extra users in one process idle.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, cast

import gevent
import gevent.pool
from locust import User, constant, events, task
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from loadprofiles import addresses, arrivals, readiness
from loadprofiles.client_history import ClientHistory
from loadprofiles.engine import EngineStats
from loadprofiles.kafka_client import (
    ClientConfig,
    ClientError,
    KafkaConnection,
    NotOffered,
)
from loadprofiles.options import OptionError as OptionError
from loadprofiles.options import Settings as Settings
from loadprofiles.options import add_options, arrival_slot

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


# -- intended vs offered ------------------------------------------------------------------
# The greenlet profiles count intended vs offered exactly as the storm engine does.
ArrivalStats = EngineStats


STATS = ArrivalStats()
_driver: gevent.Greenlet | None = None


def _reset_driver(environment: Environment, **_: Any) -> None:
    global STATS, _driver
    STATS = ArrivalStats()
    _driver = None


def _stop_driver(environment: Environment, **_: Any) -> None:
    """Test stop: end the schedule; in-flight connections get a short grace period."""
    if _driver is not None and not _driver.dead:
        _driver.kill(block=True, timeout=5.0)


listen("test_start", _reset_driver)


def _print_summary(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, MasterRunner) or STATS.intended == 0:
        return
    short = STATS.intended - STATS.offered
    print(f"loadprofiles[{os.getpid()}]: arrivals: {STATS.summary()}", file=sys.stderr, flush=True)
    if short:
        print(
            f"loadprofiles[{os.getpid()}]: WARNING: {short} of {STATS.intended} intended arrivals "
            f"were not offered ({STATS.not_offered}); checks needing that load are unknown",
            file=sys.stderr,
            flush=True,
        )


def _on_test_stop(environment: Environment, **kw: Any) -> None:
    # in this order: no arrivals after the summary, no rows after the flush
    _stop_driver(environment)
    _print_summary(environment)
    _flush_history(environment)


listen("test_stop", _on_test_stop)


# -- the driver --------------------------------------------------------------------------


class ArrivalUser(User):
    """Open-model driver: one per process; each arrival runs ``session()`` in a greenlet.

    Subclasses set ``profile`` and implement ``session(conn)`` (the requests of one
    connection, after ``connect()``). ``default_source_ips`` /
    ``default_proxy_client_ips`` apply when the options leave them empty.
    """

    abstract = True
    wait_time = constant(1)
    profile: ClassVar[str] = "arrival"
    default_source_ips: ClassVar[str] = ""
    default_proxy_client_ips: ClassVar[str] = ""

    def session(self, conn: KafkaConnection) -> None:
        raise NotImplementedError

    def _slots(self) -> tuple[int, int]:
        runner = self.environment.runner
        worker = runner.worker_index if isinstance(runner, WorkerRunner) else None
        return arrival_slot(self.environment.parsed_options, worker)

    def _settings(self) -> Settings:
        s = settings(self.environment, self.host)
        o = self.environment.parsed_options
        if not s.source_ips and self.default_source_ips:
            s.source_ips = addresses.parse_ip_pool(self.default_source_ips)
        if not s.proxy_client_ips and self.default_proxy_client_ips and s.proxy_protocol != "off":
            s.proxy_client_ips = addresses.parse_ip_pool(self.default_proxy_client_ips)
        if o.via_haproxy != "off":
            s.proxy_protocol = "off"  # HAProxy adds the header
        return s

    def _fail(self, message: str) -> None:
        log.error("%s: %s", self.profile, message)
        print(f"loadprofiles: error: {message}", file=sys.stderr, flush=True)
        self.environment.process_exit_code = 2
        runner = self.environment.runner
        if runner is not None:
            gevent.spawn_later(0.1, runner.quit)

    @task
    def follow_schedule(self) -> None:
        """The only task: make sure this process's schedule runs, then idle.

        The schedule runs in a process-level greenlet, not in this user: Locust may
        stop and restart users when it rebalances workers, and the arrivals must not
        stop or start over with them. Extra users (``-u`` above one per process) idle.
        """
        global _driver
        if _driver is None:
            _driver = gevent.spawn(self._drive_process)
        else:
            log.info("%s: this process already drives the schedule; user idles", self.profile)
        while True:  # waiting the Locust way, so --stop-timeout does not wait for us
            cast(Any, self).wait()  # Locust's wait() is untyped

    def _drive_process(self) -> None:
        try:
            s = self._settings()
        except OptionError as exc:
            self._fail(str(exc))
            return
        slot, slots = self._slots()
        self.drive(s, slot, slots)
        self._quit_if_done()

    def _quit_if_done(self) -> None:
        """Headless single-process run: a finished schedule ends the run (``-t`` is then
        only the upper bound). Web UI and distributed runs keep running until stopped."""
        runner = self.environment.runner
        o = self.environment.parsed_options
        if isinstance(runner, LocalRunner) and o is not None and o.headless:
            log.info("%s: schedule finished; stopping the run", self.profile)
            gevent.spawn_later(0.2, runner.quit)

    def connection_config(self, s: Settings) -> ClientConfig:
        return ClientConfig(
            host=s.host,
            port=s.port,
            connect_timeout_s=s.connect_timeout,
            request_timeout_s=s.request_timeout,
            delayed_threshold_ms=s.delayed_threshold_ms,
            client_id=f"harness-{self.profile}",
            profile=self.profile,
            listener=s.listener,
            proxy_protocol=s.proxy_protocol,
        )

    def drive(self, s: Settings, slot: int, slots: int) -> None:
        """Start each intended arrival at its time; never wait for answers to pace."""
        hist = history(self.environment)
        config = self.connection_config(s)
        pool = gevent.pool.Pool(s.max_in_flight)
        schedule = arrivals.split(
            arrivals.arrival_times(
                s.arrival, seed=s.seed, duration_s=s.duration_s, max_arrivals=s.max_arrivals
            ),
            slot,
            slots,
        )
        log.info(
            "%s: driving %s (slot %d of %d) against %s:%d",
            self.profile,
            s.arrival.text,
            slot,
            slots,
            config.host,
            config.port,
        )
        start_ns = time.monotonic_ns() + 5_000_000
        STATS.first_ns = STATS.first_ns or start_ns
        ready_dir = self.environment.parsed_options.ready_dir
        readiness.mark(ready_dir, readiness.READY, start_mono_ns=start_ns, slot=slot, slots=slots)
        try:
            self._schedule(s, schedule, start_ns, pool, hist, config)
        except gevent.GreenletExit:
            # Locust is stopping: let in-flight connections finish briefly, then drop
            # the rest without a guessed outcome
            pool.join(timeout=min(2.0, s.request_timeout))
            STATS.aborted += len(pool)
            pool.kill(block=True, timeout=1.0)
            raise
        pool.join()
        log.info("%s: schedule done: %s", self.profile, STATS.summary())
        readiness.mark(ready_dir, readiness.DONE, intended=STATS.intended, offered=STATS.offered)

    def _schedule(
        self,
        s: Settings,
        schedule: Any,
        start_ns: int,
        pool: gevent.pool.Pool,
        hist: Any,
        config: ClientConfig,
    ) -> None:
        for k, offset in schedule:
            intended = start_ns + int(offset * 1e9)
            wait = (intended - time.monotonic_ns()) / 1e9
            if wait > 0:
                gevent.sleep(wait)
            now = time.monotonic_ns()
            lag_ms = (now - intended) / 1e6
            STATS.intended += 1
            STATS.max_lag_ms = max(STATS.max_lag_ms, lag_ms)
            STATS.last_ns = now
            if lag_ms > s.max_lag_ms:
                self._not_offered(hist, s, intended, "cpu", f"started {lag_ms:.0f} ms late")
                continue
            if pool.full():
                self._not_offered(hist, s, intended, "cpu", f"{s.max_in_flight} in flight")
                continue
            src = s.source_ips[k % len(s.source_ips)] if s.source_ips else None
            pci = s.proxy_client_ips[k % len(s.proxy_client_ips)] if s.proxy_client_ips else None
            conn = KafkaConnection(
                config,
                source_ip=src,
                proxy_client_ip=pci if s.proxy_protocol != "off" else None,
                history=hist,
                on_request=self.environment.events.request.fire,
                intended_mono_ns=intended,
            )
            STATS.offered += 1  # counted when started; a NotOffered takes it back
            pool.spawn(self._run_one, conn, hist, s, intended)

    def _not_offered(self, hist: Any, s: Settings, intended: int, cause: str, why: str) -> None:
        STATS.not_offered[cause] = STATS.not_offered.get(cause, 0) + 1
        if hist is not None:
            hist.record(
                "connect_fail",
                reason="not_offered",
                listener=s.listener,
                detail={
                    "intended_mono_ns": intended,
                    "cause": cause,
                    "why": why,
                    "profile": self.profile,
                },
            )

    def _run_one(self, conn: KafkaConnection, hist: Any, s: Settings, intended: int) -> None:
        # checked again here: a saturated process wakes the driver on time but runs the
        # spawned greenlet late, and a connect started that late was not offered either
        lag_ms = (time.monotonic_ns() - intended) / 1e6
        STATS.max_lag_ms = max(STATS.max_lag_ms, lag_ms)
        if lag_ms > s.max_lag_ms:
            STATS.offered -= 1
            self._not_offered(hist, s, intended, "cpu", f"connect started {lag_ms:.0f} ms late")
            return
        try:
            conn.connect()
        except NotOffered as exc:
            STATS.offered -= 1
            self._not_offered(hist, s, intended, exc.cause, str(exc))
            return
        except ClientError:
            self._count(conn)
            return
        try:
            self.session(conn)
            if s.hold_ms > 0:
                gevent.sleep(s.hold_ms / 1000)
        except ClientError:
            pass  # recorded as request_fail; the outcome says what happened
        except gevent.GreenletExit:
            conn.abort()
            raise
        conn.close()
        self._count(conn)

    def _count(self, conn: KafkaConnection) -> None:
        r = conn.result
        if r.outcome is None:
            return
        STATS.outcomes[str(r.outcome)] = STATS.outcomes.get(str(r.outcome), 0) + 1
        done_ms = r.ready_ms or r.eof_ms or r.connect_ms or 0.0
        self.environment.events.request.fire(
            request_type="outcome",
            name=str(r.outcome),
            response_time=done_ms,
            response_length=0,
            exception=None,
            context={"profile": self.profile},
        )


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


def warm_up() -> None:
    """Encode/decode each message class once, so schema compilation (~0.7 s in all) is
    not paid by the first arrivals of a schedule, where it would show up as lag."""
    import io

    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        MetadataRequest,
        MetadataResponse,
    )
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from loadprofiles.kafka_client import MAX_VERSIONS

    pairs = (
        (ApiVersionsRequest, ApiVersionsResponse),
        (MetadataRequest, MetadataResponse),
        (ProduceRequest, ProduceResponse),
    )
    for req_cls, resp_cls in pairs:
        for version in range(req_cls.min_version, MAX_VERSIONS[req_cls.API_KEY] + 1):
            for cls in (req_cls, resp_cls):
                try:
                    data = cls(version=version).encode(version=version)
                    cls.decode(io.BytesIO(bytes(data)), version=version)
                except Exception:  # defaults may not round-trip; compiling is the point
                    pass


# at import: before Locust forks --processes workers (they inherit the compiled
# classes) and before any heartbeat runs (a worker busy compiling looks dead)
warm_up()


def prepare_topic(environment: Environment, **_: Any) -> None:
    """test_start of the producing profiles: create ``--topic`` before any load, or stop
    the run with the reason (exit 2) rather than measure a missing topic."""
    if isinstance(environment.runner, MasterRunner):
        return
    from harness.security import clientprops
    from loadprofiles.topics import TopicError, ensure_topic

    try:
        s = settings(environment, None)
    except OptionError:
        return  # the driver reports bad options itself
    try:
        props = clientprops.read(Path(s.command_config)) if s.command_config else None
        ensure_topic(
            s.host,
            s.port,
            s.topic,
            replication_factor=s.replication_factor,
            broker=next((n for n, h, p in s.brokers if (h, p) == (s.host, s.port)), None),
            timeout_s=20.0,
            history=history(environment),
            client_config=props,
        )
    except (TopicError, OSError) as exc:
        print(f"loadprofiles: error: --topic: {exc}", file=sys.stderr, flush=True)
        environment.process_exit_code = 2
        if environment.runner is not None:
            gevent.spawn_later(0.1, environment.runner.quit)


def payload(size: int, seed: int) -> bytes:
    """A deterministic record value of ``size`` bytes."""
    base = f"harness-{seed}-".encode()
    return (base * (size // len(base) + 1))[:size]
