"""The per-process driver of the engine profiles (``storm.py``, ``connect.py``).

One ``EngineDriver`` per Locust process, created on Locust's ``init`` event and
held only by the listeners it registers on that environment's events (no module
globals). On ``test_start`` it parses the options once into ``Settings``, builds a
``StormEngine`` for this process's slot of the schedule and runs it in a native
thread (``gevent``'s thread pool), so the arrival loop never waits for the hub.
A greenlet of the hub meanwhile:

* takes the history batches the engine sealed, writes them (thread pool) and turns
  the same rows into Locust's request statistics (``connect``, ``ApiVersions``,
  ``Metadata``): the history is the one record, the statistics a view of it;
* writes the readiness markers (``--ready-dir``, ``loadprofiles.readiness``).

With ``--processes N`` or master/worker, worker ``i`` of ``N`` takes the global
arrivals ``k`` with ``k % N == i`` and source address ``k % len(pool)``: N processes
offer exactly the single-process schedule from exactly its addresses. Each worker
measures its clock offset to the master (``loadprofiles.clock``) and writes it into
its history (Parquet metadata ``clock_offset_ns`` and the ready marker).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import gevent
from locust import User, constant, task
from locust.env import Environment
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from base.history.rows import FIELDS, ClientRequestOk
from base.history.writer import encode_detail
from loadprofiles import arrivals, clock, readiness, workers
from loadprofiles.client_history import Batch, ClientHistory
from loadprofiles.engine import EngineConfig, EngineStats, StormEngine
from loadprofiles.engine_frames import API_NAMES
from loadprofiles.options import OptionError, Settings, add_options, arrival_slot
from loadprofiles.topics import payload

log = logging.getLogger("loadprofiles")


class _Failure(Exception):
    """A failed connection or request, as Locust's statistics show it."""


#: where `_fire` reads a row's columns (a row is a plain tuple in FIELDS order)
_EVENT, _REASON, _API_KEY, _LATENCY, _BYTES, _DETAIL = (
    FIELDS.index(name) for name in ("event", "reason", "api_key", "latency_ms", "bytes", "detail")
)


def _error_code(detail: object) -> object:
    """A `request_ok` row's Kafka error code, its detail stored (JSON) or not yet."""
    if isinstance(detail, Mapping):
        return detail.get("error_code")
    return ClientRequestOk.parse(detail if isinstance(detail, str) else None).get("error_code")


#: a profile's own preparation, once per process before its schedule: it may change the
#: settings (defaults of its own, the address of a proxy it started) and use the history
#: (connections it makes are recorded like the load's); a ValueError stops the run, naming it
Setup = Callable[[Environment, Settings, ClientHistory], None]


