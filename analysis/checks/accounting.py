"""Every connection attempt accounted for: `accounting`.

Acceptor target, for each listener: every client attempt is exactly one of

- **accepted**: an acceptor connection has its address (client_ip, client_port);
- **refused or never connected**: the client's own connect error, by kind (``refused``,
  ``timeout``, ``reset``): it never completed a TCP handshake with the machine's stack;
- **cut off**: the load stopped while it was still connecting (no row after its start);
- **reset in the accept queue at the stop**: it connected and was still open when the
  acceptor closed its listening socket with connections nobody had accepted (behind a
  blocked acceptor, a full backlog); the acceptor says how many (`listener_close`,
  ``detail.queued``, read from the socket), and each explains one such attempt, the
  latest-connected first (the queue is first in, first out);
- **dropped by the kernel**: it completed its handshake (``connect_ok``) but the listening
  socket's accept queue was full, so the kernel dropped it; the kernel's own drop counters
  (`kernel_net` rows, `harness/runner/kernel_net.py`) must have counted a drop during the
  attempt's life for each such attempt.

An attempt that connected and matches no acceptor connection and no counted drop is lost:
the enforcer took a connection it never recorded (or the load recorded one it never
made). Those are the witnesses.

Pairing: an acceptor connection belongs to the latest attempt of its address
(client_ip, client_port) that started before the connection was first seen
(`analysis.frames.match_attempts`, the pairing every check uses); a reused source port is
a new attempt, and an earlier attempt on that port that the kernel dropped stays
unpaired. An acceptor connection no attempt made is
`client_acceptor_agreement`'s rule, not this one's.

Drops: the counters are per network namespace, not per socket, and read once a second;
a drop counted between two readings happened inside that interval. Each counted drop
explains at most one attempt whose life (start to close, widened by the clock-alignment
bound of rows moved from another machine) overlaps its interval; attempts are matched to
drops earliest-ending first, which explains as many attempts as any assignment could. No
other tolerance: a counter read is exact, and its instant is bounded by the read's own
span.

A front stopped with its broker (a fronted cluster's `broker_kill`) resets the attempts
still in its listening socket's queue when it closes: an attempt that connected before the
front's last row and was still open at the stop is counted as its outage's, as is one that
connected to it after the stop began (judged in the restarted front's time).

Broker target: Kafka's ``connection-creation-total`` (summed over the network processors
of the load's listeners, per broker) grows by at least the connections its clients were
served on: between two scrapes, at least the attempts that started after the first
scrape ended and got their first response before the second began (Kafka registered each
one in between). A shortfall names the served attempts Kafka never counted. No pair spans
a broker's restart (its `broker_kill` window, or its counter going down): a restarted
broker counts from zero. The other
direction (Kafka counting connections no client made) is not judged on Kafka: the
runner's own admin and probe connections are counted there too.
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from analysis.checks.base import FAIL, PASS, UNKNOWN, Check, CheckResult, Part, witness
from analysis.columns import detail_col
from analysis.frames import acceptor_conns, client_conns, match_attempts
from base.history.rows import HarnessKernelNet

if TYPE_CHECKING:
    from analysis.load import Run

NAME = "accounting"
MS = 1_000_000
NEVER = 2**63 - 1
#: Kafka's per-processor counter of registered connections (`connection-creation-total`;
#: the JMX exporter's text names the counter family without its `_total`)
CREATED = "kafka_server_socket_server_metrics_connection_creation_total"
CREATED_NAMES = (CREATED, CREATED.removesuffix("_total"))
#: listeners that are Kafka's own (KRaft controller), never the load's
INTERNAL_LISTENERS = {"controller"}
#: scrape pairs judged on Kafka: every consecutive pair up to this many scrapes apart, and
#: the first with the last (each pair's bound is exact; more pairs only add time)
SCRAPE_SPAN = 10
#: at most this many instants per published series (`CheckResult.data["series"]`)
SERIES_MAX = 10_000


@dataclass(frozen=True)
class Reading:
    """One kernel counter reading: read inside [t0, t1]; `drops` = ListenDrops."""

    t0: int
    t1: int
    drops: int


@dataclass(frozen=True)
class Lost:
    """A connected attempt with no acceptor connection: its life [start, end]."""

    start: int
    end: int
    key: tuple[Any, ...]


def explain_by_drops(
    lost: list[Lost], readings: list[Reading], margin_ns: int = 0
) -> tuple[list[Lost], list[Lost], int]:
    """Match lost attempts to the drops the kernel counted (pure: no Spark, no clock).

    Between consecutive readings a and b the counter grew by b.drops − a.drops, drops that
    happened in (a.t0, b.t1]. Each explains one attempt whose life, widened by
    `margin_ns`, overlaps that interval. Earliest-ending first over the intervals in time
    order is a maximum matching for intervals against ordered slots.

    Returns (unexplained, not_sampled, drops used): attempts left without a drop, attempts
    whose whole life lies outside the readings (they could not be judged), and how many
    counted drops explained attempts.
    """
    readings = sorted(readings, key=lambda r: r.t0)
    if len(readings) < 2:
        return [], list(lost), 0
    lo, hi = readings[0].t0, readings[-1].t1
    judged = [x for x in lost if x.end + margin_ns > lo and x.start - margin_ns <= hi]
    not_sampled = [x for x in lost if not (x.end + margin_ns > lo and x.start - margin_ns <= hi)]
    pending = sorted(judged, key=lambda x: x.start)
    heap: list[tuple[int, int, Lost]] = []
    unexplained: list[Lost] = []
    used = 0
    i = 0
    for a, b in itertools.pairwise(readings):
        while i < len(pending) and pending[i].start - margin_ns <= b.t1:
            x = pending[i]
            heapq.heappush(heap, (x.end + margin_ns, i, x))
            i += 1
        while heap and heap[0][0] <= a.t0:  # ended before this interval began
            unexplained.append(heapq.heappop(heap)[2])
        grew = max(0, b.drops - a.drops)
        while grew and heap:
            heapq.heappop(heap)
            grew -= 1
            used += 1
    unexplained.extend(x for _, _, x in heap)
    unexplained.extend(pending[i:])
    return sorted(unexplained, key=lambda x: x.start), not_sampled, used


@dataclass(frozen=True)
class QueueClose:
    """A listening socket closed at the acceptor's stop with `queued` connections in its
    accept queue (`listener_close`): connections the kernel completed and nobody took."""

    listener: str
    t: int
    queued: int


def reset_in_queue(
    lost: list[Lost], closes: list[QueueClose], margin_ns: int = 0
) -> tuple[list[Lost], list[Lost]]:
    """Match lost attempts to the connections a closing listening socket reset (pure).

    An attempt of that listener that connected before the close and was still open at it
    (its life, widened by `margin_ns`, spans the close) may have been one of them; each
    queued connection explains one. The queue is first in, first out, so it held the
    newest: the latest-connected are taken, which also leaves the earliest (those that
    overlap the most drop intervals) to `explain_by_drops`. Returns (reset, the rest)."""
    reset: set[int] = set()
    for close in closes:
        alive = [
            x
            for x in lost
            if id(x) not in reset
            and x.key[2] == close.listener
            and x.key[3] is not None
            and x.key[3] - margin_ns <= close.t
            and x.end + margin_ns >= close.t
        ]
        alive.sort(key=lambda x: x.key[3], reverse=True)
        reset.update(id(x) for x in alive[: close.queued])
    return [x for x in lost if id(x) in reset], [x for x in lost if id(x) not in reset]


def queue_closes(run: Run) -> list[QueueClose]:
    """The acceptor's `listener_close` rows that say how many connections they reset."""
    rows = (
        run.events("listener_close", source="acceptor")
        .select(
            "listener",
            "mono_ns",
            detail_col("acceptor", "listener_close", "queued").cast("int").alias("queued"),
        )
        .collect()
    )
    return [
        QueueClose(str(r["listener"]).lower(), int(r["mono_ns"]), int(r["queued"]))
        for r in rows
        if r["queued"] is not None and r["listener"] is not None
    ]


