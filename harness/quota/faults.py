"""Seeded enforcement faults: small, realistic deviations from Kafka, one rule each.

Why they exist: a gate is only worth its record of catching bugs. ``harness selftest``
starts the acceptor with ``harness.test.fault=<name>[,<name>]``, runs the catalog
scenario that covers the fault's rule with ``--gate`` and expects a FAIL. Off by default;
an acceptor with any fault on says so loudly at start and in every ``config`` row.

Why this shape: the production path must not pay for the hooks. A ``Faults`` value is
frozen and handed to the engine objects at construction; they turn it into plain
attributes (a meter class, a cap, a limit, a flag) once, so a decision reads the same
attributes it always did and only the few decision points that *branch* on a fault test a
boolean that is ``False`` in production. Nothing looks a fault up by name per event.

Every fault lives in an enforcement code path: the quota engine (``harness.quota``) or the
acceptor's admission, processor and request-quota code (``harness.acceptor``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.quota.config import ConfigError

__all__ = ["FAULTS", "FAULT_KEY", "LEGACY_SKIP_KEY", "NO_FAULTS", "Fault", "Faults"]

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
        "harness/quota/meter.py AtBoundRateMeter",
    ),
    Fault(
        "throttle_uncapped",
        "connection-rate throttles are bounded by one window (min(X, w))",
        "broker/listener delays and IP throttles use the unbounded X",
        "harness/quota/connections.py ConnectionQuotas (throttle cap)",
    ),
    Fault(
        "window_n_samples",
        "the meter keeps the ring of the release enforced as (n+1 samples purged by last "
        "event from Kafka 3.8, n purged by start before)",
        "connection meters keep the other release's ring: n samples purged by sample start "
        "in an acceptor enforcing as 3.8 or newer (the pre-3.8 ring), n+1 purged by last "
        "event in one enforcing as an older release",
        "harness/quota/connections.py ConnectionQuotas (meter ring)",
    ),
    Fault(
        "no_unrecord_ip_throttle",
        "an IP-throttled connection is un-recorded from the IP, listener and broker meters",
        "the +1 of a throttled connection stays in all three meters",
        "harness/quota/connections.py ConnectionQuotas.admit",
    ),
    Fault(
        "ip_rate_override_ignored",
        "a per-IP connection_creation_rate overrides the default IP quota",
        "per-IP rate quotas are accepted and reported but the default applies",
        "harness/quota/connections.py ConnectionQuotas.set_ip_quota",
    ),
    Fault(
        "ip_default_not_reapplied",
        "a new default IP quota re-bounds every existing IP meter without an override",
        "existing IP meters keep the bound they were created with",
        "harness/quota/connections.py ConnectionQuotas.set_ip_quota",
    ),
    Fault(
        "ip_count_off_by_one",
        "max.connections.per.ip (and overrides): count >= limit is rejected",
        "one connection more than the cap is admitted per IP",
        "harness/quota/connections.py ConnectionQuotas (per-IP limits)",
    ),
    Fault(
        "max_connections_off_by_one",
        "max.connections: no slot when total >= max; evict while total > max",
        "the broker-wide maximum is enforced one too high (also where a listener inherits it)",
        "harness/quota/connections.py ConnectionQuotas (broker max)",
    ),
    Fault(
        "listener_max_ignored",
        "listener.name.<l>.max.connections caps the listener",
        "listener maxima are accepted and reported but never enforced",
        "harness/quota/connections.py ConnectionQuotas (listener max)",
    ),
    Fault(
        "listener_defaults_not_inherited",
        "a listener without its own max.connections / max.connection.creation.rate takes "
        "the broker-wide value (Kafka's valuesWithPrefixOverride)",
        "such a listener is unlimited (this acceptor before issue 14's fix)",
        "harness/quota/connections.py ConnectionQuotas (listener max and rate)",
    ),
    Fault(
        "protected_counts_broker_rate",
        "the protected (inter-broker) listener is exempt from max.connection.creation.rate",
        "its connections are recorded in (and delayed by) the broker-wide rate",
        "harness/quota/connections.py ConnectionQuotas.record_connection_rate",
    ),
    Fault(
        "protected_evicted",
        "connections of the protected listener are never evicted",
        "its processors evict least recently used connections like any other",
        "harness/quota/connections.py max_connections_exceeded, harness/acceptor/processor.py",
    ),
    Fault(
        "evict_most_recent",
        "over max.connections a processor evicts its least recently used connection",
        "it evicts the most recently used one",
        "harness/acceptor/processor.py Processor._close_excess",
    ),
    Fault(
        "rate_delay_not_waited",
        "the acceptor sleeps out a connection-rate delay before admitting",
        "the delay is computed and recorded but not waited",
        "harness/acceptor/admission.py ListenerAcceptor._admit",
    ),
    Fault(
        "delay_doubled",
        "the acceptor waits exactly the delay the meter asks for",
        "it waits twice as long",
        "harness/acceptor/admission.py ListenerAcceptor._admit",
    ),
    Fault(
        "slot_wait_while_free",
        "after a rate delay the acceptor proceeds at once when a slot is free",
        "it waits for a slot to be released (up to the 500 ms poll) before checking",
        "harness/acceptor/admission.py ListenerAcceptor._wait_for_slot",
    ),
    Fault(
        "queue_larger_than_20",
        "each processor's new-connection queue holds 20 (Processor.ConnectionQueueSize)",
        "the queue holds 40 and a processor registers up to 40 per iteration",
        "harness/acceptor/processor.py Processor",
    ),
    Fault(
        "request_wrong_entity",
        "a request is charged to the bucket of its own client id (quota precedence)",
        "principal and client id are swapped when the bucket is picked: with client-id "
        "quotas every client is charged to the bucket of client id 'ANONYMOUS'",
        "harness/quota/requests.py _QuotaManager.bucket",
    ),
    Fault(
        "request_throttle_uncapped",
        "a request-quota throttle is bounded by one window",
        "request throttles use the unbounded X",
        "harness/quota/requests.py RequestQuotas (request manager)",
    ),
    Fault(
        "max_connections_total_off_by_one",
        "max.connections caps the connections of every non-protected listener together",
        "the broker-wide total is allowed one more connection, while every listener's "
        "own cap (its own key, or the inherited max.connections) stays right",
        "harness/quota/connections.py ConnectionQuotas (broker max)",
    ),
    Fault(
        "ip_count_reject_close_late",
        "a per-IP count rejection is closed at once (the client reads EOF)",
        "the rejected socket is closed 400 ms after the reject",
        "harness/acceptor/admission.py ListenerAcceptor._decide",
    ),
    Fault(
        "proxy_source_ignored",
        "behind a PROXY header the client is the header's source address",
        "the header is read and dropped: every client is keyed (limits, rows) by the "
        "proxy's own address",
        "harness/acceptor/admission.py ListenerAcceptor._proxy_then_hand_off",
    ),
    Fault(
        "request_mute_skipped",
        "a throttled connection is muted until its throttle ends (KIP-219): nothing more "
        "is read from it",
        "the throttle is written into the response but the connection is not muted",
        "harness/acceptor/connections.py Connections (request charge)",
    ),
    Fault(
        "accept_unrecorded",
        "every socket the acceptor takes is in its history (accept, then its outcome)",
        "one socket in 100 is closed as soon as it is taken, with no row and no count",
        "harness/acceptor/admission.py ListenerAcceptor._admit",
    ),
    Fault(
        "state_not_restored",
        "a restarted acceptor enforces the run-time quota changes it kept (state.dir), as "
        "Kafka replays its metadata log",
        "it starts from its configured limits, the kept changes ignored",
        "harness/acceptor/dynamic.py DynamicConfig.restore",
    ),
    Fault(
        "cluster_change_ignored",
        "every front of a cluster applies the quota changes any front took, in the metadata "
        "log's order (Kafka's brokers each apply the committed ClientQuotaRecord and "
        "ConfigRecord)",
        "a front applies only the changes sent to it; those another front took never reach "
        "it (a broker that stopped following the metadata log)",
        "harness/acceptor/dynamic.py DynamicConfig.poll",
    ),
    Fault(
        "other_broker_config_applied",
        "a front enforces its own broker's limits: the cluster default and the per-broker "
        'configs of its own node id only (Kafka\'s BROKER resource "<id>")',
        "a front applies every broker's per-broker configs from the metadata log, so one "
        "broker's own limit is enforced on all",
        "harness/acceptor/dynamic.py DynamicConfig._apply",
    ),
    Fault(
        "user_quota_ignored",
        "a request is charged to the principal its connection logged in as (a SASL user, a "
        "certificate's name), with Kafka's (user, client-id) precedence",
        "every request is charged as ANONYMOUS, so a user's quota never applies (the rows "
        "still name the user)",
        "harness/quota/requests.py RequestQuotas",
    ),
    Fault(
        "principal_not_reversed",
        "a client certificate's principal is Kafka's X500Principal.getName() (RFC 2253: "
        "the subject's RDNs last first)",
        "the subject in its written order (CN=client1,OU=harness)",
        "harness/acceptor/tls.py kafka_principal",
    ),
    Fault(
        "tls_before_quota",
        "connection quotas are applied before any TLS byte is read (Kafka's acceptor thread)",
        "on a listener the acceptor ends TLS, a connection its per-IP quota closes first "
        "completes the TLS handshake",
        "harness/acceptor/admission.py ListenerAcceptor._close_parked_one",
    ),
    Fault(
        "failed_login_delay_dropped",
        "a failed SASL login is answered and closed connection.failed.authentication.delay.ms "
        "after it (KIP-306), by the broker behind the front, which holds the slot meanwhile",
        "the key stays with the acceptor and the broker behind it is not given it, so failed "
        "logins are refused after Kafka's default 100 ms (the assembly bug a deployment can "
        "have)",
        "harness/runner/targets.py AcceptorTarget.start (the broker's keys)",
    ),
    Fault(
        "skip_ip_rate_check",
        "connection_creation_rate on ip entities throttles connections",
        "the per-IP rate step is skipped (ip quotas are still accepted and reported); "
        f"also enabled by the older key {LEGACY_SKIP_KEY}=true",
        "harness/acceptor/server.py Acceptor.set_ip_quota",
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


NO_FAULTS = Faults()
