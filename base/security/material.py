"""One run's security material: the TLS bundle and the SASL users, and the private files they
are written to.

``RunSecurity.generate()`` makes everything fresh (nothing is read from the repository or a
previous run); ``write(folder)`` lays it out in a 0700 folder, each file 0600:

============================  =====================================================  =======
file                          what                                                   secret
============================  =====================================================  =======
``ca.pem``                    the run's CA certificate (clients' and broker's trust)  no
``broker.pem``                broker keystore: PKCS#8 key, certificate, CA            key
``broker-expired.pem``        an expired broker keystore (bad-input tests)            key
``broker-wrong-host.pem``     a keystore for another host name (bad-input tests)      key
``acceptor.pem``              keystore for an acceptor terminating TLS (same CA)      key
``client.pem``                client keystore for mutual TLS: key, certificate, CA    key
``client-cert.pem``           the client certificate alone                            no
``client-key.pem``            the client's PKCS#8 key alone                           key
``users.properties``          ``name=password`` for every SASL user                   yes
============================  =====================================================  =======
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from base.security import secrets
from base.security.sasl import DEFAULT_USERS, SaslUser, new_users

if TYPE_CHECKING:
    from base.security.certs import TlsBundle


@dataclass(frozen=True)
class SecurityFiles:
    folder: Path
    ca: Path
    broker_keystore: Path
    expired_keystore: Path
    wrong_host_keystore: Path
    acceptor_keystore: Path
    client_keystore: Path
    client_cert: Path
    client_key: Path
    users: Path

    def server_keystore(self, which: str) -> Path:
        """The broker keystore for ``"good"``, ``"expired"`` or ``"wrong-host"``."""
        return {
            "good": self.broker_keystore,
            "expired": self.expired_keystore,
            "wrong-host": self.wrong_host_keystore,
        }[which]


def _missing_cryptography() -> RuntimeError:
    return RuntimeError(
        "secured listeners need the 'cryptography' package to make the run's certificates: "
        "pip install cryptography"
    )


@dataclass(frozen=True)
class RunSecurity:
    """A run's CA, certificates and SASL users (passwords registered for masking)."""

    bundle: TlsBundle  # imported lazily: it needs cryptography
    users: tuple[SaslUser, ...]

    @classmethod
    def generate(cls, user_names: Iterable[str] = DEFAULT_USERS) -> RunSecurity:
        try:
            from base.security.certs import TlsBundle
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise _missing_cryptography() from exc
        return cls(bundle=TlsBundle.generate(), users=new_users(user_names))

    @property
    def user(self) -> SaslUser:
        """The first user: the one each listener's client.properties logs in as."""
        return self.users[0]

    def passwords(self) -> list[str]:
        return [u.password for u in self.users]

    def write(self, folder: Path) -> SecurityFiles:
        """Lay the material out in ``folder`` (created 0700, emptied first; files 0600)."""
        bundle = self.bundle
        secrets.private_dir(folder)
        files = SecurityFiles(
            folder=folder,
            ca=folder / "ca.pem",
            broker_keystore=folder / "broker.pem",
            expired_keystore=folder / "broker-expired.pem",
            wrong_host_keystore=folder / "broker-wrong-host.pem",
            acceptor_keystore=folder / "acceptor.pem",
            client_keystore=folder / "client.pem",
            client_cert=folder / "client-cert.pem",
            client_key=folder / "client-key.pem",
            users=folder / "users.properties",
        )
        ca = bundle.ca
        secrets.write_private(files.ca, ca.cert_pem)
        secrets.write_private(files.broker_keystore, bundle.broker.keystore_pem(ca))
        secrets.write_private(files.expired_keystore, bundle.expired.keystore_pem(ca))
        secrets.write_private(files.wrong_host_keystore, bundle.wrong_host.keystore_pem(ca))
        secrets.write_private(files.acceptor_keystore, bundle.acceptor.keystore_pem(ca))
        secrets.write_private(files.client_keystore, bundle.client.keystore_pem(ca))
        secrets.write_private(files.client_cert, bundle.client.cert_pem + ca.cert_pem)
        secrets.write_private(files.client_key, bundle.client.key_pem)
        secrets.write_private(
            files.users,
            "# SASL users of this run (secret)\n"
            + "".join(f"{u.name}={u.password}\n" for u in self.users),
        )
        return files

    def forget(self) -> None:
        """Stop masking this run's passwords (call once nothing of the run is written anymore)."""
        secrets.forget(*self.passwords())
