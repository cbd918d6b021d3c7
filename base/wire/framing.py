"""Kafka framing (4-byte big-endian size + payload) as a sans-IO decoder.

Why our own decoder rather than kafka-python's `KafkaProtocol`: that class is the *client*
side (it decodes responses to requests it sent); the acceptor sits in the middle and must
(a) cut the client's byte stream into request frames without decoding bodies, so it can
forward them byte-for-byte, and (b) refuse a frame by its size before buffering it, the way
the broker's `NetworkReceive` does with `socket.request.max.bytes`. Body encoding and
decoding is delegated to kafka-python's generated protocol classes. The fields every
request and response header starts with (the v1 request header, the correlation id) are
read in place with `struct` on every request, where kafka-python's decoder cost ~7x as much
(`parse_request_header`); fuzz tests hold the two equal.
"""

from __future__ import annotations

import codecs
import re
import struct
from dataclasses import dataclass
from typing import Any

_INT32 = struct.Struct(">i")  # the frame size; a response's correlation id


class FrameError(Exception):
    """The peer broke framing; ``reason`` is the history `close` reason.

    ``frames`` holds whole frames that arrived before the bad size in the same feed: the
    broker's selector would have served them one receive at a time before meeting it.
    """

    def __init__(self, reason: str, message: str, frames: list[bytes] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.frames: list[bytes] = frames or []


class FrameDecoder:
    """Cuts a byte stream into whole frames (size prefix included).

    ``feed(data)`` returns every frame completed by ``data``; a size that is negative
    (`bad_frame`) or above ``max_bytes`` (`frame_too_large`) raises `FrameError` as soon as
    the 4 size bytes are in, before any payload is buffered.

    Each byte is copied at most once on its way into a frame: the reads of an incomplete
    frame are held as they came and joined once it is complete, and a read that is
    exactly one frame is that frame (the usual 16 KB produce request or small response,
    and the last read of a megabyte fetch response, were copied three times through a
    growing buffer). `tests/unit/test_wire_framing.py` holds it to what cutting the whole
    stream read so far gives, however the reads fall.
    """

    __slots__ = ("_held", "_held_len", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: the reads of an incomplete frame, as they came (the first starts at its size)
        self._held: list[bytes] = []
        self._held_len = 0

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held (0 = at a frame boundary)."""
        return self._held_len

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        chunk = data if type(data) is bytes else bytes(data)
        held = self._held
        if not held:
            return self._cut(chunk)
        if chunk:
            held.append(chunk)
            self._held_len += len(chunk)
        if self._held_len < 4:
            return []
        if len(held[0]) < 4:  # the size field came in pieces: one piece from now on
            held[:] = [b"".join(held)]
        (size,) = _INT32.unpack_from(held[0])
        self._check(size, [])
        if self._held_len < 4 + size:
            return []
        joined = b"".join(held)
        held.clear()
        self._held_len = 0
        return self._cut(joined)

    def _check(self, size: int, frames: list[bytes]) -> None:
        """Refuse a bad size field (the whole frames before it travel with the error)."""
        if size < 0:
            raise FrameError("bad_frame", f"negative frame size {size}", frames)
        if size > self.max_bytes:
            raise FrameError(
                "frame_too_large",
                f"frame size {size} is larger than socket.request.max.bytes={self.max_bytes}",
                frames,
            )

    def _cut(self, data: bytes) -> list[bytes]:
        """The whole frames at the start of `data` (read at a frame boundary); what is left
        of an incomplete one is held, from its size field on (also after a bad size)."""
        frames: list[bytes] = []
        pos = 0
        end = len(data)
        try:
            while end - pos >= 4:
                (size,) = _INT32.unpack_from(data, pos)
                self._check(size, frames)
                stop = pos + 4 + size
                if stop > end:
                    break
                frames.append(data if pos == 0 and stop == end else data[pos:stop])
                pos = stop
        finally:
            if pos < end:
                self._held.append(data[pos:] if pos else data)
                self._held_len += end - pos
        return frames


@dataclass(frozen=True, slots=True)
class RequestInfo:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_HEADER_V1 = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CLIENT_ID_AT = 4 + _HEADER_V1.size  # after the frame's size and the fixed fields


def parse_request_header(frame: bytes) -> RequestInfo:
    """Read the request header fields shared by every header version.

    Header v1 (api_key, api_version, correlation_id, nullable client_id) is a prefix of v2
    (which only appends tagged fields), so reading it as v1 is right for every request.
    It reads what kafka-python's `RequestHeader.decode(flexible=False)` reads
    (`tests/fuzz/test_fuzz_framing.py` holds them equal on arbitrary bytes), from the
    frame in place: on every request, kafka-python's decoder and a copy of the whole frame
    cost 3.4 µs against 0.6 (a 16 KB produce request). A client id that is not UTF-8 is
    read the way the broker reads it (`java_utf8`), not refused: Kafka serves such clients.
    A negative client id length is a null client id, as in kafka-python and Kafka. Raises
    `FrameError("bad_frame")` when the payload is too short or the api key negative.
    """
    if len(frame) < _CLIENT_ID_AT:
        raise FrameError("bad_frame", "unreadable request header: too short")
    api_key, api_version, correlation_id, length = _HEADER_V1.unpack_from(frame, 4)
    client_id = None
    if length >= 0:
        raw = frame[_CLIENT_ID_AT : _CLIENT_ID_AT + length]
        if len(raw) < length:
            raise FrameError("bad_frame", f"unreadable request header: client id length {length}")
        client_id = java_utf8(raw)  # valid UTF-8 reads as UTF-8
    if api_key < 0:
        raise FrameError("bad_frame", f"bad api key {api_key}")
    return RequestInfo(api_key, api_version, correlation_id, client_id)


def java_utf8(data: bytes) -> str:
    """`new String(data, UTF_8)` as the broker's JVM does it (Kafka reads every string so).

    Malformed input becomes U+FFFD, one per maximal ill-formed subpart, which is what
    Python's `errors="replace"` does too, with one exception: Java decodes a 3-byte sequence
    by its shape and only then refuses a surrogate (ED A0..BF xx), so it replaces the
    whole shaped sequence (ED A0 80, or ED A0 alone when the third byte is missing or not a
    continuation) with a single U+FFFD where Python writes one per byte.
    """
    return data.decode("utf-8", errors=_JAVA_REPLACE)


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    obj, start = exc.object, exc.start
    end = exc.end
    if obj[start] == 0xED and start + 1 < len(obj) and 0xA0 <= obj[start + 1] <= 0xBF:
        end = start + (3 if start + 2 < len(obj) and obj[start + 2] & 0xC0 == 0x80 else 2)
    return "\ufffd", end


_JAVA_REPLACE = "harness-java-utf8"
codecs.register_error(_JAVA_REPLACE, _java_replace)


def correlation_id_of_response(frame: bytes) -> int:
    """Every response header version starts with the correlation id (read in place: a
    fetch response may be megabytes)."""
    if len(frame) < 8:
        raise FrameError("bad_frame", "unreadable response header: too short")
    return int(_INT32.unpack_from(frame, 4)[0])


def decode_request(request_class: Any, frame: bytes, api_version: int) -> Any:
    """Decode a whole request (header + body) with its kafka-python class, as sent.

    Nulls where the schema forbids them are decoded as None; `check_nulls` refuses those.
    """
    try:
        return request_class.decode(frame[4:], version=api_version, header=True)
    except Exception as exc:
        raise FrameError("bad_frame", f"unreadable {request_class.__name__}: {exc!r}") from exc


def check_nulls(request: Any, request_class: Any, api_version: int) -> None:
    """Kafka refuses a request with a null non-nullable array or string as unreadable
    ("non-nullable field ... was serialized as null"): `FrameError("bad_frame")`."""
    _check_nulls(request, request_class.json["fields"], api_version)


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _in_versions(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


def _check_nulls(obj: Any, fields: list[dict[str, Any]], version: int) -> None:
    for field in fields:
        if not _in_versions(field.get("versions"), version):
            continue
        kind = field["type"]
        name = _CAMEL.sub("_", field["name"]).lower()
        value = getattr(obj, name, None)
        if value is None:
            if (kind.startswith("[]") or kind in ("string", "bytes")) and not _in_versions(
                field.get("nullableVersions"), version
            ):
                raise FrameError(
                    "bad_frame", f"non-nullable field {field['name']} was serialized as null"
                )
            continue
        if kind.startswith("[]") and "fields" in field:
            for item in value:
                _check_nulls(item, field["fields"], version)


def encode_response(response: Any, correlation_id: int) -> bytes:
    """Frame a kafka-python response object for the wire with its correlation id."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))
