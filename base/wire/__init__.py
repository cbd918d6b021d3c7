"""Sans-IO Kafka wire helpers: request/response framing and the PROXY protocol.

Nothing here touches a socket or a clock: bytes go in, values come out, so the acceptor's
I/O layer stays thin and the parsing is testable (and fuzzable) without a network.
"""

from base.wire.framing import (
    FrameDecoder,
    FrameError,
    RequestInfo,
    correlation_id_of_response,
    decode_request,
    encode_response,
    parse_request_header,
)
from base.wire.proxy import (
    ProxyError,
    ProxyHeader,
    ProxyHeaderReader,
    encode_v1,
    encode_v2,
)

__all__ = [
    "FrameDecoder",
    "FrameError",
    "ProxyError",
    "ProxyHeader",
    "ProxyHeaderReader",
    "RequestInfo",
    "correlation_id_of_response",
    "decode_request",
    "encode_response",
    "encode_v1",
    "encode_v2",
    "parse_request_header",
]
