"""Run-time quota changes: the admin path's writes, the state file, the limits in force.

Why its own object: an alteration must reach the engines (`ConnectionQuotas`,
`RequestQuotas`), the state file (`state.dir`, re-applied at start) and the waiters for a
slot at once, and the admin path, the metrics and the `config` rows must all read the same
limits back. It receives the two engines, the static configuration and a callback that wakes
the admissions waiting for a slot; it knows no listener, connection or server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from harness.acceptor.config import AcceptorConfig
from harness.acceptor.request_quotas import entity_key, parse_entity_key
from harness.acceptor.state import PersistentState, load_state, save_state
from harness.quota.client_quota_admin import enforced_ip_quotas, ip_entity_address
from harness.quota.config import QuotaConfig, apply_dynamic_update, layered_update
from harness.quota.connections import ConnectionQuotas
from harness.quota.faults import FAULT_KEY
from harness.quota.requests import EntityName, RequestQuotas
from harness.quota.versions import METADATA_KEY, VERSION_KEY


class DynamicConfig:
    def __init__(
        self,
        cfg: AcceptorConfig,
        quotas: ConnectionQuotas,
        request_quotas: RequestQuotas,
        slot_freed: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        #: the connection limits in force: the static ones with the dynamic layers applied
        self.quota_cfg: QuotaConfig = cfg.quota
        self.quotas = quotas
        self.request_quotas = request_quotas
        self.state = load_state(cfg.state_dir)
        self._slot_freed = slot_freed

    def restore(self) -> None:
        """Re-apply what `state.dir` kept from earlier runs (at start)."""
        if "state_not_restored" in self.cfg.faults:  # SEEDED FAULT: the state file ignored
            self.state = PersistentState()
            return
        st = self.state
        if st.broker_config or st.node_config:
            layers = {**st.broker_config, **st.node_config}  # per-broker wins
            self.quota_cfg = apply_dynamic_update(self.quota_cfg, layers)
            self.quotas.reconfigure(self.quota_cfg, time.monotonic_ns() // 1_000_000)
        for ek, values in st.request_quotas.items():
            user, client = parse_entity_key(ek)
            for key, value in values.items():
                self.request_quotas.set_quota(user, client, key, value)
        now = time.monotonic_ns() // 1_000_000
        for key, rate in st.ip_quotas.items():
            ip = None if key == "default" else key
            if not self.cfg.skip_ip_rate_check:
                self.quotas.set_ip_quota(ip_entity_address(ip), rate, now)

    def ip_quotas(self) -> dict[str, int]:
        """The IP quotas in force ("default" for the default entity): the admin truth."""
        return dict(self.state.ip_quotas)

    def set_ip_quota(self, ip: str | None, rate: int | None) -> None:
        now_ns = time.monotonic_ns()
        key = "default" if ip is None else ip  # the entity name as given (Kafka's image)
        if not self.cfg.skip_ip_rate_check:
            self.quotas.set_ip_quota(ip_entity_address(ip), rate, now_ns // 1_000_000)
        if rate is None:
            self.state.ip_quotas.pop(key, None)
        else:
            self.state.ip_quotas[key] = rate
        save_state(self.cfg.state_dir, self.state)

    def set_request_quota(
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
        save_state(self.cfg.state_dir, self.state)

    def alter_broker_config(
        self, changes: Mapping[str, str | None], *, per_broker: bool = False
    ) -> None:
        """Apply dynamic broker keys to the cluster-default or (per_broker) this broker's
        layer (raises ConfigError and changes nothing on bad input)."""
        effective, cluster, node = layered_update(
            self.state.broker_config, self.state.node_config, changes, per_broker=per_broker
        )
        new_cfg = apply_dynamic_update(self.quota_cfg, effective)
        now_ms = time.monotonic_ns() // 1_000_000
        self.quotas.reconfigure(new_cfg, now_ms)
        self.quota_cfg = new_cfg
        self.state.broker_config, self.state.node_config = cluster, node
        save_state(self.cfg.state_dir, self.state)
        self._slot_freed()

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
        return limits
