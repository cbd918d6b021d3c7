"""A node's secured listeners on disk, for every launcher that starts brokers itself.

A broker with secured listeners reads its certificates, its SASL users' passwords and its
real ``server.properties`` from a run-private folder (``<workdir>/private``, 0700, files
0600); ``<workdir>/server.properties`` is a masked copy for reading. One
``client-*.properties`` per secured listener (and per extra SASL mechanism and per user)
tells the harness's clients how to log in. The SCRAM users are made when KRaft storage is
formatted, from an argument file in the same folder (never a command line ``/proc`` or
``docker inspect`` shows). The local launcher's JVM reads the folder directly; a container
mounts it at the same path, so every path written in it holds on both sides
(docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.localnet import LOOPBACK
from base.security import clientprops, secrets
from base.security.material import RunSecurity, SecurityFiles
from base.security.sasl import scram_format_args
from broker.config import (
    ListenerPlan,
    ListenerSpec,
    check_listen_host,
    check_secured_plan,
    normalise_listeners,
    parse_listener,
    render_properties,
    scram_mechanisms,
    security_properties,
)
from broker.errors import BrokerError

#: The run-private folder (0700) in the workdir of a broker with secured listeners.
PRIVATE_DIR = "private"


@dataclass(frozen=True)
class CheckedListeners:
    """A launch's listeners once checked: names in order, advertised addresses, the
    inter-broker listener, each listener's spec and the run's security material (None when
    every listener is PLAINTEXT)."""

    names: tuple[str, ...]
    advertised: dict[str, str]
    inter_broker_listener: str
    specs: dict[str, ListenerSpec]
    security: RunSecurity | None
    #: where the client-facing listeners listen (`check_listen_host`)
    host: str = LOOPBACK

    def plan(self, ports: Sequence[int], controller_port: int, **node: Any) -> ListenerPlan:
        """One node's plan: ``ports`` for the listeners in order, its controller port, and
        ``node`` (`ListenerPlan`'s node id and voters for a cluster's nodes, and its own
        advertised addresses when they are not the launch's)."""
        return ListenerPlan(
            names=self.names,
            ports=dict(zip(self.names, ports, strict=True)),
            controller_port=controller_port,
            inter_broker_listener=self.inter_broker_listener,
            specs=self.specs,
            host=self.host,
            **{"advertised": self.advertised, **node},
        )


def check_listeners(
    listeners: Sequence[str],
    advertised: Mapping[str, str] | None,
    inter_broker_listener: str | None,
    props: dict[str, str],
    *,
    sasl_users: Sequence[str],
    where: str = "",
    listen_host: str = LOOPBACK,
) -> CheckedListeners:
    """Parse ``listeners`` (`parse_listener`'s syntax), check a secured plan keeps PLAINTEXT
    first and between brokers, and make the run's certificates and users when any listener
    is secured. ``props`` loses the listener keys it carried (they are folded in).
    ``where``: a reason secured listeners cannot run here (refused naming it).
    ``listen_host``: where the client-facing listeners listen (`check_listen_host`)."""
    if isinstance(listeners, str):
        listeners = (listeners,)
    specs = [parse_listener(text) for text in listeners]
    names, adv, inter = normalise_listeners(
        [s.name for s in specs], advertised, inter_broker_listener, props
    )
    check_secured_plan(specs, inter)
    check_listen_host(listen_host, specs)
    secured = [s for s in specs if s.secured]
    if secured and where:
        raise BrokerError(f"config listeners {', '.join(map(str, secured))}: {where}")
    security: RunSecurity | None = None
    if secured:
        try:
            security = RunSecurity.generate(sasl_users)
        except (RuntimeError, ValueError) as exc:
            raise BrokerError(f"config security: {exc}") from exc
    props.pop("advertised.listeners", None)
    props.pop("inter.broker.listener.name", None)
    return CheckedListeners(names, adv, inter, {s.name: s for s in specs}, security, listen_host)


class NodeSecurity:
    """One node's private folder: its material, its real config, its client configs."""

    def __init__(self, security: RunSecurity, folder: Path) -> None:
        self.security = security
        self.folder = folder
        #: the broker reads this one; the workdir keeps a masked copy
        self.server_config = folder / "server.properties"
        #: the storage format's output when it makes SCRAM users (it prints their records)
        self.format_log = folder / "format.log"
        #: file names of the private material, once written (`properties`)
        self.files: SecurityFiles | None = None

    def properties(self, plan: ListenerPlan, base: Mapping[str, str]) -> dict[str, str]:
        """Write fresh material and return the secured listeners' keys; ``base`` wins."""
        files = self.files = self.security.write(self.folder)
        keystores = {w: str(files.server_keystore(w)) for w in ("good", "expired", "wrong-host")}
        derived = security_properties(
            plan.secured,
            users=self.security.users,
            truststore=str(files.ca),
            keystores=keystores,
        )
        return {**derived, **base}

    def write_config(self, props: Mapping[str, str], masked: Path) -> Path:
        """The real server.properties in the folder and a masked copy at ``masked``."""
        secrets.write_private(self.server_config, render_properties(props))
        masked.write_text(
            render_properties(secrets.mask_properties(props)).replace(
                "# Generated by broker;",
                f"# Secrets masked; the broker reads {self.server_config}.\n# Generated by broker;",
            )
        )
        return self.server_config

    def format_args(self, plan: ListenerPlan) -> list[str]:
        """StorageTool's ``--add-scram`` arguments for the run's users (secret)."""
        return scram_format_args(self.security.users, scram_mechanisms(plan.secured))

    def write_format_args(self, command: Sequence[str], plan: ListenerPlan) -> Path | None:
        """``command`` and the SCRAM arguments, one a line, in a private JVM argument file
        (``java @file``); None when no listener uses SCRAM. No argument holds a space or a
        quote (passwords are URL-safe), so the JVM reads it back unchanged."""
        scram = self.format_args(plan)
        if not scram:
            return None
        return secrets.write_private(self.folder / "format.args", "\n".join([*command, *scram]))

    def entrypoint_env(self, cluster_id: str, plan: ListenerPlan) -> dict[str, str]:
        """The Kafka image's entrypoint variables (images/kafka-entrypoint.sh) for a container
        that mounts this folder at its own path: the real config (`write_config` first), and
        with SCRAM users the format's argument file and where its secret output goes. Paths
        only: the environment is visible to anyone with the Docker engine."""
        env = {"HARNESS_SERVER_PROPERTIES": str(self.server_config)}
        command = ["kafka.tools.StorageTool", "format", "-t", cluster_id]
        args = self.write_format_args(
            [*command, "-c", str(self.server_config), "--ignore-formatted"], plan
        )
        if args is not None:
            env["HARNESS_FORMAT_ARGS"] = str(args)
            env["HARNESS_FORMAT_LOG"] = str(self.format_log)
        return env

    def client_configs(self, plan: ListenerPlan, address: Callable[[str], str]) -> dict[str, Path]:
        """One client.properties per secured listener (``NAME``), per extra SASL mechanism
        (``NAME:MECH``) and per SASL user (``NAME@user``, the listener's first mechanism).
        ``address(listener)``: where clients go (the advertised address if any)."""
        assert self.files is not None, "properties() writes the material first"
        files, first = self.files, self.security.user
        configs: dict[str, Path] = {}
        for spec in plan.secured:
            mechanisms: tuple[str | None, ...] = spec.mechanisms or (None,)
            logins = [(i, mech, first, "") for i, mech in enumerate(mechanisms)]
            if spec.mechanisms:
                logins += [(-1, mechanisms[0], u, f"-{u.name}") for u in self.security.users]
            for i, mech, user, suffix in logins:
                props = clientprops.client_properties(
                    spec.protocol,
                    bootstrap=plan.advertised.get(spec.name, address(spec.name)),
                    mechanism=mech,
                    user=user if mech else None,
                    truststore=files.ca if spec.tls else None,
                    keystore=files.client_keystore if spec.client_auth != "none" else None,
                )
                stem = f"client-{spec.name.lower()}" + (
                    f"-{mech.lower()}" if i > 0 and mech else ""
                )
                path = secrets.write_private(
                    files.folder / f"{stem}{suffix}.properties",
                    clientprops.render(props, f"Kafka client config for listener {spec} (secret)"),
                )
                if i == 0:
                    configs[spec.name] = path
                if i >= 0 and mech is not None:
                    configs[f"{spec.name}:{mech}"] = path
                if i < 0:
                    configs[f"{spec.name}@{user.name}"] = path
        return configs

    def remove(self) -> None:
        secrets.remove_private(self.folder)
