"""Seeded enforcement faults: small, realistic deviations from Kafka, one rule each.

Why they exist: a gate is only worth its record of catching bugs. ``harness selftest``
starts the acceptor with ``harness.test.fault=<name>[,<name>]``, runs the catalog
scenario that covers the fault's rule with ``--gate`` and expects a FAIL. Off by default;
an acceptor with any fault on says so loudly at start and in every ``config`` row.

Why this shape: every faulty behaviour lives here, as one injected policy. Product code
asks its policy (``Faults.policy()``) at each decision point through a hook named for the
decision; ``NoFaults``, production's, answers as Kafka does (a value hook returns its
argument, a predicate Kafka's answer), and ``Seeded`` answers with the enabled faults'
deviations. No product module names a fault.

The production path must not pay for the hooks, so they come in three kinds:

* construction hooks (a meter class, a cap, a limit, a queue size, a flag): asked once,
  when the engine objects are built, and kept as plain attributes, so a decision reads
  the same attributes it always did;
* decision hooks on paths that are rare already (a rate delay, a reject, a slot wait, an
  eviction, an admin change): called where the decision is made;
* per-connection and per-request hooks (``accept_drop``, ``request_entity``): asked once
  for a callable that is ``None`` in production, so the hot path tests one attribute, as
  it tested a boolean before.

Nothing looks a fault up by name per event.

Every fault lives in an enforcement code path: the quota engine (``base.quota``), the
acceptor's admission, processor, TLS, dynamic-config and request-quota code
(``acceptor``), or the runner's assembly of the broker behind the acceptor.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Reversible
from dataclasses import dataclass
from typing import TypeVar

from base.quota.config import INT_MAX, ConfigError
from base.quota.meter import JAVA_LONG_MAX, QuotaCheck, RateMeter, throttle_time_ms

__all__ = [
    "FAULTS",
    "FAULT_KEY",
    "KAFKA",
    "LEGACY_SKIP_KEY",
    "NO_FAULTS",
    "REJECT_LATE_S",
    "AtBoundRateMeter",
    "Fault",
    "Faults",
    "NoFaults",
    "Seeded",
]

_T = TypeVar("_T")
_K = TypeVar("_K")
_V = TypeVar("_V")

#: the acceptor configuration key (comma-separated fault names)
FAULT_KEY = "harness.test.fault"
#: the older single-purpose key, kept working: ``true`` = fault ``skip_ip_rate_check``
LEGACY_SKIP_KEY = "harness.test.skip.ip.rate.check"


@dataclass(frozen=True)
class Fault:
    """One seeded fault: its name, the rule it breaks, what it does, where it lives."""

    name: str
    rule: str
    does: str
    where: str


#: every known fault, in the order the selftest reports them
FAULTS: tuple[Fault, ...] = (
    Fault(
        "violation_at_bound",
        "quota violation is rate > bound (every meter)",
        "the meter reports a violation at rate >= bound (a 1 ms throttle when exactly at it)",
        "base/quota/faults.py AtBoundRateMeter (hook meter_class)",
    ),
    Fault(
        "throttle_uncapped",
        "connection-rate throttles are bounded by one window (min(X, w))",
        "broker/listener delays and IP throttles use the unbounded X",
        "base/quota/connections.py ConnectionQuotas (hook throttle_cap)",
    ),
    Fault(
        "window_n_samples",
        "the meter keeps the ring of the release enforced as (n+1 samples purged by last "
        "event from Kafka 3.8, n purged by start before)",
        "connection meters keep the other release's ring: n samples purged by sample start "
        "in an acceptor enforcing as 3.8 or newer (the pre-3.8 ring), n+1 purged by last "
        "event in one enforcing as an older release",
        "base/quota/connections.py ConnectionQuotas (hook legacy_ring)",
    ),
    Fault(
        "no_unrecord_ip_throttle",
        "an IP-throttled connection is un-recorded from the IP, listener and broker meters",
        "the +1 of a throttled connection stays in all three meters",
        "base/quota/connections.py ConnectionQuotas.admit (hook unrecords_ip_throttle)",
    ),
    Fault(
        "ip_rate_override_ignored",
        "a per-IP connection_creation_rate overrides the default IP quota",
        "per-IP rate quotas are accepted and reported but the default applies",
        "base/quota/connections.py ConnectionQuotas.set_ip_quota (hook applies_ip_rate_override)",
    ),
    Fault(
        "ip_default_not_reapplied",
        "a new default IP quota re-bounds every existing IP meter without an override",
        "existing IP meters keep the bound they were created with",
        "base/quota/connections.py ConnectionQuotas.set_ip_quota (hook ip_meters_rebound)",
    ),
    Fault(
        "ip_count_off_by_one",
        "max.connections.per.ip (and overrides): count >= limit is rejected",
        "one connection more than the cap is admitted per IP",
        "base/quota/connections.py ConnectionQuotas (hook ip_count_limit)",
    ),
    Fault(
        "max_connections_off_by_one",
        "max.connections: no slot when total >= max; evict while total > max",
        "the broker-wide maximum is enforced one too high (also where a listener inherits it)",
        "base/quota/connections.py ConnectionQuotas (hook max_connections)",
    ),
    Fault(
        "listener_max_ignored",
        "listener.name.<l>.max.connections caps the listener",
        "listener maxima are accepted and reported but never enforced",
        "base/quota/connections.py ConnectionQuotas (hook listener_max)",
    ),
    Fault(
        "listener_defaults_not_inherited",
        "a listener without its own max.connections / max.connection.creation.rate takes "
        "the broker-wide value (Kafka's valuesWithPrefixOverride)",
        "such a listener is unlimited (this acceptor before issue 14's fix)",
        "base/quota/connections.py ConnectionQuotas (hook inherited)",
    ),
    Fault(
        "protected_counts_broker_rate",
        "the protected (inter-broker) listener is exempt from max.connection.creation.rate",
        "its connections are recorded in (and delayed by) the broker-wide rate",
        "base/quota/connections.py ConnectionQuotas (hook broker_rate_exempt)",
    ),
    Fault(
        "protected_evicted",
        "connections of the protected listener are never evicted",
        "its processors evict least recently used connections like any other",
        "base/quota/connections.py ConnectionQuotas, acceptor/processor.py (hook evict_exempt)",
    ),
    Fault(
        "evict_most_recent",
        "over max.connections a processor evicts its least recently used connection",
        "it evicts the most recently used one",
        "acceptor/processor.py Processor._close_excess (hook eviction_order)",
    ),
    Fault(
        "rate_delay_not_waited",
        "the acceptor sleeps out a connection-rate delay before admitting",
        "the delay is computed and recorded but not waited",
        "acceptor/admission.py Admission.admit (hook rate_delay)",
    ),
    Fault(
        "delay_doubled",
        "the acceptor waits exactly the delay the meter asks for",
        "it waits twice as long",
        "acceptor/admission.py Admission.admit (hook rate_delay)",
    ),
    Fault(
        "slot_wait_while_free",
        "after a rate delay the acceptor proceeds at once when a slot is free",
        "it waits for a slot to be released (up to the 500 ms poll) before checking",
        "acceptor/admission.py Admission._look (hook slot_free)",
    ),
    Fault(
        "queue_larger_than_20",
        "each processor's new-connection queue holds 20 (Processor.ConnectionQueueSize)",
        "the queue holds 40 and a processor registers up to 40 per iteration",
        "acceptor/processor.py Processor, acceptor/split.py (hook queue_size)",
    ),
    Fault(
        "request_wrong_entity",
        "a request is charged to the bucket of its own client id (quota precedence)",
        "principal and client id are swapped when the bucket is picked: with client-id "
        "quotas every client is charged to the bucket of client id 'ANONYMOUS'",
        "base/quota/requests.py RequestQuotas (hook request_entity)",
    ),
    Fault(
        "request_throttle_uncapped",
        "a request-quota throttle is bounded by one window",
        "request throttles use the unbounded X",
        "base/quota/requests.py RequestQuotas (hook request_throttle_bounded)",
    ),
    Fault(
        "max_connections_total_off_by_one",
        "max.connections caps the connections of every non-protected listener together",
        "the broker-wide total is allowed one more connection, while every listener's "
        "own cap (its own key, or the inherited max.connections) stays right",
        "base/quota/connections.py ConnectionQuotas (hook max_connections_total)",
    ),
    Fault(
        "ip_count_reject_close_late",
        "a per-IP count rejection is closed at once (the client reads EOF)",
        "the rejected socket is closed 400 ms after the reject",
        "acceptor/admission.py Admission (hook reject_close_s)",
    ),
    Fault(
        "proxy_source_ignored",
        "behind a PROXY header the client is the header's source address",
        "the header is read and dropped: every client is keyed (limits, rows) by the "
        "proxy's own address",
        "acceptor/admission.py Admission.header_read (hook proxy_source)",
    ),
    Fault(
        "request_mute_skipped",
        "a throttled connection is muted until its throttle ends (KIP-219): nothing more "
        "is read from it",
        "the throttle is written into the response but the connection is not muted",
        "acceptor/connection.py Connection._charge",
    ),
    Fault(
        "late_charge_n_windows",
        "a response goes out before its broker log line (its charge made later, without a "
        "check) only if that charge could not throttle it: the bucket's sum plus the bound "
        "of the charge, over the shortest window Kafka's Rate measures (n - 1 windows), is "
        "within the quota",
        "the claim is judged over n windows, so a response whose charge would throttle it "
        "goes out unthrottled and is charged late",
        "acceptor/connections.py Connections, and split.py SplitProcessors in the "
        "split model (the claim whether a response waits for its log line; hook "
        "claim_windows)",
    ),
    Fault(
        "accept_unrecorded",
        "every socket the acceptor takes is in its history (accept, then its outcome)",
        "one socket in 100 is closed as soon as it is taken, with no row and no count",
        "acceptor/admission.py Admission.admit (hook accept_drop)",
    ),
    Fault(
        "state_not_restored",
        "a restarted acceptor enforces the run-time quota changes it kept (state.dir), as "
        "Kafka replays its metadata log",
        "it starts from its configured limits, the kept changes ignored",
        "acceptor/dynamic.py DynamicConfig.restore (hook restores_state)",
    ),
    Fault(
        "cluster_change_ignored",
        "every front of a cluster applies the quota changes any front took, in the metadata "
        "log's order (Kafka's brokers each apply the committed ClientQuotaRecord and "
        "ConfigRecord)",
        "a front applies only the changes sent to it; those another front took never reach "
        "it (a broker that stopped following the metadata log)",
        "acceptor/dynamic.py DynamicConfig.poll and _commit (hook applies_others_changes)",
    ),
    Fault(
        "other_broker_config_applied",
        "a front enforces its own broker's limits: the cluster default and the per-broker "
        'configs of its own node id only (Kafka\'s BROKER resource "<id>")',
        "a front applies every broker's per-broker configs from the metadata log, so one "
        "broker's own limit is enforced on all",
        "acceptor/dynamic.py DynamicConfig._apply (hook applies_other_brokers_configs)",
    ),
    Fault(
        "user_quota_ignored",
        "a request is charged to the principal its connection logged in as (a SASL user, a "
        "certificate's name), with Kafka's (user, client-id) precedence",
        "every request is charged as ANONYMOUS, so a user's quota never applies (the rows "
        "still name the user)",
        "base/quota/requests.py RequestQuotas (hook request_entity)",
    ),
    Fault(
        "principal_not_reversed",
        "a client certificate's principal is Kafka's X500Principal.getName() (RFC 2253: "
        "the subject's RDNs last first)",
        "the subject in its written order (CN=client1,OU=harness)",
        "acceptor/tls.py listener_tls, kafka_principal (hook principal_written_order)",
    ),
    Fault(
        "tls_before_quota",
        "connection quotas are applied before any TLS byte is read (Kafka's acceptor thread)",
        "on a listener the acceptor ends TLS, a connection its per-IP quota closes first "
        "completes the TLS handshake",
        "acceptor/listener.py ListenerAcceptor._parked (hook parked_tls)",
    ),
    Fault(
        "failed_login_delay_dropped",
        "a failed SASL login is answered and closed connection.failed.authentication.delay.ms "
        "after it (KIP-306), by the broker behind the front, which holds the slot meanwhile",
        "the key stays with the acceptor and the broker behind it is not given it, so failed "
        "logins are refused after Kafka's default 100 ms (the assembly bug a deployment can "
        "have)",
        "harness/runner/acceptor_target.py broker_behind (hook broker_gets_failed_auth_delay)",
    ),
    Fault(
        "skip_ip_rate_check",
        "connection_creation_rate on ip entities throttles connections",
        "the per-IP rate step is skipped (ip quotas are still accepted and reported); "
        f"also enabled by the older key {LEGACY_SKIP_KEY}=true",
        "acceptor/dynamic.py DynamicConfig._apply_ip (hook applies_ip_quotas)",
    ),
)

_BY_NAME = {f.name: f for f in FAULTS}


@dataclass(frozen=True, slots=True)
class Faults:
    """The set of enabled faults (empty in production). Read once, at construction."""

    enabled: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.enabled - _BY_NAME.keys())
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {sorted(_BY_NAME)}")

    @classmethod
    def of(cls, names: Iterable[str]) -> Faults:
        return cls(frozenset(names))

    @classmethod
    def parse(cls, value: str, key: str = FAULT_KEY) -> Faults:
        """``name[,name...]`` (blank = none); an unknown name is a ``ConfigError``."""
        names = [s.strip() for s in value.split(",") if s.strip()]
        for name in names:
            if name not in _BY_NAME:
                raise ConfigError(
                    key, value, f"unknown fault {name!r}; known: {', '.join(sorted(_BY_NAME))}"
                )
        return cls(frozenset(names))

    def __contains__(self, name: object) -> bool:
        if name not in _BY_NAME:  # a typo in a hook must not silently test nothing
            raise KeyError(f"no fault named {name!r}")
        return name in self.enabled

    def __bool__(self) -> bool:
        return bool(self.enabled)

    def names(self) -> list[str]:
        """Enabled names in catalog order."""
        return [f.name for f in FAULTS if f.name in self.enabled]

    def to_property(self) -> str:
        return ",".join(self.names())

    def policy(self) -> NoFaults:
        """The hooks product code asks: Kafka's answers (``KAFKA``) when no fault is on."""
        return Seeded(self) if self.enabled else KAFKA


