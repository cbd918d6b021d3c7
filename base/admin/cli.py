"""Describe/alter client quotas and broker connection limits, with kafka-configs' flags.

  harness quotas --bootstrap-server H:P --describe --entity-type ips
  harness quotas --bootstrap-server H:P --alter --ip 127.0.0.9 \
      --add-config connection_creation_rate=5
  harness quotas --bootstrap-server H:P --alter --ip-defaults \
      --delete-config connection_creation_rate
  harness quotas --bootstrap-server H:P --alter --entity-type brokers --entity-default \
      --add-config max.connections=100
  harness quotas --bootstrap-server H:P --alter --user u --client-defaults \
      --add-config request_percentage=200

Works against the acceptor and against a real broker (Kafka's admin APIs only).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

TYPE_ALIASES = {"ips": "ip", "users": "user", "clients": "client-id", "brokers": "broker"}
IP_KEYS = ("connection_creation_rate",)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list quotas of the entity")
    action.add_argument("--alter", action="store_true", help="add/delete configs of the entity")
    parser.add_argument("--add-config", metavar="K=V[,K=V]", help="configs to set")
    parser.add_argument("--delete-config", metavar="K[,K]", help="configs to delete")
    parser.add_argument(
        "--entity-type",
        action="append",
        default=[],
        choices=sorted(TYPE_ALIASES),
        help="ips, users, clients or brokers (users and clients may be combined)",
    )
    parser.add_argument(
        "--entity-name", action="append", default=[], help="name for the preceding --entity-type"
    )
    parser.add_argument(
        "--entity-default",
        action="append_const",
        const=True,
        default=[],
        dest="entity_default",
        help="the default entity of the preceding --entity-type",
    )
    parser.add_argument("--ip", help="the IP address (same as --entity-type ips --entity-name IP)")
    parser.add_argument(
        "--ip-defaults", action="store_true", help="the config defaults for all IPs"
    )
    parser.add_argument("--user", help="the user's principal name")
    parser.add_argument(
        "--user-defaults", action="store_true", help="the config defaults for all users"
    )
    parser.add_argument("--client", help="the client id")
    parser.add_argument(
        "--client-defaults", action="store_true", help="the config defaults for all clients"
    )
    parser.add_argument("--command-timeout", type=float, default=15.0, help="seconds per request")


@dataclass
class Target:
    #: entity type -> name ("" unset: every entity of the type; None: the default entity)
    entity: dict[str, str | None] = field(default_factory=dict)
    any_name: set[str] = field(default_factory=set)


class UsageError(Exception):
    pass


def _target(args: argparse.Namespace) -> Target:
    t = Target()
    names = list(args.entity_name)
    defaults = len(args.entity_default)
    for raw in args.entity_type:
        etype = TYPE_ALIASES[raw]
        if names:
            t.entity[etype] = names.pop(0)
        elif defaults:
            defaults -= 1
            t.entity[etype] = None
        else:
            t.any_name.add(etype)
    if names or defaults:
        raise UsageError("each --entity-name/--entity-default needs an --entity-type before it")
    for flag, etype, default_flag in (
        (args.ip, "ip", args.ip_defaults),
        (args.user, "user", args.user_defaults),
        (args.client, "client-id", args.client_defaults),
    ):
        if flag is not None and default_flag:
            raise UsageError(f"give either a name or the defaults for {etype}, not both")
        if flag is not None:
            t.entity[etype] = flag
        elif default_flag:
            t.entity[etype] = None
    types = set(t.entity) | t.any_name
    if not types:
        raise UsageError("give an entity: --ip/--ip-defaults, --user, --client or --entity-type")
    if len(types) > 1 and not types <= {"user", "client-id"}:
        raise UsageError("only 'users' and 'clients' may be combined as entity types")
    return t


def _describe_entity_text(entity: dict[str, str | None]) -> str:
    parts = []
    for etype, name in entity.items():
        label = "user-principal" if etype == "user" else etype
        parts.append(f"the default {label}" if name is None else f"{label} '{name}'")
    return ", ".join(parts)


def _parse_add(raw: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if not raw:
        return out
    for item in raw.split(","):
        if "=" not in item:
            raise UsageError(f"--add-config {raw!r}: expected k=v[,k=v]")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from base.admin.client import (
        AdminError,
        alter_broker_config,
        alter_client_quota,
        component,
        describe_client_quotas,
    )

    kw = {"timeout": args.command_timeout}
    try:
        target = _target(args)
        add = _parse_add(args.add_config)
        delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        boot = args.bootstrap_server
        if "broker" in target.entity or "broker" in target.any_name:
            if args.describe:
                raise UsageError(
                    "describe of broker configs: use kafka-configs "
                    "(DescribeConfigs is forwarded to the broker)"
                )
            if not add and not delete:
                raise UsageError("--alter needs --add-config and/or --delete-config")
            name = target.entity.get("broker")
            if "broker" in target.any_name:
                raise UsageError("--alter of brokers needs --entity-name ID or --entity-default")
            changes: dict[str, str | None] = dict(add)
            changes.update(dict.fromkeys(delete))
            alter_broker_config(boot, changes, broker=name or "", **kw)
            print(
                "Completed updating default config for brokers in the cluster."
                if name is None
                else f"Completed updating config for broker {name}."
            )
            return 0
        if args.describe:
            comps = [
                component(t, n if n is not None else "default") for t, n in target.entity.items()
            ]
            comps += [component(t, None) for t in sorted(target.any_name)]
            rows = describe_client_quotas(boot, comps, strict=not target.any_name, **kw)
            for entity, values in rows:
                shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                print(f"Quota configs for {_describe_entity_text(entity)} are {shown}")
            return 0
        if target.any_name:
            raise UsageError(
                "--alter needs --entity-name or --entity-default for every entity type"
            )
        if not add and not delete:
            raise UsageError("--alter needs --add-config and/or --delete-config")
        if "ip" in target.entity:
            bad = sorted(k for k in list(add) + delete if k not in IP_KEYS)
            if bad:
                raise UsageError(
                    "Only connection quota configs can be added for 'ips' using "
                    "--bootstrap-server. "
                    f"Unexpected config names: {', '.join(bad)}"
                )
        if delete:
            comps = [
                component(t, n if n is not None else "default") for t, n in target.entity.items()
            ]
            current: dict[str, float] = {}
            for _, values in describe_client_quotas(boot, comps, strict=True, **kw):
                current.update(values)
            missing = [k for k in delete if k not in current]
            if missing:
                raise UsageError(f"Invalid config(s): {', '.join(missing)}")
        ops: dict[str, float | None] = {}
        for k, v in add.items():
            try:
                ops[k] = float(v)
            except ValueError:
                raise UsageError(f"--add-config {k}={v}: not a number") from None
        ops.update(dict.fromkeys(delete))
        alter_client_quota(boot, target.entity, ops, **kw)
        if len(target.entity) == 1:
            ((etype, name),) = target.entity.items()
            plural = {"ip": "ips", "user": "users", "client-id": "clients"}[etype]
            single = "client" if etype == "client-id" else etype
            print(
                f"Completed updating default config for {plural} in the cluster."
                if name is None
                else f"Completed updating config for {single} {name}."
            )
        else:
            print(f"Completed updating config for {_describe_entity_text(target.entity)}.")
        return 0
    except UsageError as exc:
        print(f"harness quotas: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"harness quotas: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"harness quotas: cannot reach {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
