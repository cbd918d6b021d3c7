"""Per-run SASL passwords, their masking everywhere, and the private folder's permissions."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from base.security import secrets
from base.security.sasl import (
    SaslUser,
    client_jaas,
    new_password,
    new_users,
    parse_client_jaas,
    scram_format_args,
    server_jaas,
)

pytestmark = pytest.mark.unit


def test_passwords_are_fresh_random_and_registered_for_masking() -> None:
    a, b = new_password(), new_password()
    assert a != b and len(a) >= 32
    assert set(a) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert {a, b} <= secrets.registered()
    assert secrets.mask(f"pw={a} and {b}.") == f"pw={secrets.MASK} and {secrets.MASK}."
    secrets.forget(a, b)
    assert secrets.mask(a) == a


def test_users_repr_never_shows_the_password() -> None:
    users = new_users(["alice", "bob"])
    assert [u.name for u in users] == ["alice", "bob"]
    assert users[0].password not in repr(users) and users[0].password not in str(users[0])
    with pytest.raises(ValueError, match="letters"):
        new_users(["a,b"])
    with pytest.raises(ValueError, match="unique"):
        new_users(["x", "x"])


def test_jaas_text_for_broker_and_client() -> None:
    users = (SaslUser("alice", "pw-alice-1"), SaslUser("bob", "pw-bob-22"))
    plain = server_jaas("PLAIN", users)
    assert plain == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' user_alice="pw-alice-1" user_bob="pw-bob-22";'
    )
    assert server_jaas("scram-sha-512", users) == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )
    client = client_jaas("SCRAM-SHA-256", users[0])
    assert client.startswith("org.apache.kafka.common.security.scram.ScramLoginModule required")
    assert parse_client_jaas(client) == ("alice", "pw-alice-1")
    with pytest.raises(ValueError, match="mechanism"):
        server_jaas("GSSAPI", users)
    with pytest.raises(ValueError, match="username"):
        parse_client_jaas("x required;")


def test_scram_format_args_cover_every_user_and_scram_mechanism_only() -> None:
    users = (SaslUser("alice", "pw-a-000"), SaslUser("bob", "pw-b-000"))
    args = scram_format_args(users, ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
    assert args == [
        "--add-scram", "SCRAM-SHA-256=[name=alice,password=pw-a-000]",
        "--add-scram", "SCRAM-SHA-256=[name=bob,password=pw-b-000]",
        "--add-scram", "SCRAM-SHA-512=[name=alice,password=pw-a-000]",
        "--add-scram", "SCRAM-SHA-512=[name=bob,password=pw-b-000]",
    ]  # fmt: skip
    assert scram_format_args(users, ["PLAIN"]) == []


def test_mask_properties_masks_secret_keys_and_registered_values() -> None:
    pw = new_password()
    props = {
        "listener.name.sasl_ssl.plain.sasl.jaas.config": 'x required user_a="...";',
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "y required;",
        "ssl.key.password": "k",
        "ssl.truststore.password": "t",
        "ssl.keystore.location": "/p/broker.pem",
        "note": f"leaked {pw} here",
    }
    masked = secrets.mask_properties(props)
    assert masked["listener.name.sasl_ssl.plain.sasl.jaas.config"] == secrets.MASK
    assert masked["ssl.key.password"] == masked["ssl.truststore.password"] == secrets.MASK
    assert masked["ssl.keystore.location"] == "/p/broker.pem"
    assert masked["note"] == f"leaked {secrets.MASK} here"
    assert not secrets.is_secret_key("ssl.keystore.type")
    secrets.forget(pw)


def test_mask_json_for_run_json() -> None:
    pw = new_password()
    doc = {
        "command": ["harness", "run", f"--password={pw}"],
        "properties": {"sasl.jaas.config": "anything", "sasl.mechanism": "PLAIN"},
        "n": 3,
        "nested": [{"text": f"a {pw} b"}],
    }
    out = json.dumps(secrets.mask_json(doc))
    assert pw not in out and "anything" not in out
    assert '"sasl.mechanism": "PLAIN"' in out and '"n": 3' in out
    secrets.forget(pw)


def test_logging_filter_masks_formatted_messages(caplog: pytest.LogCaptureFixture) -> None:
    pw = new_password()
    log = logging.getLogger("test.security.mask")
    log.addFilter(secrets.MaskingFilter())
    with caplog.at_level(logging.INFO, logger="test.security.mask"):
        log.info("login with %s failed", pw)
    assert pw not in caplog.text and secrets.MASK in caplog.text
    secrets.forget(pw)


def test_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="shorter"):
        secrets.register("abc")


def test_private_folder_is_0700_and_its_files_0600(tmp_path: Path) -> None:
    folder = secrets.private_dir(tmp_path / "run" / "private")
    (folder / "stale").write_text("old")
    folder = secrets.private_dir(folder)  # emptied when made again
    assert list(folder.iterdir()) == []
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    f = secrets.write_private(folder / "users.properties", "alice=x\n")
    assert stat.S_IMODE(f.stat().st_mode) == 0o600
    secrets.write_private(f, b"again")  # overwrites, still 0600
    assert f.read_bytes() == b"again" and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert secrets.leaks([tmp_path], ["again"]) == [f"{f}: secret #0"]
    secrets.remove_private(folder)
    assert not folder.exists()


def test_run_security_writes_every_file_privately(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from base.security.material import RunSecurity

    run = RunSecurity.generate(["alice"])
    files = run.write(tmp_path / "private")
    assert stat.S_IMODE(files.folder.stat().st_mode) == 0o700
    for path in files.folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert files.users.read_text().endswith(f"alice={run.user.password}\n")
    assert files.broker_keystore.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert secrets.leaks([files.folder], run.passwords()) == [f"{files.users}: secret #0"]
    assert run.user.password in secrets.registered()
    run.forget()
    assert run.user.password not in secrets.registered()