NO_FAULTS = Faults()

#: the seeded fault ``ip_count_reject_close_late``: how late a rejected socket is closed
REJECT_LATE_S = 0.4
#: the seeded fault ``accept_unrecorded``: one socket in this many is dropped unrecorded
UNRECORDED_EVERY = 100


class NoFaults:
    """Production's policy: every hook answers as Kafka does. A value hook returns its
    argument; a predicate returns Kafka's answer; a per-event hook is ``None``."""

    __slots__ = ()

    # -- the quota engine, at construction -------------------------------------------------
    def meter_class(self, cls: type[RateMeter]) -> type[RateMeter]:
        """The rate meter every quota uses (``violation_at_bound``)."""
        return cls

    def legacy_ring(self, legacy: bool) -> bool:
        """Whether connection meters keep the pre-3.8 ring (``window_n_samples``)."""
        return legacy

    def throttle_cap(self, cap_ms: int) -> int:
        """The bound on a connection-rate throttle: one window (``throttle_uncapped``)."""
        return cap_ms

    def broker_rate_exempt(self, protected: bool) -> bool:
        """A listener is exempt from the broker-wide rate when protected
        (``protected_counts_broker_rate``)."""
        return protected

    def evict_exempt(self, protected: bool) -> bool:
        """A listener's connections are never evicted when protected
        (``protected_evicted``)."""
        return protected

    def max_connections(self, limit: int) -> int:
        """``max.connections`` as enforced, also where a listener inherits it
        (``max_connections_off_by_one``)."""
        return limit

    def max_connections_total(self, limit: int) -> int:
        """The broker-wide total's cap alone (``max_connections_total_off_by_one``)."""
        return limit

    def inherited(self, broker_value: int) -> int:
        """What a listener without its own key takes: the broker-wide value
        (``listener_defaults_not_inherited``)."""
        return broker_value

    def listener_max(self, limit: int) -> int:
        """A listener's ``max.connections`` as enforced (``listener_max_ignored``)."""
        return limit

    def ip_count_limit(self, limit: int) -> int:
        """A per-IP connection count limit as enforced (``ip_count_off_by_one``)."""
        return limit

    def unrecords_ip_throttle(self) -> bool:
        """An IP-throttled connection is taken back out of the IP, listener and broker
        meters (``no_unrecord_ip_throttle``)."""
        return True

    # -- the quota engine, on a quota change ---------------------------------------------
    def applies_ip_rate_override(self) -> bool:
        """A per-IP connection_creation_rate is enforced (``ip_rate_override_ignored``)."""
        return True

    def applies_ip_quotas(self) -> bool:
        """An ip entity's connection_creation_rate reaches the engine
        (``skip_ip_rate_check``)."""
        return True

    def ip_meters_rebound(self, meters: dict[_K, _V]) -> dict[_K, _V]:
        """The IP meters a new default IP quota re-bounds: all of them
        (``ip_default_not_reapplied``)."""
        return meters

    # -- request quotas --------------------------------------------------------------------
    def request_throttle_bounded(self, bounded: bool) -> bool:
        """Whether a request-quota throttle is bounded by one window
        (``request_throttle_uncapped``)."""
        return bounded

    def request_entity(self) -> Callable[[str, str], tuple[str, str]] | None:
        """Per request: (user, client id) -> the pair the bucket is picked by; None in
        production (``request_wrong_entity``, ``user_quota_ignored``)."""
        return None

    def mutes_throttled(self) -> bool:
        """Whether a throttled connection is muted until its throttle ends (KIP-219)
        (``request_mute_skipped``)."""
        return True

    def claim_windows(self, windows: int) -> int:
        """The windows a charge whose broker log line is still to come is judged over
        (whether it could throttle its response, else it goes at once, charged when the
        line comes): the engine's own, the n - 1 Rate measures at the shortest
        (``late_charge_n_windows``)."""
        return windows

    # -- the acceptor's admission ----------------------------------------------------------
    def accept_drop(self) -> Callable[[], bool] | None:
        """Per accepted socket (one listener's count): True to close it unrecorded; None in
        production (``accept_unrecorded``)."""
        return None

    def proxy_source(self, header: tuple[str, int], peer: tuple[str, int]) -> tuple[str, int]:
        """Behind a PROXY header the client is the header's source (``proxy_source_ignored``)."""
        return header

    def rate_delay(self, delay_ms: int) -> int:
        """How long the acceptor waits for a connection-rate delay: the delay
        (``rate_delay_not_waited``, ``delay_doubled``)."""
        return delay_ms

    def slot_free(self, free: bool, first_look: bool) -> bool:
        """Whether the slot wait after a delay sees a free slot: what the engine says
        (``slot_wait_while_free``)."""
        return free

    def reject_close_s(self, after_s: float) -> float:
        """How long after a per-IP count reject its socket is closed: at once
        (``ip_count_reject_close_late``)."""
        return after_s

    def parked_tls(self, tls: Callable[[], _T]) -> _T | None:
        """The TLS an IP-throttled socket is handshaken with before its close: none, a
        quota's close reads no TLS byte (``tls_before_quota``)."""
        return None

    # -- processors, TLS, dynamic configuration --------------------------------------------
    def queue_size(self, size: int) -> int:
        """A processor's new-connection queue (``queue_larger_than_20``)."""
        return size

    def eviction_order(self, lru: Reversible[_T]) -> Iterable[_T]:
        """The order a processor evicts in: least recently used first (``evict_most_recent``)."""
        return lru

    def principal_written_order(self) -> bool:
        """A certificate's principal lists the subject's RDNs in their written order:
        never, Kafka's is RFC 2253's, last first (``principal_not_reversed``)."""
        return False

    def restores_state(self) -> bool:
        """A restarted acceptor replays the metadata log it kept (``state_not_restored``)."""
        return True

    def applies_others_changes(self) -> bool:
        """A front applies the changes other fronts logged (``cluster_change_ignored``)."""
        return True

    def applies_other_brokers_configs(self) -> bool:
        """A front applies another broker's per-broker configs: never
        (``other_broker_config_applied``)."""
        return False

    # -- the runner's assembly -------------------------------------------------------------
    def broker_gets_failed_auth_delay(self) -> bool:
        """The broker behind the front is given connection.failed.authentication.delay.ms
        (``failed_login_delay_dropped``)."""
        return True


