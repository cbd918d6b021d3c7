"""Run-time quota changes: the admin path's writes, the metadata log, the limits in force.

Why its own object: an alteration must reach the engines (`ConnectionQuotas`,
`RequestQuotas`), the metadata log (`state.dir`: replayed at start, shared by the fronts of
a cluster) and the waiters for a slot at once, and the admin path, the metrics and the
`config` rows must all read the same limits back. A change is committed to the log first
and applied from it, in log order, by the front that took it and by every other front of
the cluster (`poll`), as Kafka's brokers apply the records of its metadata log. It receives
the two engines, the static configuration and a callback that wakes the admissions waiting
for a slot; it knows no listener, connection or server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from acceptor.config import AcceptorConfig
from acceptor.request_quotas import entity_key
from acceptor.state import ClientQuotaRecord, ConfigRecord, Image, MetadataLog, Record
from base.quota.client_quota_admin import enforced_ip_quotas, ip_entity_address
from base.quota.config import ConfigError, QuotaConfig, apply_dynamic_update, layered_update
from base.quota.connections import ConnectionQuotas
from base.quota.faults import FAULT_KEY
from base.quota.requests import DEFAULT, EntityName, RequestQuotas
from base.quota.versions import METADATA_KEY, VERSION_KEY

IP_RATE_KEY = "connection_creation_rate"


def _name(name: EntityName) -> str | None:
    return None if name is DEFAULT or name is None else str(name)


def _entity_name(name: str | None) -> EntityName:
    return DEFAULT if name is None else name


class DynamicConfig:
    def __init__(
        self,
        cfg: AcceptorConfig,
        quotas: ConnectionQuotas,
        request_quotas: RequestQuotas,
        slot_freed: Callable[[], None],
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.cfg = cfg
        #: the seeded-fault hooks (base.quota.faults): Kafka's answers in production
        self._faults = cfg.faults.policy()
        #: the connection limits in force: the static ones with the dynamic layers applied
        self.quota_cfg: QuotaConfig = cfg.quota
        self.quotas = quotas
        self.request_quotas = request_quotas
        self.state = Image()
        self.metadata = MetadataLog(cfg.state_dir) if cfg.state_dir is not None else None
        self._slot_freed = slot_freed
        self._log = log

    def restore(self) -> None:
        """Replay the metadata log `state.dir` kept (at start)."""
        if self.metadata is None:
            return
        if not self._faults.restores_state():  # the log read past, not applied
            self.metadata.read_new()
            return
        self._catch_up()

    def poll(self) -> bool:
        """Apply what the log gained since the last read (another front's changes, in log
        order); whether anything was applied."""
        if self.metadata is None or not self.metadata.changed():
            return False
        if not self._faults.applies_others_changes():  # read past, not applied
            self.metadata.read_new()
            return False
        return self._catch_up()

    def _catch_up(self) -> bool:
        assert self.metadata is not None
        batches = self.metadata.read_new()
        for batch in batches:
            self._apply(batch)
        return bool(batches)

    def _commit(self, batch: list[Record]) -> None:
        """Append to the log and apply up to its end (this batch included), or apply at
        once when there is no log (no `state.dir`)."""
        if self.metadata is None:
            self._apply(batch)
            return
        self.metadata.append(batch)
        if not self._faults.applies_others_changes():  # its own change only
            self.metadata.read_new()
            self._apply(batch)
            return
        self._catch_up()

    def _apply(self, batch: list[Record]) -> None:
        now_ms = time.monotonic_ns() // 1_000_000
        layers: dict[bool, dict[str, str | None]] = {}
        for r in batch:
            if isinstance(r, ConfigRecord):
                mine = self.cfg.node_id in (None, r.node)
                if (
                    r.node is not None
                    and not mine
                    and not self._faults.applies_other_brokers_configs()
                ):
                    continue  # another broker's own layer
                layers.setdefault(r.node is not None, {})[r.name] = r.value
            elif r.entity and r.entity[0][0] == "ip":
                self._apply_ip(r.entity[0][1], None if r.value is None else round(r.value), now_ms)
            else:
                kinds = dict(r.entity)
                user = _entity_name(kinds["user"]) if "user" in kinds else None
                client = _entity_name(kinds["client-id"]) if "client-id" in kinds else None
                self._apply_request(user, client, r.key, r.value)
        for per_broker, changes in layers.items():
            effective, cluster, node = layered_update(
                self.state.broker_config, self.state.node_config, changes, per_broker=per_broker
            )
            try:
                new_cfg = apply_dynamic_update(self.quota_cfg, effective)
            except ConfigError as exc:  # validated where it was taken: a front's own static keys
                self._log(f"metadata log: {changes} not applied here: {exc}")
                continue
            self.quotas.reconfigure(new_cfg, now_ms)
            self.quota_cfg = new_cfg
            self.state.broker_config, self.state.node_config = cluster, node
        if layers:
            self._slot_freed()

    def _apply_ip(self, ip: str | None, rate: int | None, now_ms: int) -> None:
        key = "default" if ip is None else ip  # the entity name as given (Kafka's image)
        if self._faults.applies_ip_quotas():
            self.quotas.set_ip_quota(ip_entity_address(ip), rate, now_ms)
        if rate is None:
            self.state.ip_quotas.pop(key, None)
        else:
            self.state.ip_quotas[key] = rate

    def _apply_request(
        self, user: EntityName, client_id: EntityName, key: str, value: float | None
    ) -> None:
        self.request_quotas.set_quota(user, client_id, key, value)
        ek = entity_key(user, client_id)
        values = self.state.request_quotas.setdefault(ek, {})
        if value is None:
            values.pop(key, None)
            if not values:
                self.state.request_quotas.pop(ek, None)
        else:
            values[key] = float(value)

    def ip_quotas(self) -> dict[str, int]:
        """The IP quotas in force ("default" for the default entity): the admin truth."""
        return dict(self.state.ip_quotas)

    def set_ip_quota(self, ip: str | None, rate: int | None) -> None:
        value = None if rate is None else float(rate)
        self._commit([ClientQuotaRecord((("ip", ip),), IP_RATE_KEY, value)])

    def set_request_quota(
        self, user: EntityName, client_id: EntityName, key: str, value: float | None
    ) -> None:
        entity = tuple(
            (kind, _name(name))
            for kind, name in (("user", user), ("client-id", client_id))
            if name is not None
        )
        self._commit([ClientQuotaRecord(entity, key, value)])

    def alter_broker_config(
        self, changes: Mapping[str, str | None], *, node: int | None = None
    ) -> None:
        """Dynamic broker keys for the cluster-default layer (``node`` None) or broker
        ``node``'s own (raises ConfigError and commits nothing when the layers they leave
        in force are not valid)."""
        effective, _cluster, _node = layered_update(
            self.state.broker_config, self.state.node_config, changes, per_broker=node is not None
        )
        apply_dynamic_update(self.quota_cfg, effective)
        self._commit([ConfigRecord(node, k, v) for k, v in changes.items()])

    def limits(self) -> dict[str, object]:
        """Every limit in force under its Kafka key, IP quotas by address (what is
        enforced), request quotas and the seeded faults (`config` rows, metrics)."""
        limits = dict(self.quota_cfg.to_properties())
        limits["listeners"] = limits.get("listeners")
        limits["ip_quotas"] = enforced_ip_quotas(self.ip_quotas())  # by address
        limits["request_quotas"] = dict(self.state.request_quotas)
        limits["harness.test.skip.ip.rate.check"] = self.cfg.skip_ip_rate_check
        limits[FAULT_KEY] = self.cfg.faults.names()
        limits[VERSION_KEY] = self.cfg.kafka.name  # the release whose semantics it enforces
        limits[METADATA_KEY] = self.cfg.kafka.metadata  # and that release's metadata mode
        if self.cfg.node_id is not None:
            limits["node.id"] = self.cfg.node_id  # the broker this front stands for
        return limits
