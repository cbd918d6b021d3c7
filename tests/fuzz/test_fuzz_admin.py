"""Fuzz the admin requests the acceptor decodes and answers itself.

Why: DescribeClientQuotas, AlterClientQuotas and IncrementalAlterConfigs are decoded and
acted on inside the connection's per-request step (`Connection._step`, from
`Connection.client_data`), which only turns `FrameError` into a `close` row with
that frame's reason; any other exception from `AdminHandler.maybe_handle` is a bug (it ends
the connection as `internal_error`, with no answer). So the property is: for any bytes, and for any
structurally valid request with hostile values (NaN, infinities, null names, unknown
entity types and operations), `maybe_handle` returns None (forward), or a framed response
of the right class and correlation id, or raises `FrameError` — nothing else.

The handler is the real one on a real (never started) `Acceptor`; only host resolution is
pinned to IP literals and ``localhost`` through `AdminHandler.resolve`, its injection
point, so no example waits on DNS.
"""

from __future__ import annotations

import io
import ipaddress
import math
import struct
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.api_header import ResponseHeader

from acceptor.config import parse_acceptor_config
from acceptor.connection import Connection
from acceptor.processor import Processor
from acceptor.recorder import ConnInfo
from acceptor.server import Acceptor
from base.wire.framing import FrameError, decode_request, parse_request_header

pytestmark = pytest.mark.unit
FUZZ = settings.get_profile("fuzz")  # registered in conftest.py; not loaded globally

REQUESTS: dict[int, tuple[Any, Any]] = {
    44: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    48: (DescribeClientQuotasRequest, DescribeClientQuotasResponse),
    49: (AlterClientQuotasRequest, AlterClientQuotasResponse),
}


def literal_resolver(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    return ipaddress.ip_address(host).compressed  # ValueError: "not a valid IP or host"


def new_connection(client_ip: str = "127.0.0.1") -> Connection:
    cfg = parse_acceptor_config(
        {
            "listeners": "CLIENT://127.0.0.1:0",
            "listener.name.client.upstream": "127.0.0.1:9",
            "metrics.port": "-1",
        }
    )
    acceptor = Acceptor(cfg)  # no history dir, no state dir: nothing touches the disk
    acceptor.admin.resolve = literal_resolver
    # a per-broker IncrementalAlterConfigs asks the upstream for its node.id: answer as an
    # unreachable upstream does (None), without a connect to 127.0.0.1:9 (no sockets here)
    acceptor.admin.node_ids._ask_node_id = lambda listener: None  # type: ignore[method-assign]
    proc = Processor(acceptor.conns, "CLIENT", 0, False)
    info = ConnInfo("CLIENT-fuzz-1", "CLIENT", client_ip, 40000, client_ip, 40000)
    return Connection(acceptor.conns, proc, info, b"", False, charges=None, clock=time.monotonic_ns)


def handle(conn: Connection, frame: bytes) -> bytes | None:
    """The pump's steps for one frame; returns the local response or None (forwarded)."""
    info = parse_request_header(frame)
    out = conn.host.admin.maybe_handle(conn, frame, info)
    # a handler failure is answered UNKNOWN_SERVER_ERROR (as Kafka): here it is a bug found
    assert not conn.host.admin.failures, conn.host.admin.failures
    if out is None:
        return None
    assert isinstance(out, bytes)
    (size,) = struct.unpack_from(">i", out)
    assert size == len(out) - 4
    header = ResponseHeader.decode(io.BytesIO(out[4:]), flexible=False)
    assert header.correlation_id == info.correlation_id
    _, response_class = REQUESTS[info.api_key]
    # the whole response decodes with Kafka's schema for the request's version
    response_class.decode(out[4:], version=info.api_version, header=True)
    return out


def encode(req: Any, correlation_id: int = 7, client_id: str | None = "fuzz") -> bytes:
    req.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(req.encode(header=True, framed=True))


# -- hostile field values ---------------------------------------------------------------------
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, 2.0**31, 2.0**63, 5.0]),
)
names = st.one_of(
    st.none(),
    st.sampled_from(["", "127.0.0.9", "::1", "localhost", "10.0.0.256", "0.0.0.0", "u", "c"]),
    st.text(max_size=20),
)
entity_types = st.one_of(
    st.sampled_from(["ip", "user", "client-id", ""]), st.none(), st.text(max_size=10)
)
quota_keys = st.one_of(
    st.sampled_from(
        [
            "connection_creation_rate",
            "request_percentage",
            "producer_byte_rate",
            "consumer_byte_rate",
            "controller_mutation_rate",
        ]
    ),
    st.none(),
    st.text(max_size=20),
)
config_names = st.one_of(
    st.sampled_from(
        [
            "max.connections",
            "max.connections.per.ip",
            "max.connections.per.ip.overrides",
            "max.connection.creation.rate",
            "listener.name.client.max.connections",
            "listener.name.client.max.connection.creation.rate",
            "listener.name.nope.max.connections",
            "listener.name..max.connections",
            "num.network.threads",
            "log.retention.ms",
        ]
    ),
    st.none(),
    st.text(max_size=30),
)
config_values = st.one_of(
    st.none(),
    st.sampled_from(["1", "0", "-1", "2147483648", "NaN", "1e3", " 5", "127.0.0.1:3", "a:1,b:x"]),
    st.integers(-(2**40), 2**40).map(str),
    st.text(max_size=20),
)
int8 = st.integers(-128, 127)
versions = st.integers(0, 1)