#: the production policy
KAFKA = NoFaults()


class Seeded(NoFaults):
    """The enabled faults' deviations; every other hook answers as Kafka does."""

    __slots__ = ("_on",)

    def __init__(self, faults: Faults) -> None:
        #: `in` on a `Faults`: a misspelt name here raises, it cannot silently test nothing
        self._on = faults

    def meter_class(self, cls: type[RateMeter]) -> type[RateMeter]:
        return AtBoundRateMeter if "violation_at_bound" in self._on else cls

    def legacy_ring(self, legacy: bool) -> bool:
        return not legacy if "window_n_samples" in self._on else legacy

    def throttle_cap(self, cap_ms: int) -> int:
        return JAVA_LONG_MAX if "throttle_uncapped" in self._on else cap_ms

    def broker_rate_exempt(self, protected: bool) -> bool:
        return protected and "protected_counts_broker_rate" not in self._on

    def evict_exempt(self, protected: bool) -> bool:
        return protected and "protected_evicted" not in self._on

    def max_connections(self, limit: int) -> int:
        if "max_connections_off_by_one" in self._on and limit < INT_MAX:
            return limit + 1
        return limit

    def max_connections_total(self, limit: int) -> int:
        if "max_connections_total_off_by_one" in self._on and limit < INT_MAX:
            return limit + 1
        return limit

    def inherited(self, broker_value: int) -> int:
        return INT_MAX if "listener_defaults_not_inherited" in self._on else broker_value

    def listener_max(self, limit: int) -> int:
        return INT_MAX if "listener_max_ignored" in self._on else limit

    def ip_count_limit(self, limit: int) -> int:
        if "ip_count_off_by_one" in self._on and limit < INT_MAX:
            return limit + 1
        return limit

    def unrecords_ip_throttle(self) -> bool:
        return "no_unrecord_ip_throttle" not in self._on

    def applies_ip_rate_override(self) -> bool:
        return "ip_rate_override_ignored" not in self._on

    def applies_ip_quotas(self) -> bool:
        return "skip_ip_rate_check" not in self._on

    def ip_meters_rebound(self, meters: dict[_K, _V]) -> dict[_K, _V]:
        return {} if "ip_default_not_reapplied" in self._on else meters

    def request_throttle_bounded(self, bounded: bool) -> bool:
        return bounded and "request_throttle_uncapped" not in self._on

    def mutes_throttled(self) -> bool:
        return "request_mute_skipped" not in self._on

    def claim_windows(self, windows: int) -> int:
        # the claim judged over n windows, not the n - 1 Rate measures at the shortest
        return windows + 1 if "late_charge_n_windows" in self._on else windows

    def request_entity(self) -> Callable[[str, str], tuple[str, str]] | None:
        swap = "request_wrong_entity" in self._on
        anonymous = "user_quota_ignored" in self._on
        if not (swap or anonymous):
            return None

        def entity(user: str, client_id: str) -> tuple[str, str]:
            if swap:  # principal and client id swapped
                user, client_id = client_id, user
            if anonymous:  # every request charged as ANONYMOUS
                user = "ANONYMOUS"
            return user, client_id

        return entity

    def accept_drop(self) -> Callable[[], bool] | None:
        if "accept_unrecorded" not in self._on:
            return None
        taken = itertools.count(1)
        return lambda: next(taken) % UNRECORDED_EVERY == 0

    def proxy_source(self, header: tuple[str, int], peer: tuple[str, int]) -> tuple[str, int]:
        return peer if "proxy_source_ignored" in self._on else header

    def rate_delay(self, delay_ms: int) -> int:
        if "rate_delay_not_waited" in self._on:
            return 0
        if "delay_doubled" in self._on:
            return 2 * delay_ms
        return delay_ms

    def slot_free(self, free: bool, first_look: bool) -> bool:
        # the first look after the delay waits for a release even when a slot is free
        return free and not (first_look and "slot_wait_while_free" in self._on)

    def reject_close_s(self, after_s: float) -> float:
        return REJECT_LATE_S if "ip_count_reject_close_late" in self._on else after_s

    def parked_tls(self, tls: Callable[[], _T]) -> _T | None:
        return tls() if "tls_before_quota" in self._on else None

    def queue_size(self, size: int) -> int:
        return 2 * size if "queue_larger_than_20" in self._on else size

    def eviction_order(self, lru: Reversible[_T]) -> Iterable[_T]:
        return reversed(lru) if "evict_most_recent" in self._on else lru

    def principal_written_order(self) -> bool:
        return "principal_not_reversed" in self._on

    def restores_state(self) -> bool:
        return "state_not_restored" not in self._on

    def applies_others_changes(self) -> bool:
        return "cluster_change_ignored" not in self._on

    def applies_other_brokers_configs(self) -> bool:
        return "other_broker_config_applied" in self._on

    def broker_gets_failed_auth_delay(self) -> bool:
        return "failed_login_delay_dropped" not in self._on


