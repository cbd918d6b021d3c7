"""``java_get_by_name`` against what ``InetAddress.getByName`` answered on OpenJDK 17.0.15
(the JDK the broker runs on), one probe per row (``javac P.java; java P <text>...``)."""

from __future__ import annotations

import pytest

from base.quota.inet import java_get_by_name

REFUSED = None

#: text -> the address Java returned (its getHostAddress, compressed), or REFUSED
#: (UnknownHostException). Names other than "localhost" do not resolve in the fake lookup,
#: as in the probe's environment.
JAVA_17_0_15 = {
    "[::1]": "::1",
    "0x7f.0.0.1": REFUSED,
    "::ffff:1.2.3.4": "1.2.3.4",
    "::FFFF:1.2.3.4": "1.2.3.4",
    "::ffff:7f00:1": "127.0.0.1",
    "[::ffff:127.0.0.9]": "127.0.0.9",
    "::ffff:017.0.0.1": "17.0.0.1",
    "::ffff:1.2.3": REFUSED,
    "::ffff:1.2.3.4%1": REFUSED,
    "127.1": "127.0.0.1",
    "1.2.3": "1.2.0.3",
    "1.16777215": "1.255.255.255",
    "017.0.0.1": "17.0.0.1",
    "0177.0.0.1": "177.0.0.1",
    "08.0.0.1": "8.0.0.1",
    "127.0.0.01": "127.0.0.1",
    "2130706433": "127.0.0.1",
    "4294967295": "255.255.255.255",
    "4294967296": REFUSED,
    "0x7f": REFUSED,
    "1.2.3.0x4": REFUSED,
    "256.0.0.1": REFUSED,
    "[127.0.0.1]": REFUSED,
    "[::1": REFUSED,
    "127.0.0.1.": REFUSED,
    " 127.0.0.1": REFUSED,
    "127.0.0.1 ": REFUSED,
    "1.2.3.4%1": REFUSED,
    "1.2.3.4:5": REFUSED,
    "::1": "::1",
    "::": "::",
    "0:0:0:0:0:0:0:1": "::1",
    "::0.0.0.1": "::1",
    "::127.0.0.1": "::7f00:1",
    "1:2:3:4:5:6:7:8": "1:2:3:4:5:6:7:8",
    "1::2::3": REFUSED,
    "fe80::1%lo": REFUSED,
    "localhost": "127.0.0.1",
    "LOCALHOST": "127.0.0.1",
    "abc": REFUSED,
    "a.b": REFUSED,
}


def fake_lookup(host: str) -> str:
    if host.lower() == "localhost":
        return "127.0.0.1"
    raise OSError(f"{host}: Name or service not known")


@pytest.mark.parametrize(("text", "java"), sorted(JAVA_17_0_15.items()))
def test_same_answer_as_java(text: str, java: str | None) -> None:
    if java is REFUSED:
        with pytest.raises(OSError):
            java_get_by_name(text, fake_lookup)
    else:
        assert java_get_by_name(text, fake_lookup) == java


def test_only_names_reach_the_resolver() -> None:
    asked: list[str] = []

    def lookup(host: str) -> str:
        asked.append(host)
        return "10.0.0.1"

    for text in ("0x7f.0.0.1", "017.0.0.1", "[::1]", "::ffff:1.2.3.4", "[x]"):
        try:
            java_get_by_name(text, lookup)
        except OSError:
            pass
    assert asked == []
    assert java_get_by_name("broker-1.example", lookup) == "10.0.0.1"
    assert asked == ["broker-1.example"]
