"""One reader of Java .properties text (base.javaprops) for the acceptor's file and
Kafka's client files."""

from __future__ import annotations

from pathlib import Path

import pytest

from base import javaprops

pytestmark = pytest.mark.unit


def test_separators_comments_continuations_and_escapes() -> None:
    text = "# c\n! c2\na = 1\nb: 2\nc=x\\\n  y\nd=C:\\\\path\ne f\ng=\nh = a=b\n"
    assert javaprops.parse(text) == {
        "a": "1",
        "b": "2",
        "c": "xy",
        "d": "C:\\path",
        "e": "f",
        "g": "",
        "h": "a=b",
    }


@pytest.mark.parametrize(
    "text, where",
    [("a=1\nnovalue\n", "line 2: 'novalue'"), ("a=1\nb=x\\\n", "line 2: continuation")],
)
def test_a_malformed_line_is_refused_naming_it(text: str, where: str) -> None:
    with pytest.raises(ValueError, match=where):
        javaprops.parse(text, "f.properties")


def test_the_acceptor_and_the_client_files_read_alike(tmp_path: Path) -> None:
    from acceptor.config import read_properties
    from base.quota.config import ConfigError
    from base.security import clientprops

    f = tmp_path / "x.properties"
    f.write_text("security.protocol = SASL_SSL\nsasl.mechanism: PLAIN\nk=a\\\\b\n")
    assert read_properties(f) == clientprops.read(f) == javaprops.read(f)
    f.write_text("listeners=CLIENT://127.0.0.1:0\njunk\n")
    with pytest.raises(ConfigError) as err:
        read_properties(f)
    assert "line 2: 'junk'" in err.value.reason and str(f) in err.value.value