def kernel_readings(run: Run) -> tuple[list[Reading], list[str]]:
    """The run's `kernel_net` readings in time order, and what made any of them unusable
    (a failed read; a counter that went backwards: another namespace, or a reset). Read
    once per run (`accounting` and `front_saturation` ask)."""
    return run.cached("kernel_readings", lambda: _kernel_readings(run))  # type: ignore[no-any-return]


def _kernel_readings(run: Run) -> tuple[list[Reading], list[str]]:
    rows = (
        run.events("kernel_net", source="harness")
        .select("mono_ns", "latency_ms", "reason", "detail")
        .orderBy("mono_ns")
        .collect()
    )
    out: list[Reading] = []
    problems: list[str] = []
    netns: set[str] = set()
    for r in rows:
        d = HarnessKernelNet.parse(r["detail"])
        if r["reason"] == "read_failed" or "listen_drops" not in d:
            problems.append(f"a reading failed ({d.get('error', 'no counters')})")
            continue
        netns.add(str(d.get("netns")))
        t0 = int(r["mono_ns"])
        t1 = t0 + round(float(r["latency_ms"] or 0.0) * MS)
        out.append(Reading(t0, t1, int(d["listen_drops"])))
    for a, b in itertools.pairwise(out):
        if b.drops < a.drops:
            problems.append("the drop counter went backwards (another namespace, or reset)")
            break
    if len(netns) > 1:
        problems.append(f"readings from {len(netns)} network namespaces")
    return out, problems