def maybe_null(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Non-nullable arrays still decode as None from a -1 (or compact 0) length."""
    return st.one_of(strategy, st.none())


A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest
I = IncrementalAlterConfigsRequest  # noqa: E741

alter_quotas = st.builds(
    lambda v, entries, validate: A[v](entries=entries, validate_only=validate),
    versions,
    maybe_null(
        st.lists(
            st.builds(
                lambda ents, ops: A.EntryData(entity=ents, ops=ops),
                maybe_null(
                    st.lists(
                        st.builds(
                            lambda t, n: A.EntryData.EntityData(entity_type=t, entity_name=n),
                            entity_types,
                            names,
                        ),
                        max_size=3,
                    )
                ),
                maybe_null(
                    st.lists(
                        st.builds(
                            lambda k, val, rm: A.EntryData.OpData(key=k, value=val, remove=rm),
                            quota_keys,
                            floats,
                            st.booleans(),
                        ),
                        max_size=3,
                    )
                ),
            ),
            max_size=3,
        )
    ),
    st.booleans(),
)
# entries that pass the entity/key checks, so the values reach the code that applies them
coherent_entries = st.one_of(
    st.builds(
        lambda n, val, rm: A.EntryData(
            entity=[A.EntryData.EntityData(entity_type="ip", entity_name=n)],
            ops=[A.EntryData.OpData(key="connection_creation_rate", value=val, remove=rm)],
        ),
        st.sampled_from([None, "127.0.0.9", "::1", "localhost"]),
        floats,
        st.booleans(),
    ),
    st.builds(
        lambda ents, key, val, rm: A.EntryData(
            entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in ents],
            ops=[A.EntryData.OpData(key=key, value=val, remove=rm)],
        ),
        st.sampled_from(
            [[("user", None)], [("client-id", "c")], [("user", "u"), ("client-id", None)]]
        ),
        st.sampled_from(["request_percentage", "producer_byte_rate"]),
        floats,
        st.booleans(),
    ),
)
coherent_alter_quotas = st.builds(
    lambda v, entries, validate: A[v](entries=entries, validate_only=validate),
    versions,
    st.lists(coherent_entries, min_size=1, max_size=2),
    st.booleans(),
)
describe_quotas = st.builds(
    lambda v, comps, strict: D[v](components=comps, strict=strict),
    versions,
    maybe_null(
        st.lists(
            st.builds(
                lambda t, mt, m: D.ComponentData(entity_type=t, match_type=mt, match=m),
                entity_types,
                int8,
                names,
            ),
            max_size=3,
        )
    ),
    st.booleans(),
)
alter_configs = st.builds(
    lambda v, resources, validate: I[v](resources=resources, validate_only=validate),
    versions,
    maybe_null(
        st.lists(
            st.builds(
                lambda rt, rn, cfgs: I.AlterConfigsResource(
                    resource_type=rt, resource_name=rn, configs=cfgs
                ),
                st.one_of(st.just(4), int8),
                st.one_of(st.just(""), names),
                maybe_null(
                    st.lists(
                        st.builds(
                            lambda n, op, val: I.AlterConfigsResource.AlterableConfig(
                                name=n, config_operation=op, value=val
                            ),
                            config_names,
                            st.one_of(st.sampled_from([0, 1, 2, 3]), int8),
                            config_values,
                        ),
                        max_size=3,
                    )
                ),
            ),
            max_size=3,
        )
    ),
    st.booleans(),
)


@given(
    req=st.one_of(alter_quotas, coherent_alter_quotas, describe_quotas, alter_configs),
    admin=st.booleans(),
)
@settings(FUZZ, max_examples=FUZZ.max_examples * 2)
def test_hostile_admin_requests_get_an_answer_or_frame_error(req: Any, admin: bool) -> None:
    """Semantically hostile but well-formed requests, from an allowed and a refused IP."""
    conn = new_connection("127.0.0.1" if admin else "192.0.2.1")
    frame = encode(req)
    try:
        handle(conn, frame)
    except FrameError as exc:
        assert exc.reason == "bad_frame"


@FUZZ
@given(
    api_key=st.sampled_from(sorted(REQUESTS)),
    version=st.integers(-2, 4),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    body=st.binary(max_size=200),
)
def test_arbitrary_admin_bodies_get_an_answer_or_frame_error(
    api_key: int, version: int, correlation_id: int, body: bytes
) -> None:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz" + body
    frame = struct.pack(">i", len(payload)) + payload
    conn = new_connection()
    try:
        handle(conn, frame)
    except FrameError as exc:
        assert exc.reason == "bad_frame"


@FUZZ
@given(
    req=st.one_of(alter_quotas, describe_quotas, alter_configs),
    cut=st.integers(0, 400),
)
def test_truncated_admin_requests_are_bad_frames(req: Any, cut: int) -> None:
    """A request cut short (its size field rewritten to match) never decodes by accident
    into something the handler acts on with missing fields."""
    frame = encode(req)
    payload = frame[4:]
    cut = min(cut, len(payload) - 1)
    short = struct.pack(">i", cut) + payload[:cut]
    conn = new_connection()
    try:
        handle(conn, short)
    except FrameError as exc:
        assert exc.reason == "bad_frame"


@FUZZ
@given(req=st.one_of(alter_quotas, describe_quotas, alter_configs))
def test_decode_round_trip(req: Any) -> None:
    """What kafka-python encodes, `decode_request` reads back field for field."""
    frame = encode(req)
    info = parse_request_header(frame)
    request_class, _ = REQUESTS[info.api_key]
    back = decode_request(request_class, frame, info.api_version)
    assert repr(back.to_dict()) == repr(req.to_dict())  # repr: NaN != NaN


# -- the findings, as plain regression tests (docs/hostile-input.md, "Findings") --------------
def _answered(req: Any) -> bytes | None:
    return handle(new_connection(), encode(req))


@pytest.mark.parametrize("client_ip", ["127.0.0.1", "192.0.2.1"], ids=["admin", "refused"])
def test_f1_null_config_name_in_incremental_alter_configs(client_ip: str) -> None:
    """F1: a null (length -1) config name decoded as None and `is_connection_limit_key`
    called None.split(): AttributeError in the pump, from any client, before the admin check.
    Now the name is a non-nullable string, so, as Kafka does, the request is refused as
    unreadable (`bad_frame`) before anything acts on it, whoever sends it."""
    req = I[1](
        resources=[
            I.AlterConfigsResource(
                resource_type=4,
                resource_name="",
                configs=[
                    I.AlterConfigsResource.AlterableConfig(name=None, config_operation=0, value="1")
                ],
            )
        ],
        validate_only=False,
    )
    with pytest.raises(FrameError) as err:
        handle(new_connection(client_ip), encode(req))
    assert err.value.reason == "bad_frame", str(err.value)
    assert "non-nullable field Name was serialized as null" in str(err.value)


@pytest.mark.parametrize(
    ("entity", "key"),
    [
        ([("ip", None)], "connection_creation_rate"),
        ([("ip", "127.0.0.9")], "connection_creation_rate"),
        ([("user", None)], "request_percentage"),
        ([("client-id", "c")], "request_percentage"),
    ],
)
def test_f2_nan_quota_value_gets_an_error_response(entity: list[tuple[str, Any]], key: str) -> None:
    """F2: NaN passes `validate_alteration` (every comparison with NaN is false), then
    `round(nan)` / `RequestQuotas.set_quota` raise ValueError in the pump: no response."""
    req = A[1](
        entries=[
            A.EntryData(
                entity=[A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[A.EntryData.OpData(key=key, value=math.nan, remove=False)],
            )
        ],
        validate_only=False,
    )
    out = _answered(req)
    assert out is not None
    resp = AlterClientQuotasResponse.decode(out[4:], version=1, header=True)
    assert resp.entries[0].error_code == 42  # INVALID_REQUEST, as for any other bad value


@pytest.mark.parametrize(
    "req",
    [
        D[1](components=None, strict=False),
        A[1](entries=None, validate_only=False),
        A[1](entries=[A.EntryData(entity=None, ops=[])], validate_only=False),
        I[1](resources=None, validate_only=False),
        I[1](
            resources=[I.AlterConfigsResource(resource_type=4, resource_name="", configs=None)],
            validate_only=False,
        ),
    ],
    ids=["describe_components", "alter_entries", "alter_entity", "iac_resources", "iac_configs"],
)
def test_f5_null_arrays_are_bad_frames(req: Any) -> None:
    """F5 (found by atheris): a non-nullable array sent as null decodes as None and the
    handler iterates it (TypeError). Kafka refuses such a request as unreadable
    ("non-nullable field ... was serialized as null") and closes the connection, which is
    what `bad_frame` means here; `admin_error` is the safety net catching a bug."""
    with pytest.raises(FrameError) as err:
        _answered(req)
    assert err.value.reason == "bad_frame", str(err.value)


@given(
    comps=st.lists(
        st.tuples(
            st.sampled_from(["user", "client-id", "ip", "topic", ""]),
            st.integers(-1, 3),
            st.one_of(st.none(), st.sampled_from(["alice", "127.0.0.1", ""])),
        ),
        max_size=4,
    )
)
def test_describe_filter_refuses_what_kafka_refuses(comps: list[tuple[str, int, Any]]) -> None:
    # ClientQuotasImage.describe: a repeated entity type, or SPECIFIED with a match string, is
    # never a successful (possibly empty) answer
    from base.quota.client_quota_admin import MATCH_SPECIFIED, validate_describe_filter

    types = [t for t, _, _ in comps]
    repeated = len(set(types)) != len(types)
    specified_with_match = any(m == MATCH_SPECIFIED and s is not None for _, m, s in comps)
    error = validate_describe_filter(comps)
    if repeated or specified_with_match:
        assert error is not None and error[0] in (35, 42)


@given(
    entity=st.sampled_from([{"ip": "127.0.0.1"}, {"ip": None}, {"user": "u"}, {"client-id": None}]),
    keys=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=4),
)
def test_removals_are_never_refused(entity: dict[str, str | None], keys: list[str]) -> None:
    # ClientQuotaControlManager.alterClientQuotaEntity does not validate a removal: any key,
    # set or not, of a valid entity is a successful removal (a no-op when unset)
    from base.quota.client_quota_admin import validate_alteration

    ops: list[tuple[str, float | None]] = [(k, None) for k in keys]
    assert validate_alteration(entity, ops, resolve=lambda h: h) is None


def test_java_entity_string_is_hashmap_order() -> None:
    # "user".hashCode() == 3599307 in Java; with capacity 4 "client-id" lands in bucket 0 and
    # "user" in bucket 1, so a HashMap prints client-id first whatever the insertion order
    # (the same order the real broker printed in test_duplicate_key_is_answered_as_by_the_broker)
    from base.quota.client_quota_admin import _java_string_hash, java_entity_string

    assert _java_string_hash("user") == 3599307
    for entity in ({"user": "u", "client-id": None}, {"client-id": None, "user": "u"}):
        assert java_entity_string(entity) == "ClientQuotaEntity(entries={client-id=null, user=u})"
    assert java_entity_string({"ip": "localhost"}) == "ClientQuotaEntity(entries={ip=localhost})"


@pytest.mark.parametrize("which", ["describe", "alter_quotas", "alter_configs"])
def test_a_failing_handler_answers_unknown_server_error(
    which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's handleError: a readable request whose handling throws gets the request's
    error response (UNKNOWN_SERVER_ERROR; a message only on AlterClientQuotas' entries) and
    the connection stays; the acceptor used to close it (`admin_error`)."""
    from kafka.protocol.admin import (
        AlterClientQuotasRequest,
        AlterClientQuotasResponse,
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
        IncrementalAlterConfigsResponse,
    )

    from base.quota.client_quota_admin import UNKNOWN_SERVER_ERROR_MESSAGE

    conn = new_connection()
    admin = conn.host.admin

    def boom(*_: Any) -> Any:
        raise RuntimeError("a bug")

    if which == "describe":
        monkeypatch.setattr(admin, "_describe_client_quotas", boom)
        req: Any = DescribeClientQuotasRequest[1](
            components=[DescribeClientQuotasRequest[1].ComponentData(
                entity_type="ip", match_type=1, match=None)],
            strict=False,
        )  # fmt: skip
        resp_class: Any = DescribeClientQuotasResponse
    elif which == "alter_quotas":
        monkeypatch.setattr(admin, "_alter_client_quotas", boom)
        A = AlterClientQuotasRequest[1]
        req = A(
            entries=[A.EntryData(
                entity=[A.EntryData.EntityData(entity_type="ip", entity_name="127.0.0.9")],
                ops=[A.EntryData.OpData(key="connection_creation_rate", value=5.0, remove=False)],
            )],
            validate_only=False,
        )  # fmt: skip
        resp_class = AlterClientQuotasResponse
    else:
        monkeypatch.setattr(admin, "_incremental_alter_configs", boom)
        req = I[1](
            resources=[I.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                I.AlterConfigsResource.AlterableConfig(
                    name="max.connections", config_operation=0, value="5")])],
            validate_only=False,
        )  # fmt: skip
        resp_class = IncrementalAlterConfigsResponse
    info = parse_request_header(encode(req))
    out = admin.maybe_handle(conn, encode(req), info)
    assert out is not None and len(admin.failures) == 1
    resp = resp_class.decode(out[4:], version=info.api_version, header=True)
    d = resp.to_dict()
    if which == "describe":
        assert (d["error_code"], d["error_message"], d["entries"]) == (-1, None, None)
    elif which == "alter_quotas":
        assert [(e["error_code"], e["error_message"]) for e in d["entries"]] == [
            (-1, UNKNOWN_SERVER_ERROR_MESSAGE)
        ]
    else:
        assert [(r["error_code"], r["error_message"]) for r in d["responses"]] == [(-1, None)]
