"""The secured broker's files and its storage format, without a JVM: SCRAM passwords reach
Kafka's StorageTool only through a private argument file, its output stays private, and the
files outside the private folder are masked."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cryptography", reason="the cryptography package makes the certificates")

from base.security import clientprops, secrets
from base.security.material import RunSecurity
from broker.artifacts import Artifacts
from broker.config import (
    ListenerPlan,
    parse_listener,
    render_properties,
    server_properties,
)
from broker.errors import BrokerError
from broker.local import LocalBroker

pytestmark = pytest.mark.unit


def _broker(tmp_path: Path) -> LocalBroker:
    specs = {
        s.name: s
        for s in map(
            parse_listener,
            ("PLAINTEXT", "SASL_SSL=SASL_SSL:SCRAM-SHA-512,PLAIN", "MTLS=SSL:mtls"),
        )
    }
    plan = ListenerPlan(
        names=tuple(specs),
        ports={"PLAINTEXT": 1, "SASL_SSL": 2, "MTLS": 3},
        controller_port=4,
        advertised={"MTLS": "127.0.0.1:19093"},
        inter_broker_listener="PLAINTEXT",
        specs=specs,
    )
    workdir = tmp_path / "wd"
    workdir.mkdir()
    return LocalBroker(
        java=Path("/usr/bin/java"),
        artifacts=Artifacts("4.3.1", tmp_path, (tmp_path / "a.jar",), False),
        plan=plan,
        workdir=workdir,
        temp_workdir=False,
        ready_timeout_s=1,
        progress=lambda _: None,
        security=RunSecurity.generate(["alice", "bob"]),
    )


def test_files_are_private_and_the_dump_beside_broker_log_is_masked(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    assert broker.security is not None and broker.private_dir is not None
    props = broker._security_properties()
    real = broker.private_dir / "server.properties"
    full = server_properties(broker.plan, "/d", props)
    secrets.write_private(real, render_properties(full))
    assert broker._secured is not None  # what launch() does after writing the config
    broker.client_configs = broker._secured.client_configs(broker.plan, broker.address)
    assert stat.S_IMODE(broker.private_dir.stat().st_mode) == 0o700
    assert set(broker.client_configs) == {
        "SASL_SSL",
        "SASL_SSL:SCRAM-SHA-512",
        "SASL_SSL:PLAIN",
        "MTLS",
        *(f"SASL_SSL@{u.name}" for u in broker.security.users),  # each user's own login
    }
    bob = clientprops.read(broker.client_configs["SASL_SSL@bob"])
    assert 'username="bob"' in bob["sasl.jaas.config"] and bob["sasl.mechanism"] == "SCRAM-SHA-512"
    plain = clientprops.read(broker.client_configs["SASL_SSL:PLAIN"])
    assert plain["sasl.mechanism"] == "PLAIN"
    assert plain["bootstrap.servers"] == "127.0.0.1:2"
    mtls = clientprops.read(broker.client_configs["MTLS"])
    assert mtls["ssl.keystore.location"] == str(broker.private_dir / "client.pem")
    assert mtls["bootstrap.servers"] == "127.0.0.1:19093"  # advertised: where clients go
    passwords = broker.security.passwords()
    assert all(p in real.read_text() for p in passwords)
    masked = render_properties(secrets.mask_properties(full))
    assert not any(p in masked for p in passwords)
    assert secrets.leaks([broker.private_dir], passwords)  # they are there, and only there


def test_scram_passwords_reach_the_storage_tool_only_in_a_private_argument_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _broker(tmp_path)
    assert broker.security is not None and broker.private_dir is not None
    broker._security_properties()  # writes the private folder, as start() does
    seen: dict[str, Any] = {}

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        argfile = Path(next(a for a in cmd if a.startswith("@"))[1:])
        seen["cmd"] = cmd
        seen["argfile"] = argfile
        seen["mode"] = stat.S_IMODE(argfile.stat().st_mode)
        seen["args"] = argfile.read_text().splitlines()
        seen["stdout"] = kwargs["stdout"].name
        kwargs["stdout"].write(b"UserScramCredentialRecord(storedKey=...)\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr("broker.local.subprocess.run", fake_run)
    broker._format()
    passwords = broker.security.passwords()
    assert not any(p in " ".join(seen["cmd"]) for p in passwords)  # nothing /proc could show
    assert seen["argfile"].parent == broker.private_dir and seen["mode"] == 0o600
    assert not seen["argfile"].exists()  # deleted after the format
    args = seen["args"]
    assert args[:2] == ["kafka.tools.StorageTool", "format"]
    assert args.count("--add-scram") == 2  # SCRAM-SHA-512 for alice and bob; PLAIN needs none
    assert f"SCRAM-SHA-512=[name=alice,password={passwords[0]}]" in args
    assert seen["stdout"] == str(broker.private_dir / "format.log")
    assert broker.log_path is not None
    assert "storedKey" not in broker.log_path.read_text()


def test_a_failed_format_is_reported_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = _broker(tmp_path)
    assert broker.security is not None
    broker._security_properties()
    password = broker.security.passwords()[0]

    def failing_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        kwargs["stdout"].write(f"bad --add-scram [password={password}]\n".encode())
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr("broker.local.subprocess.run", failing_run)
    with pytest.raises(BrokerError, match="StorageTool format exited 1") as info:
        broker._format()
    assert password not in str(info.value) and secrets.MASK in str(info.value)