class AtBoundRateMeter(RateMeter):
    """The seeded fault ``violation_at_bound``: a violation at ``rate >= bound``, not ``>``.

    A meter exactly at its bound throttles for at least 1 ms (Kafka's throttle would be
    ``round(0) = 0``, and Kafka records no violation at all). Built only when the fault is
    on (``Seeded.meter_class``), so ``RateMeter``'s hot path carries no check for it.
    """

    __slots__ = ()

    def record(self, value: float, now_ms: int, check: bool = True) -> QuotaCheck | None:
        self._add(float(value), now_ms)
        if not check:
            return None
        self._purge(now_ms)
        window = self._window_size_purged(now_ms)
        rate = self._sum() / (window / 1000.0)
        if rate >= self.bound:
            return QuotaCheck(rate, self.bound, window)
        return None

    def record_bounded(self, value: float, now_ms: int, max_ms: int) -> int:
        self._add(float(value), now_ms)
        self._purge(now_ms)
        window = self._window_size_purged(now_ms)
        rate = self._sum() / (window / 1000.0)
        if rate >= self.bound:
            return max(1, throttle_time_ms(rate, self.bound, window, max_ms))
        return 0

    def throttle_ms(self, now_ms: int, bounded: bool, max_ms: int) -> int:
        rate = self.measure(now_ms)
        if rate < self.bound:
            return 0
        window = self._window_size_purged(now_ms)
        return max(1, throttle_time_ms(rate, self.bound, window, max_ms if bounded else None))
