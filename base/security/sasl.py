"""SASL users with per-run random passwords, and the JAAS and SCRAM text Kafka reads (no I/O).

Passwords come from `secrets.token_urlsafe` (32 characters of ``A-Za-z0-9_-``: nothing JAAS,
Kafka's SCRAM parser or a properties file would need escaped) and are registered with
`base.security.secrets` the moment they are made, so every masked output hides them.
"""

from __future__ import annotations

import re
import secrets as _random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from base.security import secrets

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)

#: The users a secured broker gets unless told otherwise (two, for per-user quota scenarios).
DEFAULT_USERS = ("alice", "bob")

#: SCRAM names with ``,`` or ``=`` need escaping that kafka-python gets wrong; keep names plain.
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class SaslUser:
    """A user and its password; the password never shows in ``repr``."""

    name: str
    password: str = field(repr=False)


def new_password() -> str:
    """A fresh random password (192 bits), registered for masking."""
    password = _random.token_urlsafe(24)
    secrets.register(password)
    return password


def check_mechanism(mechanism: str) -> str:
    mech = mechanism.strip().upper()
    if mech not in MECHANISMS:
        raise ValueError(f"SASL mechanism {mechanism!r}: expected one of {', '.join(MECHANISMS)}")
    return mech


def new_users(names: Iterable[str] = DEFAULT_USERS) -> tuple[SaslUser, ...]:
    """One `SaslUser` per name, each with a fresh password."""
    users = []
    for name in names:
        if not _USER_NAME.match(name):
            raise ValueError(f"SASL user {name!r}: use letters, digits, '_', '.', '-' (at most 64)")
        users.append(SaslUser(name, new_password()))
    if len({u.name for u in users}) != len(users):
        raise ValueError(f"SASL users {[u.name for u in users]}: names must be unique")
    if not users:
        raise ValueError("SASL users: at least one is needed")
    return tuple(users)


def server_jaas(mechanism: str, users: Sequence[SaslUser]) -> str:
    """The broker's ``listener.name.<l>.<mechanism>.sasl.jaas.config`` value.

    PLAIN lists every user and password (``user_<name>="<password>"``); SCRAM checks against
    the credentials in the metadata log, so its module takes no options.
    """
    if check_mechanism(mechanism) == PLAIN:
        options = "".join(f' user_{u.name}="{u.password}"' for u in users)
        return f"{PLAIN_LOGIN_MODULE} required{options};"
    return f"{SCRAM_LOGIN_MODULE} required;"


def client_jaas(mechanism: str, user: SaslUser) -> str:
    """A client's ``sasl.jaas.config`` for ``user``."""
    module = PLAIN_LOGIN_MODULE if check_mechanism(mechanism) == PLAIN else SCRAM_LOGIN_MODULE
    return f'{module} required username="{user.name}" password="{user.password}";'


def scram_format_args(users: Sequence[SaslUser], mechanisms: Iterable[str]) -> list[str]:
    """``kafka-storage format`` arguments creating every user for every SCRAM mechanism.

    Secret: they carry the passwords. Pass them to the JVM in a private argument file, never
    on a command line others can read in ``/proc``.
    """
    args: list[str] = []
    for mech in sorted({check_mechanism(m) for m in mechanisms} & set(SCRAM_MECHANISMS)):
        for user in users:
            args += ["--add-scram", f"{mech}=[name={user.name},password={user.password}]"]
    return args


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_client_jaas(value: str) -> tuple[str, str]:
    """(username, password) of a client ``sasl.jaas.config`` (PLAIN or SCRAM login module)."""
    options = dict(_JAAS_OPTION.findall(value))
    if "username" not in options or "password" not in options:
        raise ValueError(
            "sasl.jaas.config: expected a PlainLoginModule or ScramLoginModule with "
            'username="..." and password="..."'
        )
    return options["username"], options["password"]
