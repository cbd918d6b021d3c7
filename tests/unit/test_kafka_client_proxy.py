"""PROXY protocol headers the generator sends (spec vectors, bad input)."""

from __future__ import annotations

import struct

import pytest

from loadprofiles.proxy_header import V2_SIGNATURE, ProxyHeaderError, encode


def test_v1_is_the_spec_text_line() -> None:
    assert encode("v1", "127.0.1.7", 40000, "127.0.0.1", 9092) == (
        b"PROXY TCP4 127.0.1.7 127.0.0.1 40000 9092\r\n"
    )


def test_v2_is_signature_command_family_length_and_addresses() -> None:
    header = encode("v2", "127.0.1.7", 40000, "127.0.0.1", 9092)
    assert header[:12] == V2_SIGNATURE == b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a"
    ver_cmd, family, length = struct.unpack("!BBH", header[12:16])
    assert (ver_cmd, family, length) == (0x21, 0x11, 12) and len(header) == 28
    assert header[16:20] == bytes([127, 0, 1, 7]) and header[20:24] == bytes([127, 0, 0, 1])
    assert struct.unpack("!HH", header[24:28]) == (40000, 9092)


def test_off_sends_nothing() -> None:
    assert encode("off", "127.0.0.1", 1, "127.0.0.1", 2) == b""


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("v3", "127.0.0.1", 1, "127.0.0.1", 2), "proxy-protocol='v3'"),
        (("v1", "::1", 1, "127.0.0.1", 2), "src_ip='::1'"),
        (("v2", "127.0.0.1", 70000, "127.0.0.1", 2), "src_port=70000"),
    ],
)
def test_bad_input_names_the_field(args: tuple[str, str, int, str, int], fragment: str) -> None:
    with pytest.raises(ProxyHeaderError, match=fragment.replace("[", r"\[")):
        encode(*args)
