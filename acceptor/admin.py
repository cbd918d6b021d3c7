"""The admin requests the acceptor answers itself (decoded/encoded with kafka-python).

Why here and not at the broker: the broker does not see the clients' addresses (only the
acceptor's), so `ip` connection quotas and the connection-limit broker keys must be enforced
— and therefore administered — by the acceptor. Kafka's own tools keep working: the same
DescribeClientQuotas / AlterClientQuotas (entity `ip`) and IncrementalAlterConfigs (BROKER
resource, `max.connections*` keys) that `kafka-configs.sh` sends are answered here with
Kafka's validation and messages. Everything else (user/client-id quotas, topic configs,
DescribeConfigs) goes to the broker untouched.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from acceptor.dynamic import IP_RATE_KEY
from acceptor.ports import DEFERRED
from base.history.rows import AcceptorAdmin
from base.quota.client_quota_admin import (
    INVALID_REQUEST,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_SERVER_ERROR_MESSAGE,
    validate_alteration,
    validate_describe_filter,
)
from base.quota.config import (
    BROKER_RECONFIGURABLE,
    ConfigError,
    apply_dynamic_update,
    resolve_host,
)
from base.quota.requests import DEFAULT, EntityName
from base.wire.framing import (
    FrameError,
    RequestInfo,
    check_nulls,
    decode_request,
    encode_response,
)

if TYPE_CHECKING:
    from acceptor.config import AcceptorConfig
    from acceptor.dynamic import DynamicConfig
    from acceptor.ports import Deferred
    from acceptor.ports import Peer as Connection
    from acceptor.recorder import Recorder

DESCRIBE_CLIENT_QUOTAS = DescribeClientQuotasRequest.API_KEY  # 48
ALTER_CLIENT_QUOTAS = AlterClientQuotasRequest.API_KEY  # 49
INCREMENTAL_ALTER_CONFIGS = IncrementalAlterConfigsRequest.API_KEY  # 44
ADMIN_KEYS = frozenset({DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, INCREMENTAL_ALTER_CONFIGS})

CLUSTER_AUTHORIZATION_FAILED = 31
#: after the upstream could not tell its node id, how long before it is asked again
NODE_ID_RETRY_S = 30.0
INVALID_CONFIG = 40
BROKER_RESOURCE = 4
REQUEST_PERCENTAGE = "request_percentage"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

ERROR_NAMES = {
    0: "NONE",
    CLUSTER_AUTHORIZATION_FAILED: "CLUSTER_AUTHORIZATION_FAILED",
    INVALID_CONFIG: "INVALID_CONFIG",
    INVALID_REQUEST: "INVALID_REQUEST",
    35: "UNSUPPORTED_VERSION",
}
_AUTH_MESSAGE = (
    "Cluster authorization failed: admin is not allowed from {ip} on listener {listener}"
)


def _entity_name(entity: dict[str, str | None], etype: str) -> EntityName:
    """AlterClientQuotas names -> RequestQuotas names: absent None, default DEFAULT."""
    if etype not in entity:
        return None
    name = entity[etype]
    return DEFAULT if name is None else name


def is_connection_limit_key(key: str | None) -> bool:
    if not isinstance(key, str):
        return False
    if key in BROKER_RECONFIGURABLE:
        return True
    parts = key.split(".")
    return (
        len(parts) >= 4
        and key.startswith("listener.name.")
        and (key.endswith(".max.connections") or key.endswith(".max.connection.creation.rate"))
    )


def _entry_result(entry: Any, code: int, message: str | None) -> Any:
    """One AlterClientQuotas answer entry, naming the entity as the request did."""
    R = AlterClientQuotasResponse
    return R.EntryData(
        error_code=code,
        error_message=message,
        entity=[
            R.EntryData.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity
        ],
    )


def _resource_result(resource: Any, code: int, message: str | None) -> Any:
    """One IncrementalAlterConfigs answer, naming the resource as the request did."""
    return IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
        error_code=code,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
    )


def _outcome(code: int, validate_only: bool) -> str:
    """The `admin` row's reason."""
    if code:
        return ERROR_NAMES.get(code, str(code))
    return "validated" if validate_only else "applied"


