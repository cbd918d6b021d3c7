"""The HAProxy config `loadprofiles.haproxy` writes: the PROXY header keyword per choice
(off: a plain relay, as `bench/acceptor.py --haproxy-path` runs it), and refusals."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from loadprofiles.haproxy import HAPROXY, HAProxyError, render_config

ARGS = {"upstream": ("127.0.0.1", 9093), "listen": ("127.0.0.1", 9100), "source_ip": "127.0.0.1"}


def server_line(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if line.strip().startswith("server"))


@pytest.mark.parametrize(
    ("choice", "keyword"), [("v1", "send-proxy"), ("v2", "send-proxy-v2"), ("off", None)]
)
def test_send_proxy_choice_sets_the_server_keyword(choice: str, keyword: str | None) -> None:
    line = server_line(render_config(send_proxy=choice, maxconn=100, **ARGS))  # type: ignore[arg-type]
    words = line.split()
    assert words[:3] == ["server", "acceptor", "127.0.0.1:9093"]
    assert words[3:] == ([keyword] if keyword else [])


def test_threads_splice_and_backlog_written_only_when_given() -> None:
    plain = render_config(send_proxy="off", maxconn=100, **ARGS)  # type: ignore[arg-type]
    assert "nbthread" not in plain and "splice" not in plain and "backlog" not in plain
    queued = render_config(send_proxy="off", maxconn=100, backlog=50, **ARGS)  # type: ignore[arg-type]
    assert "    bind 127.0.0.1:9100 backlog 50\n" in queued
    text = render_config(send_proxy="off", maxconn=100, threads=1, splice=True, **ARGS)  # type: ignore[arg-type]
    assert "    nbthread 1\n" in text
    assert "    mode tcp\n    option splice-auto\n" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"send_proxy": "v3", "maxconn": 100}, "send_proxy='v3'"),
        ({"send_proxy": "off", "maxconn": 0}, "maxconn=0"),
        ({"send_proxy": "off", "maxconn": 100, "threads": 0}, "threads=0"),
        ({"send_proxy": "off", "maxconn": 100, "backlog": 0}, "backlog=0"),
    ],
)
def test_bad_values_refused_with_their_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(HAProxyError, match=message.replace("[", r"\[")):
        render_config(**kwargs, **ARGS)  # type: ignore[arg-type]


@pytest.mark.skipif(not Path(HAPROXY).exists() and not shutil.which("haproxy"), reason="no haproxy")
def test_haproxy_accepts_the_plain_relay_config(tmp_path: Path) -> None:
    cfg = tmp_path / "haproxy.cfg"
    text = render_config(
        send_proxy="off",
        maxconn=100,
        threads=1,
        splice=True,
        backlog=50,
        **ARGS,  # type: ignore[arg-type]
    )
    cfg.write_text(text)
    check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, timeout=30)
    assert check.returncode == 0, check.stderr.decode(errors="replace")