def check_accounting(run: Run) -> CheckResult:
    if not run.has_source("client"):
        return CheckResult(
            NAME,
            UNKNOWN,
            observed="no client history",
            expected="every client attempt accounted for",
            explanation="without client rows there are no attempts to account for",
        )
    if run.target == "broker":
        return _on_kafka(run)
    return _on_acceptor(run)


def _on_acceptor(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    attempts = client_conns(run).where(F.col("invoke_ns").isNotNull())
    a = acceptor_conns(run)
    first_seen = F.coalesce("accept_ns", "admit_ns", "reject_ns", "throttle_close_ns", "close_ns")
    conns = a.select(
        F.col("conn_id"), "client_ip", "client_port", first_seen.alias("accept_ns")
    ).where(F.col("client_ip").isNotNull() & F.col("client_port").isNotNull())
    key = ("client_ip", "client_port")
    # each acceptor connection belongs to the latest attempt of its address started before
    # it was seen (the pairing every check uses): a reused port whose earlier attempt the
    # kernel dropped leaves that attempt unpaired, not the later one
    paired = (
        match_attempts(conns, attempts, run)
        .select(F.col("c.client_ip"), F.col("c.client_port"), F.col("c.attempt_ns"))
        .distinct()
    )
    ok = attempts.where(F.col("connect_ok_ns").isNotNull()).join(
        paired, [*key, "attempt_ns"], "left_anti"
    )
    end = F.coalesce("closed_ns", "eof_ns", F.lit(NEVER))
    lost_rows = ok.select(
        *key, "c_listener", "invoke_ns", "connect_ok_ns", end.alias("end_ns"), "closed_outcome"
    ).collect()
    kind = (
        F.when(F.col("connect_ok_ns").isNotNull(), F.lit("connected"))
        .when(F.col("fail_reason").isNotNull(), F.col("fail_reason"))
        .when(F.col("closed_ns").isNull(), F.lit("cut_off"))
        .otherwise(F.lit("other"))
    )
    per = (
        attempts.withColumn("kind", kind)
        .groupBy(F.coalesce(F.lower("c_listener"), F.lit("?")).alias("listener"), "kind")
        .count()
        .collect()
    )
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in per:
        counts[r["listener"]][r["kind"]] += int(r["count"])
    lost = [
        Lost(
            int(r["invoke_ns"]),
            int(r["end_ns"]),
            (
                r["client_ip"],
                r["client_port"],
                (r["c_listener"] or "?").lower(),
                r["connect_ok_ns"],
                r["closed_outcome"],
            ),
        )
        for r in lost_rows
    ]
    readings, problems = kernel_readings(run)
    unexplained: list[Lost]
    not_sampled: list[Lost]
    inc = run.incarnation
    outage: list[Lost] = []
    if inc is not None and inc.index > 0:
        # connected before this process wrote its first row: to the killed (or stopped)
        # one's socket, whose backlog died with it; the outage names them, not this life
        outage = [x for x in lost if x.key[3] is not None and x.key[3] < inc.first_ns]
        lost = [x for x in lost if x.key[3] is None or x.key[3] >= inc.first_ns]
    if inc is not None and inc.stopped and inc.hi_ns is not None:
        # stopped with its broker: an attempt still in its listening socket's queue when it
        # closed (connected before its last row, alive at the stop) was reset by the stop
        at_stop = [
            x
            for x in lost
            if x.end >= inc.hi_ns
            and x.key[3] is not None
            and x.key[3] <= inc.last_ns + run.clock_error_ns
        ]
        outage += at_stop
        reset = {id(x) for x in at_stop}
        lost = [x for x in lost if id(x) not in reset]
    # stopped with connections in a listening socket's queue: the close reset them
    in_queue, lost = reset_in_queue(lost, queue_closes(run), run.clock_error_ns)
    if inc is not None and inc.crashed:
        # this acceptor was killed: an attempt it never recorded may have sat in its backlog
        # (the kernel resets those with the socket) or been taken after its last flush
        unexplained, not_sampled, used = [], list(lost), 0
        problems = [f"acceptor pid {inc.pid} was killed: its backlog and last rows died with it"]
    elif problems:  # the counters cannot explain a drop, nor rule one out
        unexplained, not_sampled, used = [], list(lost), 0
    else:
        unexplained, not_sampled, used = explain_by_drops(lost, readings, run.clock_error_ns)
    total = sum(sum(v.values()) for v in counts.values())
    connected = sum(v["connected"] for v in counts.values())
    lost_by: dict[str, int] = defaultdict(int)
    outage_by: dict[str, int] = defaultdict(int)
    for x in lost:
        lost_by[str(x.key[2])] += 1
    for x in outage:
        outage_by[str(x.key[2])] += 1
    queued_by: dict[str, int] = defaultdict(int)
    for x in in_queue:
        queued_by[str(x.key[2])] += 1
    bad_by: dict[str, int] = defaultdict(int)
    for x in unexplained:
        bad_by[str(x.key[2])] += 1
    unjudged_by: dict[str, int] = defaultdict(int)
    for x in not_sampled:
        unjudged_by[str(x.key[2])] += 1
    stop = inc is not None and (inc.stopped or inc.after_stop)
    gone = "front stopped with its broker, in its queue at the stop" if stop else "killed acceptor"
    lines = []
    for listener in sorted(counts):
        c = counts[listener]
        accepted = c["connected"] - lost_by[listener] - outage_by[listener] - queued_by[listener]
        errors = ", ".join(
            f"{n} {k}" for k, n in sorted(c.items()) if k not in ("connected", "cut_off") and n
        )
        lines.append(
            f"{listener}: {sum(c.values())} attempts = {accepted} accepted + "
            f"{lost_by[listener] - bad_by[listener] - unjudged_by[listener]} dropped by the "
            f"kernel + {sum(n for k, n in c.items() if k not in ('connected', 'cut_off'))} "
            f"connect errors ({errors or 'none'}) + {c['cut_off']} cut off at the stop"
            + (f" + {unjudged_by[listener]} not judged" if unjudged_by[listener] else "")
            + (
                f" + {queued_by[listener]} in the accept queue when the acceptor closed it"
                if queued_by[listener]
                else ""
            )
            + (
                f" + {outage_by[listener]} connected to the {gone} (its outage)"
                if outage_by[listener]
                else ""
            )
            + f"; {bad_by[listener]} unexplained"
        )
    drops_seen = readings[-1].drops - readings[0].drops if len(readings) > 1 else 0
    wit = [
        witness(
            {
                "client_ip": x.key[0],
                "client_port": x.key[1],
                "listener": x.key[2],
                "mono_ns": x.start,
            },
            "the client connected (connect_ok) and no acceptor connection has its address; "
            "no kernel drop was counted during its life that an earlier attempt did not "
            "already take",
            connect_ok_ns=x.key[3],
            outcome=x.key[4],
        )
        for x in unexplained[:10]
    ]
    parts = [
        Part(
            "every connected attempt accepted or dropped by the kernel",
            connected,
            "" if connected else "no attempt completed its TCP handshake",
            "load through the acceptor that the clients record",
        )
    ]
    if unexplained:
        verdict = FAIL
    elif not_sampled:
        verdict = UNKNOWN
    elif total == 0:
        verdict = UNKNOWN
    else:
        verdict = PASS
    observed = "; ".join(lines) or "no attempts"
    if not_sampled:
        observed += (
            f"; {len(not_sampled)} connected attempts with no acceptor connection could not "
            "be judged: " + ("; ".join(problems) if problems else "outside the kernel's readings")
        )
    return CheckResult(
        NAME,
        verdict,
        observed=observed,
        expected=(
            "per listener: attempts = accepted + dropped by the kernel + connect errors + cut "
            "off at the stop + reset in the accept queue at the stop; every connected "
            "attempt that no acceptor connection has is a drop the kernel counted during its "
            "life, or one of the connections the acceptor's closing listener still queued"
        ),
        tolerance=(
            "none on the counts; a drop is placed within the two readings around it "
            f"({len(readings)} readings, {drops_seen} listen drops counted in the run's "
            f"namespace, {used} of them explaining attempts)"
            + (f"; clock alignment ±{run.clock_error_ns / MS:g} ms" if run.clock_error_ns else "")
        ),
        witnesses=wit,
        explanation=(
            "an attempt that connected and is neither in the acceptor's history nor a "
            "counted kernel drop is a connection the enforcer took and never recorded"
            + (f"; not judged: {'; '.join(problems)}" if problems else "")
        ),
        judged=total,
        parts=parts if total else [],
        data={
            "series": {  # attempt start instants (mono_ns), at most SERIES_MAX each
                "unexplained_ns": [x.start for x in unexplained[:SERIES_MAX]],
                "kernel_dropped_ns": sorted(
                    x.start for x in set(lost) - set(unexplained) - set(not_sampled)
                )[:SERIES_MAX],
            }
        },
    )


def _on_kafka(run: Run) -> CheckResult:
    from pyspark.sql import functions as F

    from analysis.checks.kafka_metrics import (
        CAUSE_NO_METRICS,
        CAUSE_NO_SCRAPE_PAIR,
        METRICS_HINT,
        listener_aliases,
        scrape_interval,
        scrapes,
    )

    taken = scrapes(run)
    if not taken:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed="no scrape of Kafka's metrics",
            expected="Kafka's connection-creation-total grows by at least the served attempts",
            explanation=f"the target exposes no metrics ({METRICS_HINT})",
            raise_hint=METRICS_HINT,
            data={"cause": CAUSE_NO_METRICS},
        )
    # a cluster the harness did not start: its own names of the load's listeners
    aliases = listener_aliases(run)
    served = (
        client_conns(run)
        .where(F.col("invoke_ns").isNotNull() & F.col("ready_ns").isNotNull())
        .select("invoke_ns", "ready_ns", "broker", F.lower("c_listener").alias("listener"))
        .collect()
    )
    listeners = {r["listener"] for r in served if r["listener"]}

    def named(labels: dict[str, Any]) -> str:
        lst = str(labels.get("listener", "")).lower()
        return (aliases[lst] or "") if lst in aliases else lst

    labelled = {
        named(labels)
        for _mono, detail in taken
        for name, labels, _v in detail.get("samples") or []
        if name in CREATED_NAMES
    }
    if not listeners & labelled:
        # an existing cluster names its listeners its own way: count every listener of
        # the load's brokers but the controller's (more creations: never stricter)
        listeners = set()
    # per broker: (scrape start, scrape end, created on the load's listeners)
    series: dict[Any, list[tuple[int, int, float]]] = defaultdict(list)
    for mono, detail in taken:
        lo, hi = scrape_interval(mono, detail)
        total = 0.0
        seen = False
        for name, labels, value in detail.get("samples") or []:
            if name not in CREATED_NAMES or value is None:
                continue
            lst = named(labels)
            if not lst or lst in INTERNAL_LISTENERS or (listeners and lst not in listeners):
                continue
            total += float(value)
            seen = True
        if seen:
            series[detail.get("broker")].append((lo, hi, total))
    if not series:
        return CheckResult(
            NAME,
            UNKNOWN,
            observed=f"{len(taken)} scrapes, none with {CREATED} for the load's listeners",
            expected="Kafka's connection-creation-total grows by at least the served attempts",
            explanation="Kafka's metrics were scraped but this counter was not among them",
        )
    from analysis.checks.broker_side import fault_windows

    _all, kills, _nodes, kill_nodes = fault_windows(run)
    err = run.clock_error_ns
    by_broker: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    # one broker's scrapes (`--broker-metrics-url 1=URL`) and attempts that name no other
    # broker (a single broker's run names none): that broker's
    (only, *more) = list(series)
    one = None if more or not {r["broker"] for r in served} <= {None, only} else only
    for r in served:
        if one is not None:
            node = one
        else:
            node = r["broker"] if r["broker"] is not None and None not in series else None
        by_broker[node].append((int(r["invoke_ns"]), int(r["ready_ns"])))
    judged = 0
    worst: tuple[int, Any, tuple[int, int, float], tuple[int, int, float], int] | None = None
    lines = []
    for node, points in sorted(series.items(), key=lambda kv: str(kv[0])):
        atts = sorted(by_broker.get(node, []))
        starts = [s for s, _ in atts]
        # a broker killed and restarted counts from zero again: no pair spans its restart
        # (its kill window, or a counter that went down)
        mine = [w for w, n in zip(kills, kill_nodes, strict=True) if n is None or n == node]
        restarts = [(lo, hi) for lo, hi in mine]
        restarts += [(p[0], q[1]) for p, q in itertools.pairwise(points) if q[2] < p[2]]

        def spans_restart(
            a: tuple[int, int, float],
            b: tuple[int, int, float],
            restarts: list[tuple[int, int]] = restarts,
        ) -> bool:
            return any(lo <= b[1] and hi >= a[0] for lo, hi in restarts)

        pairs = [
            (i, j)
            for i in range(len(points))
            for j in range(i + 1, len(points))
            if (j - i <= SCRAPE_SPAN or (i == 0 and j == len(points) - 1))
            and not spans_restart(points[i], points[j])
        ]
        closest: tuple[int, float] | None = None  # (served, counted) with the least room
        for i in sorted({i for i, _ in pairs}):
            a = points[i]
            first = bisect_right(starts, a[1] + err - 1)  # started after a's scrape ended
            readies = sorted(rd for _, rd in atts[first:])
            for j in (j for ii, j in pairs if ii == i):
                b = points[j]
                need = bisect_right(readies, b[0] - err)  # served before b's scrape began
                if not need:
                    continue
                judged += 1
                grew = b[2] - a[2]
                if closest is None or grew - need < closest[1] - closest[0]:
                    closest = (need, grew)
                if need > grew:
                    short = int(need - grew)
                    if worst is None or short > worst[0]:
                        worst = (short, node, a, b, need)
        who = "Kafka" if node is None else f"broker {node}"
        tightest = f", tightest {closest[0]} served vs {closest[1]:g} counted" if closest else ""
        lines.append(f"{who}: {len(points)} scrapes, {len(atts)} served attempts{tightest}")
    wit = []
    if worst is not None:
        short, node, a, b, need = worst
        wit.append(
            witness(
                {"mono_ns": a[1]},
                f"{need} attempts were served between two scrapes but Kafka's "
                f"connection-creation-total grew by {b[2] - a[2]:g}: {short} served "
                "connections Kafka never counted",
                broker=node,
                until_ns=b[0],
            )
        )
    parts = [
        Part(
            "Kafka counted every connection its clients were served on",
            judged,
            "" if judged else "no served attempt lay between two scrapes",
            "scrapes of Kafka's metrics before and after served connections (every second "
            "while the load runs: a longer run, or an exporter that answers throughout)",
        )
    ]
    verdict = FAIL if worst is not None else (PASS if judged else UNKNOWN)
    # served connections but no two scrapes around any: the scrapes, not the load, to fix
    cause = {} if judged or not served else {"cause": CAUSE_NO_SCRAPE_PAIR}
    return CheckResult(
        NAME,
        verdict,
        observed="; ".join(lines) + f"; {judged} scrape intervals judged",
        expected=(
            "between any two scrapes, Kafka's connection-creation-total (load listeners, "
            "summed over its processors) grows by ≥ the attempts started after the first "
            "and served before the second"
        ),
        tolerance=(
            "none: each processor's counter is read inside its scrape's span, so the sums "
            "bound the registrations between the spans exactly"
        ),
        witnesses=wit,
        explanation=(
            "on Kafka each connection is counted at registration; a served connection it "
            "never counted is a client record of a connection that did not happen. Kafka "
            "counts the runner's own connections too, so the reverse is not judged"
        ),
        judged=judged,
        parts=parts,
        data=cause,
    )


CHECKS = [
    Check(
        NAME,
        "clients",
        check_accounting,
        False,
        ("acceptor", "broker"),
        doc="every client attempt accepted, refused, cut off, or a counted kernel drop",
        frames=("acceptor_conns", "client_conns"),
    ),
]