def check_broker_resource(
    name: str, configs: list[tuple[str, int, str | None]], node_id: int | None
) -> tuple[int, str] | None:
    """A BROKER resource of IncrementalAlterConfigs, checked as Kafka 4.3.1's
    ``ConfigAdminManager.preprocess`` does before any value is looked at, in its order:
    duplicate keys, null values, the resource name (``""`` = cluster default, else this
    broker's node id), operation types, append/subtract on a non-list key.
    ``configs`` are ``(name, operation, value)``.
    """
    names = [c[0] for c in configs]
    if len(set(names)) != len(names):
        return INVALID_REQUEST, "Error due to duplicate config keys"
    nulls = [key for key, op, value in configs if op != OP_DELETE and value is None]
    if nulls:
        return INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls)
    if name:
        # Scala's String.toInt (Integer.parseInt): optional sign, ASCII digits, 32 bits
        digits = name[1:] if name[:1] in "+-" else name
        if not (digits.isascii() and digits.isdigit()) or not (INT32_MIN <= int(name) <= INT32_MAX):
            return INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        if node_id is None:
            return (
                INVALID_REQUEST,
                f"Unexpected broker id: the acceptor does not know the id of the broker it "
                f"fronts (set node.id), but received {name}",
            )
        if int(name) != node_id:
            return INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}"
    for _key, op, _ in configs:
        if op not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
            return INVALID_REQUEST, f"Unknown operations type {op}"
    for key, op, _ in configs:
        if not is_connection_limit_key(key):
            return (
                INVALID_CONFIG,
                f"The acceptor only handles connection-limit keys on the broker resource; "
                f"{key} must be sent in a separate request",
            )
        if op in (OP_APPEND, OP_SUBTRACT):  # no connection-limit key is a LIST
            verb = "append" if op == OP_APPEND else "subtract"
            return INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {key}"
    return None


class NodeIds:
    """The `node.id` of the broker behind each listener (per-broker BROKER resources).

    Receives the configuration (`node.id`, the listeners' upstreams), the listeners' own
    addresses (to pick the broker advertising one) and a log."""

    def __init__(
        self,
        cfg: AcceptorConfig,
        address: Callable[[str], tuple[str, int]],
        log: Callable[[str], None],
    ) -> None:
        self.cfg = cfg
        self._address = address
        self._log = log
        self._node_ids: dict[str, int] = {}  # listener -> node id learned from its upstream
        self._node_id_failed: dict[str, float] = {}  # listener -> when asking last failed

    def of(self, listener: str) -> int | None:
        """The `node.id` of the broker behind `listener`: the configured `node.id`, else
        asked once from the upstream (a blocking Metadata round trip on the loop, like the
        host resolution here): its only broker, or the broker advertising this listener's or
        the upstream's address. None when it cannot be told."""
        configured = self.cfg.node_id
        if configured is not None:
            return configured
        if listener not in self._node_ids:
            failed = self._node_id_failed.get(listener)
            if failed is not None and time.monotonic() - failed < NODE_ID_RETRY_S:
                return None  # do not stall the loop on every request while it is down
            learned = self._ask_node_id(listener)
            if learned is None:
                self._node_id_failed[listener] = time.monotonic()
                return None
            self._node_ids[listener] = learned
        return self._node_ids[listener]

    def _ask_node_id(self, listener: str) -> int | None:
        from kafka.protocol.metadata import MetadataRequest

        from base.admin.client import KafkaWire

        spec = self.cfg.listener(listener)
        try:
            with KafkaWire(f"{spec.upstream_host}:{spec.upstream_port}", timeout=5.0) as wire:
                v = wire.version_for(MetadataRequest)
                resp = wire.request(
                    MetadataRequest[v](
                        topics=[],
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                    )
                )
        except (OSError, ValueError) as exc:
            self._log(f"node.id: cannot ask {spec.upstream_host}:{spec.upstream_port}: {exc!r}")
            return None
        brokers = [(b.node_id, b.host, b.port) for b in resp.brokers]
        if len(brokers) == 1:
            return int(brokers[0][0])
        ours = {self._address(listener), (spec.upstream_host, spec.upstream_port)}
        matches = {node for node, host, port in brokers if (host, port) in ours}
        return int(matches.pop()) if len(matches) == 1 else None