class EngineDriver:
    """Runs one process's share of the schedule with a ``StormEngine``."""

    def __init__(
        self,
        environment: Environment,
        profile: str,
        default_shape: str,
        setup: Setup | None = None,
    ) -> None:
        self.env = environment
        self.profile = profile
        self.default_shape = default_shape
        self.setup = setup
        self.history: ClientHistory | None = None
        self.engine: StormEngine | None = None
        self.greenlet: gevent.Greenlet | None = None
        self.stats: EngineStats | None = None
        self.clock_offset_ns = 0
        #: the best clock estimate so far: (offset, rtt, what was read with it), clock.OnOffset
        self._clock: tuple[int, int, tuple[int, str, int] | None] | None = None
        self._start_wall_ns: int | None = None
        self._errors: dict[str, _Failure] = {}
        #: a Locust worker whose history goes home over the channel (`--history-home
        #: channel`): it writes into a folder of its own and sends the files at the end
        self._spool: Path | None = None
        ev: Any = environment.events
        ev.test_start.add_listener(self.on_test_start)
        ev.test_stop.add_listener(self.on_test_stop)
        ev.quitting.add_listener(self.on_quitting)
        self.skew_ns = 0
        if isinstance(environment.runner, WorkerRunner):
            self.skew_ns = clock.simulated_skew_ns(environment.runner.worker_index)
            clock.worker_side(environment, self._set_offset, self._set_start, self.skew_ns)

    @classmethod
    def install(cls, profile: str, default_shape: str, setup: Setup | None = None) -> None:
        """Register the options and the ``init`` hook that creates the driver; ``setup``
        runs once per process before its schedule starts (see `Setup`)."""
        from locust import events as locust_events

        events: Any = locust_events
        events.init_command_line_parser.add_listener(add_options)

        def on_init(environment: Environment, **_: Any) -> None:
            if not isinstance(environment.runner, MasterRunner):
                cls(environment, profile, default_shape, setup)
            else:
                clock.master_side(environment)
                workers.master_side(environment)

        events.init.add_listener(on_init)

    def _set_start(self, start_wall_ns: int) -> None:
        self._start_wall_ns = start_wall_ns

    def _set_offset(
        self, offset_ns: int, rtt_ns: int, sample: tuple[int, str, int] | None = None
    ) -> None:
        self.clock_offset_ns = offset_ns
        self._clock = (offset_ns, rtt_ns, sample)
        if self.history is not None:
            self._clock_to(self.history)
        if self.engine is not None:
            self.engine.set_clock_offset(offset_ns, rtt_ns)

    def _clock_to(self, history: ClientHistory) -> None:
        """The best estimate into `history`'s file metadata (made before or after it)."""
        assert self._clock is not None
        history.clock_offset_ns, history.clock_rtt_ns, history.clock_sample = self._clock

    # -- Locust events --------------------------------------------------------------------
    def on_test_start(self, environment: Environment, **_: Any) -> None:
        if self.greenlet is not None and not self.greenlet.dead:
            return
        self.greenlet = gevent.spawn(self._drive)

    def on_test_stop(self, environment: Environment, **_: Any) -> None:
        if self.engine is not None:
            self.engine.stop()
        if self.greenlet is not None:
            self.greenlet.join(timeout=10)
        self._print_summary()

    def on_quitting(self, environment: Environment, **_: Any) -> None:
        # Locust fires `quitting` before it stops the test (a SIGTERM's shutdown): stop the
        # engine first, or joining the thread pool below waits out the whole schedule
        if self.engine is not None:
            self.engine.stop()
        if self.greenlet is not None:
            self.greenlet.join(timeout=10)
        if self.history is not None:
            gevent.get_hub().threadpool.join()
            self.history.close()
            print(
                f"loadprofiles: client history: {self.history.rows_written} rows in "
                f"{self.history.dir}",
                file=sys.stderr,
                flush=True,
            )

    # -- driving --------------------------------------------------------------------------
    def _slots(self) -> tuple[int, int]:
        runner = self.env.runner
        worker = runner.worker_index if isinstance(runner, WorkerRunner) else None
        return arrival_slot(self.env.parsed_options, worker)

    def _history(self) -> ClientHistory:
        if self.history is None:
            o = cast(Any, self.env.parsed_options)
            run_dir = o.run_dir if o is not None else ""
            where = Path(run_dir) / "history" if run_dir else None
            if self._home_by_channel():
                import tempfile

                self._spool = Path(tempfile.mkdtemp(prefix="harness-worker-"))
                where = self._spool
            self.history = ClientHistory(
                where,
                o.run_id or Path(run_dir).name if run_dir else "",
                name=self._history_name(),
                clock_offset_ns=self.clock_offset_ns,
                simulated_skew_ns=self.skew_ns,
            )
            if self._clock is not None:
                self._clock_to(self.history)
            if run_dir:
                log.info("client history -> %s/%s-*.parquet", self.history.dir, self.history.name)
        return self.history

    def _worker_index(self) -> int | None:
        runner = self.env.runner
        return max(0, runner.worker_index) if isinstance(runner, WorkerRunner) else None

    def _home_by_channel(self) -> bool:
        o = self.env.parsed_options
        home = getattr(o, "history_home", "local") if o is not None else "local"
        return self._worker_index() is not None and home == "channel"

    def _tell_master(self, kind: str, **data: Any) -> None:
        """A worker's word to the master (loadprofiles.workers); nothing on a lone process."""
        if self._worker_index() is None:
            return
        if kind == workers.HELLO and os.environ.get(workers.JOINED_ENV):
            Path(os.environ[workers.JOINED_ENV]).touch()
        clock_data = {}
        if self._clock is not None:
            clock_data = {"clock_offset_ns": self._clock[0], "clock_rtt_ns": self._clock[1]}
        cast(Any, self.env.runner).send_message(kind, {**clock_data, **data})

    def _history_name(self) -> str:
        """``client-<host>-<pid>``; a worker forked by ``--processes`` names its files
        ``client-<host>-w<index>-<master pid>``, so all files of one Locust run carry the
        pid of the process that was started (the runner finds a phase's rows by it)."""
        o = cast(Any, self.env.parsed_options)
        runner = self.env.runner
        host = socket.gethostname()
        if isinstance(runner, WorkerRunner) and (getattr(o, "processes", 0) or 0) > 0:
            return f"client-{host}-w{max(0, runner.worker_index)}-{os.getppid()}"
        return f"client-{host}-{os.getpid()}"

    def _fail(self, message: str) -> None:
        print(f"loadprofiles: error: {message}", file=sys.stderr, flush=True)
        self.env.process_exit_code = 2
        if self.env.runner is not None:
            gevent.spawn_later(0.1, self.env.runner.quit)

    def _drive(self) -> None:
        o = cast(Any, self.env.parsed_options)
        try:
            s = Settings.from_options(o, self.env.host or "")
            if o.shape == "storm" and self.default_shape != "storm":
                s.shape = self.default_shape
            if self.setup is not None:
                self.setup(self.env, s, self._history())
            tls, sasl = s.security(f"harness-{self.profile}")
            cfg = EngineConfig(
                host=s.host,
                port=s.port,
                shape=s.shape,
                source_ips=s.source_ips,
                connect_timeout_s=s.connect_timeout,
                request_timeout_s=s.request_timeout,
                delayed_threshold_ms=s.delayed_threshold_ms,
                max_lag_ms=s.max_lag_ms,
                max_in_flight=s.max_in_flight,
                hold_ms=s.hold_ms,
                client_id=f"harness-{self.profile}",
                profile=self.profile,
                listener=s.listener,
                tls=tls,
                sasl=sasl,
                brokers=s.brokers,
                hot_broker=s.hot_broker,
                proxy_protocol=s.proxy_protocol,
                proxy_client_ips=s.proxy_client_ips,
                topic=s.topic,
                value=payload(s.payload_bytes, s.seed) if s.shape == "produce" else b"",
                acks=s.acks,
            )
        except (OptionError, ValueError) as exc:
            self._fail(str(exc))
            return
        slot, slots = self._slots()
        hist = self._history()
        index = self._worker_index()
        mine = cfg.source_ips or (workers.source_address(s.host, s.port),)
        home = "channel" if self._home_by_channel() else "local"
        addresses = [a for a in mine if a]
        self._tell_master(
            workers.HELLO, index=index, host=socket.gethostname(), pid=os.getpid(),
            addresses=addresses, home=home,
        )  # fmt: skip
        # workers on several machines: their pids may be equal, their indexes are not
        prefix = f"c{os.getpid()}" + (f"w{index}" if self._home_by_channel() else "") + "-"
        engine = StormEngine(cfg, hist, conn_prefix=prefix)
        self.engine = engine
        self.stats = engine.stats
        if self._clock is not None:
            engine.set_clock_offset(*self._clock[:2])
        schedule = arrivals.split(
            arrivals.arrival_times(
                s.arrival, seed=s.seed, duration_s=s.duration_s, max_arrivals=s.max_arrivals
            ),
            slot,
            slots,
        )
        log.info(
            "%s: %s shape, %s (slot %d of %d) against %s:%d",
            self.profile,
            cfg.shape,
            s.arrival.text,
            slot,
            slots,
            s.host,
            s.port,
        )
        start_ns = time.monotonic_ns() + 50_000_000  # the thread is up long before
        if self._start_wall_ns is not None:
            # master/worker: the master's common start, on this process's clock; a worker
            # that comes up after it starts late and says so (not_offered, cause cpu)
            start_ns = clock.local_start_mono_ns(
                self._start_wall_ns, self.clock_offset_ns, self.skew_ns
            )
            self._start_wall_ns = None

        def on_start() -> None:
            if self._home_by_channel():  # the master writes the marker (its folder)
                self._tell_master(workers.READY, start_mono_ns=start_ns, slot=slot, slots=slots)
                return
            readiness.mark(
                o.ready_dir,
                readiness.READY,
                start_mono_ns=start_ns,
                slot=slot,
                slots=slots,
                clock_offset_ns=self.clock_offset_ns,
            )

        pool = gevent.get_hub().threadpool
        result = pool.spawn(engine.run, schedule, start_ns, on_start)
        try:
            while not result.ready():
                gevent.sleep(1.0)  # one Parquet part per second at most
                self._pump(hist)
            result.get()
        except gevent.GreenletExit:
            engine.stop()
            raise
        finally:
            self._pump(hist)
        log.info("%s: schedule done: %s", self.profile, engine.stats.summary())
        counts = {"intended": engine.stats.intended, "offered": engine.stats.offered}
        if self._home_by_channel():
            self._send_home(hist, counts)
        else:
            readiness.mark(o.ready_dir, readiness.DONE, **counts)
            files = len(list(hist.dir.glob(f"{hist.name}-*.parquet"))) if hist.dir else 0
            self._tell_master(workers.DONE, rows=hist.rows_written, files=files, **counts)
        self._quit_if_done()

    def _send_home(self, hist: ClientHistory, counts: dict[str, int]) -> None:
        """The schedule is over: the history closed and sent to the master, then DONE with
        what was sent (the master checks it arrived whole)."""
        gevent.get_hub().threadpool.join()
        hist.close()
        files = sorted(hist.dir.glob(f"{hist.name}-*.parquet")) if hist.dir else []
        index = self._worker_index() or 0
        rows, size = workers.send_files(cast(Any, self.env.runner), index, files)
        print(
            f"loadprofiles: client history home over the channel: {len(files)} files, "
            f"{rows} rows, {size} bytes",
            file=sys.stderr,
            flush=True,
        )
        self._tell_master(workers.DONE, rows=rows, files=len(files), bytes=size, **counts)

    def _pump(self, hist: ClientHistory) -> None:
        batches = hist.drain()
        if not batches:
            return
        for b in batches:
            self._fire(b)
        if hist.dir is not None:
            try:
                gevent.get_hub().threadpool.spawn(hist.write, batches).get()
            except Exception as exc:  # keep the load running; say so loudly
                print(f"loadprofiles: history write failed: {exc!r}", file=sys.stderr, flush=True)
        self._tell_master(workers.PROGRESS, rows=hist.rows_written)

    def _error(self, text: str) -> _Failure:
        err = self._errors.get(text)
        if err is None:
            err = self._errors[text] = _Failure(text)
        return err

    def _fire(self, b: Batch) -> None:
        """Locust's request statistics from the rows: one request per Kafka call."""
        fire: Any = cast(Any, self.env.events).request.fire
        ctx = {"profile": self.profile}
        for row in b:
            ev, reason, api, lat = row[_EVENT], row[_REASON], row[_API_KEY], row[_LATENCY]
            if ev == "connect_ok":
                fire(request_type="kafka", name="connect", response_time=lat,
                     response_length=0, exception=None, context=ctx)  # fmt: skip
            elif ev == "connect_fail" and reason != "not_offered":
                fire(request_type="kafka", name="connect", response_time=lat,
                     response_length=0, exception=self._error(f"connect {reason}"),
                     context=ctx)  # fmt: skip
            elif ev == "request_ok" or ev == "request_fail":
                name = API_NAMES.get(cast(int, api), str(api))
                exc = None
                detail = row[_DETAIL]
                if ev == "request_fail":
                    exc = self._error(f"{name}: request {reason}")
                elif _error_code(detail) is not None:
                    exc = self._error(f"{name}: Kafka error {encode_detail(detail)}")
                fire(request_type="kafka", name=name, response_time=lat,
                     response_length=row[_BYTES] or 0, exception=exc, context=ctx)  # fmt: skip

    def _quit_if_done(self) -> None:
        """Headless single-process run: a finished schedule ends the run."""
        runner = self.env.runner
        o = self.env.parsed_options
        if isinstance(runner, LocalRunner) and o is not None and o.headless:
            log.info("%s: schedule finished; stopping the run", self.profile)
            gevent.spawn_later(0.2, runner.quit)

    def _print_summary(self) -> None:
        st = self.stats
        if st is None or st.intended == 0:
            return
        pid = os.getpid()
        print(f"loadprofiles[{pid}]: arrivals: {st.summary()}", file=sys.stderr, flush=True)
        short = st.intended - st.offered
        if short:
            print(
                f"loadprofiles[{pid}]: WARNING: {short} of {st.intended} intended arrivals "
                f"were not offered ({st.not_offered}); checks needing that load are unknown",
                file=sys.stderr,
                flush=True,
            )


class DriverUser(User):
    """Locust needs a user; the driver does the work. Extra users (``-u`` > 1) idle."""

    abstract = True
    wait_time = constant(1)
    profile: ClassVar[str] = "storm"

    @task
    def idle(self) -> None:
        while True:  # the Locust way, so --stop-timeout does not wait for us
            cast(Any, self).wait()