class AdminHandler:
    """Receives the static configuration, the run-time quota changes (`dynamic`), where
    history rows go, a log, the listeners' own addresses (to find the broker behind one) and
    what to call once a change is applied (the `config` row)."""

    def __init__(
        self,
        cfg: AcceptorConfig,
        dynamic: DynamicConfig,
        rec: Recorder,
        *,
        log: Callable[[str], None],
        address: Callable[[str], tuple[str, int]],
        config_changed: Callable[[str], None],
        resolve: Callable[[str], str] = resolve_host,
        delegate: Callable[[Connection, bytes], None] | None = None,
    ) -> None:
        self.cfg = cfg
        #: a processor process's: where a request the acceptor answers goes to be answered
        #: (the accepting process, which owns the quotas); its answer comes back later
        #: (`Connection.deferred_answer`)
        self.delegate = delegate
        self.dynamic = dynamic
        self.rec = rec
        self._config_changed = config_changed
        self.node_ids = NodeIds(cfg, address, log)
        #: how admin requests' host names become addresses (tests swap in their own)
        self.resolve = resolve
        #: handler failures answered UNKNOWN_SERVER_ERROR (a bug; the fuzz tests assert none)
        self.failures: list[str] = []

    # -- routing -----------------------------------------------------------------------------
    def maybe_handle(
        self, conn: Connection, frame: bytes, info: RequestInfo
    ) -> bytes | Deferred | None:
        """The response to send for a request the acceptor answers, or None to forward.

        Raises only `FrameError` (the connection is then closed with its reason): a request
        that cannot be read, as the broker hangs up on one. A readable request whose
        handling fails is answered UNKNOWN_SERVER_ERROR and the connection stays, as
        Kafka's `RequestHandlerHelper.handleError`.
        """
        if info.api_key not in ADMIN_KEYS:
            return None
        try:
            return self._route(conn, frame, info)
        except FrameError:
            raise
        except Exception as exc:  # hostile values must end only this connection, visibly
            self._admin_row(conn, info, "UNKNOWN_SERVER_ERROR", {"error": repr(exc)})
            raise FrameError("admin_error", f"cannot answer api {info.api_key}: {exc!r}") from exc

    def _route(self, conn: Connection, frame: bytes, info: RequestInfo) -> bytes | Deferred | None:
        if info.api_key == DESCRIBE_CLIENT_QUOTAS:
            req = decode_request(DescribeClientQuotasRequest, frame, info.api_version)
            check_nulls(req, DescribeClientQuotasRequest, info.api_version)
            types = [c.entity_type for c in req.components]
            if not types:  # "every entity": the broker's answer (see docs/acceptor.md)
                return self._unauthorized(conn, info, req) if not self.allowed(conn) else None
            handler: Callable[..., Any] = self._describe_client_quotas
        elif info.api_key == ALTER_CLIENT_QUOTAS:
            req = decode_request(AlterClientQuotasRequest, frame, info.api_version)
            check_nulls(req, AlterClientQuotasRequest, info.api_version)
            has_ip = any(e.entity_type == "ip" for entry in req.entries for e in entry.entity)
            only_request_pct = all(
                op.key == REQUEST_PERCENTAGE for entry in req.entries for op in entry.ops
            )
            if not has_ip and not only_request_pct:  # byte rates: the broker enforces them
                return self._unauthorized(conn, info, req) if not self.allowed(conn) else None
            handler = self._alter_client_quotas
        else:
            req = decode_request(IncrementalAlterConfigsRequest, frame, info.api_version)
            check_nulls(req, IncrementalAlterConfigsRequest, info.api_version)
            ours = any(
                r.resource_type == BROKER_RESOURCE
                and any(is_connection_limit_key(c.name) for c in r.configs)
                for r in req.resources
            )
            if not ours:
                return self._unauthorized(conn, info, req) if not self.allowed(conn) else None
            handler = self._incremental_alter_configs
        if not self.allowed(conn):
            return self._unauthorized(conn, info, req)
        if self.delegate is not None:
            self.delegate(conn, frame)
            return DEFERRED
        try:
            response = handler(conn, info, req)
        except Exception as exc:  # Kafka's handleError: an error answer, the connection stays
            self.failures.append(repr(exc))
            del self.failures[:-10]
            self._admin_row(conn, info, "UNKNOWN_SERVER_ERROR", {"error": repr(exc)})
            # ApiError.fromThrowable leaves UNKNOWN_SERVER_ERROR without a message, except
            # AlterClientQuotasRequest.getErrorResponse, which uses Errors' own text
            response = self._error_answer(
                info, req, UNKNOWN_SERVER_ERROR, None, UNKNOWN_SERVER_ERROR_MESSAGE
            )
        return encode_response(response, info.correlation_id)

    def allowed(self, conn: Connection) -> bool:
        cfg = self.cfg
        if cfg.admin_listeners is not None and conn.info.listener not in cfg.admin_listeners:
            return False
        try:
            addr = ipaddress.ip_address(conn.info.client_ip)
        except ValueError:
            return False
        return any(addr in net for net in cfg.admin_allowed)

    # -- history -----------------------------------------------------------------------------
    def _admin_row(
        self, conn: Connection, info: RequestInfo, reason: str, detail: dict[str, Any]
    ) -> None:
        self.rec.write(
            AcceptorAdmin(
                time.monotonic_ns(),
                conn.info,
                reason=reason,
                api_key=info.api_key,
                client_id=info.client_id,
                principal="ANONYMOUS",
                detail={"api_key": info.api_key, "api_version": info.api_version, **detail},
            )
        )

    # -- refusals ----------------------------------------------------------------------------
    def _unauthorized(self, conn: Connection, info: RequestInfo, req: Any) -> bytes:
        msg = _AUTH_MESSAGE.format(ip=conn.info.client_ip, listener=conn.info.listener)
        response = self._error_answer(info, req, CLUSTER_AUTHORIZATION_FAILED, msg, msg)
        self._admin_row(conn, info, "CLUSTER_AUTHORIZATION_FAILED", {"request": req.to_dict()})
        return encode_response(response, info.correlation_id)

    @staticmethod
    def _error_answer(
        info: RequestInfo, req: Any, code: int, message: str | None, entry_message: str | None
    ) -> Any:
        """The request's `getErrorResponse`: one error for the whole request (Describe),
        for every entry (AlterClientQuotas: `entry_message`), for every resource."""
        v = info.api_version
        if info.api_key == DESCRIBE_CLIENT_QUOTAS:
            return DescribeClientQuotasResponse[v](
                throttle_time_ms=0, error_code=code, error_message=message, entries=None
            )
        if info.api_key == ALTER_CLIENT_QUOTAS:
            return AlterClientQuotasResponse[v](
                throttle_time_ms=0,
                entries=[_entry_result(entry, code, entry_message) for entry in req.entries],
            )
        return IncrementalAlterConfigsResponse[v](
            throttle_time_ms=0,
            responses=[_resource_result(r, code, message) for r in req.resources],
        )

    # -- DescribeClientQuotas -------------------------------------------------------------------
    def _describe_client_quotas(self, conn: Connection, info: RequestInfo, req: Any) -> Any:
        R = DescribeClientQuotasResponse
        v = info.api_version
        error = validate_describe_filter(
            [(c.entity_type, c.match_type, c.match) for c in req.components]
        )
        if error is not None:
            return R[v](
                throttle_time_ms=0, error_code=error[0], error_message=error[1], entries=None
            )
        candidates: list[tuple[dict[str, str | None], dict[str, float]]] = []
        if "ip" in [c.entity_type for c in req.components]:
            for key, rate in sorted(self.dynamic.ip_quotas().items()):
                name = None if key == "default" else key
                candidates.append(({"ip": name}, {IP_RATE_KEY: float(rate)}))
        else:
            for q in self.dynamic.request_quotas.quotas():
                candidates.append((dict(q.entity), dict(q.values)))
        entries = []
        for entity, values in candidates:
            if not self._matches(entity, req.components, req.strict):
                continue
            entries.append(
                R.EntryData(
                    entity=[
                        R.EntryData.EntityData(entity_type=t, entity_name=n)
                        for t, n in entity.items()
                    ],
                    values=[
                        R.EntryData.ValueData(key=k, value=float(v))
                        for k, v in sorted(values.items())
                    ],
                )
            )
        return R[v](throttle_time_ms=0, error_code=0, error_message=None, entries=entries)

    def _matches(self, entity: dict[str, str | None], components: list[Any], strict: bool) -> bool:
        """`ClientQuotasImage.matches`: every component present and matching; strict =
        the entity has no other components."""
        if strict and len(components) != len(entity):
            return False
        for c in components:
            if c.entity_type not in entity:
                return False
            name = entity[c.entity_type]
            if c.match_type == MATCH_EXACT:
                # the name as stored, never resolved: Kafka's image keeps the entity name
                # the alteration gave ("localhost" matches "localhost", not "127.0.0.1")
                if c.match is None or name != c.match:
                    return False
            elif c.match_type == MATCH_DEFAULT and name is not None:
                return False
        return True

    # -- AlterClientQuotas ----------------------------------------------------------------------
    def _alter_client_quotas(self, conn: Connection, info: RequestInfo, req: Any) -> Any:
        R = AlterClientQuotasResponse
        results = []
        applied: list[dict[str, Any]] = []
        for entry in req.entries:
            entity = {e.entity_type: e.entity_name for e in entry.entity}
            ops = [(op.key, None if op.remove else float(op.value)) for op in entry.ops]
            error = validate_alteration(entity, ops, resolve=self.resolve)
            if error is None:
                for key, value in ops:
                    if value is not None and not math.isfinite(value):
                        error = (INVALID_REQUEST, f"Quota {key} must be a finite number")
                        break
            if error is None and "ip" not in entity:
                if any(key != REQUEST_PERCENTAGE for key, _ in ops):
                    error = (
                        INVALID_REQUEST,
                        "The acceptor answers ip and request_percentage quotas itself; send "
                        "byte-rate quota changes in a separate request",
                    )
                elif not req.validate_only:
                    user = _entity_name(entity, "user")
                    client = _entity_name(entity, "client-id")
                    for key, value in ops:
                        self.dynamic.set_request_quota(user, client, key, value)
                        applied.append({"entity": entity, "key": key, "value": value})
            elif error is None and not req.validate_only:
                # stored under the name as given (DescribeClientQuotas answers it back);
                # the acceptor enforces it on the address InetAddress.getByName gives
                name = entity["ip"]
                for key, value in ops:
                    if key == IP_RATE_KEY:
                        self.dynamic.set_ip_quota(name, None if value is None else round(value))
                        applied.append(
                            {
                                "ip": name or "default",
                                "rate": None if value is None else round(value),
                            }
                        )
            code, msg = error if error is not None else (0, None)
            results.append(_entry_result(entry, code, msg))
            self._admin_row(
                conn,
                info,
                _outcome(code, req.validate_only),
                {"entity": {k or "": v for k, v in entity.items()}, "ops": ops, "message": msg},
            )
        if applied:
            self._config_changed("alter_client_quotas")
        return R[info.api_version](throttle_time_ms=0, entries=results)

    # -- IncrementalAlterConfigs (BROKER resource, connection limits) ----------------------------
    def _incremental_alter_configs(self, conn: Connection, info: RequestInfo, req: Any) -> Any:
        R = IncrementalAlterConfigsResponse
        responses = []
        changed = False
        per_broker = any(
            r.resource_type == BROKER_RESOURCE and r.resource_name for r in req.resources
        )
        node_id = self.node_ids.of(conn.info.listener) if per_broker else None
        seen: dict[tuple[int, str], int] = {}
        for r in req.resources:
            seen[(r.resource_type, r.resource_name)] = (
                seen.get((r.resource_type, r.resource_name), 0) + 1
            )
        for r in req.resources:
            code, msg = 0, None
            changes: dict[str, str | None] = {}
            if seen[(r.resource_type, r.resource_name)] > 1:  # ConfigAdminManager.preprocess
                code, msg = INVALID_REQUEST, "Each resource must appear at most once."
            elif r.resource_type != BROKER_RESOURCE:
                code, msg = (
                    INVALID_REQUEST,
                    (
                        "The acceptor answers broker connection-limit changes itself; send other "
                        "resources in a separate request"
                    ),
                )
            else:
                error = check_broker_resource(
                    r.resource_name,
                    [(c.name, c.config_operation, c.value) for c in r.configs],
                    node_id,
                )
                if error is not None:
                    code, msg = error
                else:
                    changes = {
                        c.name: None if c.config_operation == OP_DELETE else c.value
                        for c in r.configs
                    }
            if code == 0:
                try:
                    # Kafka validates the changed layer's values, even where the other layer
                    # overrides them
                    apply_dynamic_update(self.dynamic.quota_cfg, changes)
                    if not req.validate_only:
                        self.dynamic.alter_broker_config(
                            changes, node=int(r.resource_name) if r.resource_name else None
                        )
                        changed = True
                except ConfigError as exc:
                    # what a Kafka 4.3 broker answers for a bad dynamic value (observed)
                    reason = exc.reason[:1].upper() + exc.reason[1:]
                    code, msg = (
                        INVALID_REQUEST,
                        f"Invalid value {exc.value} for configuration {exc.key}: {reason}",
                    )
            responses.append(_resource_result(r, code, msg))
            self._admin_row(
                conn,
                info,
                _outcome(code, req.validate_only),
                {"resource": r.resource_name, "changes": changes, "message": msg},
            )
        if changed:
            self._config_changed("incremental_alter_configs")
        return R[info.api_version](throttle_time_ms=0, responses=responses)
