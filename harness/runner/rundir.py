"""The run directory and its run.json (the contract the analysis reads first).

run.json is rewritten atomically at start (so a crashed run is still analysable
and says what it was) and again at the end with ``ended_at`` and ``interrupted``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from base.history.clocks import host_clock
from harness.runner.scenario import Scenario


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(scenario: str, target: str, now: dt.datetime | None = None) -> str:
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario}-{target}-{stamp}-{secrets.token_hex(2)}"


def harness_version() -> str:
    try:
        return metadata.version("kafka-connection-harness")
    except metadata.PackageNotFoundError:
        return "unknown"


class RunFolderError(OSError):
    """The run folder cannot be made: the reason, and where."""


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def history(self) -> Path:
        return self.root / "history"

    @property
    def locust(self) -> Path:
        return self.root / "locust"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    def create(self) -> RunDir:
        """Make the run folder and its subfolders; a folder that already exists is never
        reused (another run's history would be judged with this one's), and a parent that
        cannot hold it is a RunFolderError saying why, before anything starts."""
        parent = self.root.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # mkdir's answer for a parent that is a file
            raise RunFolderError(f"{parent} is not a folder") from None
        except OSError as exc:
            raise RunFolderError(f"cannot make {parent}: {exc.strerror or exc}") from None
        try:
            self.root.mkdir()
            for p in (self.history, self.locust, self.logs):
                p.mkdir()
            probe = self.root / ".writable"
            probe.write_bytes(b"")
            probe.unlink()
        except FileExistsError:
            raise RunFolderError(
                f"run folder {self.root} exists already: not reusing another run's folder"
            ) from None
        except OSError as exc:
            raise RunFolderError(
                f"cannot make the run folder {self.root}: {exc.strerror or exc}"
            ) from None
        return self

    def write_run_json(self, data: dict[str, Any]) -> bool:
        """Replace run.json atomically; on a full or failing disk keep the last one whole,
        say so on stderr and return False (the history's own markers say what was lost)."""
        tmp = self.root / ".run.json.tmp"
        try:
            tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
            os.replace(tmp, self.run_json)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            print(
                f"harness run: cannot update {self.run_json} ({exc.strerror or exc}); "
                "the last one written is kept",
                file=sys.stderr,
                flush=True,
            )
            return False
        return True


def scenario_spec(scenario: Scenario) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(dict(scenario.raw), default=str))
    return spec


def load_entries(scenario: Scenario, duration: float) -> list[dict[str, Any]]:
    out = []
    for p in scenario.load:
        if p.start >= duration:
            continue
        out.append(
            {
                "name": p.name,
                "profile": p.profile,
                "arrival": p.arrival,
                "intended_rate": p.intended_rate,
                "source_ips": p.source_ips,
                "listener": p.listener,
                "proxy_protocol": p.proxy_protocol,
                "proxy_client_ips": p.proxy_client_ips,
                "via": p.via,
                "start": p.start,
                "stop": min(p.stop, duration),
                "users": p.users,
                "max_arrivals": p.max_arrivals,
            }
        )
    return out


def base_run_json(
    *,
    run_id: str,
    scenario: Scenario,
    target: str,
    seed: int,
    duration: float,
    limits: dict[str, Any],
    started_at: str,
) -> dict[str, Any]:
    expect = scenario.expect_for(target)
    return {
        "run_id": run_id,
        "scenario": scenario.name,
        "scenario_spec": scenario_spec(scenario),
        "target": target,
        "seed": seed,
        "duration_s": duration,
        "started_at": started_at,
        "ended_at": None,
        "versions": {
            "kafka": None,
            "harness": harness_version(),
            "python": platform.python_version(),
        },
        "limits": limits,
        "expect": expect.to_json(),
        "load": load_entries(scenario, duration),
        "faults": [
            {
                "kind": a.params["kind"],
                "at": a.at,
                "for": a.params["for"],
                **{k: v for k, v in a.params.items() if k not in ("kind", "for")},
            }
            for a in scenario.faults
            if a.at < duration
        ],
        "interrupted": False,
        # this machine's monotonic clock: history written on another is moved onto it
        "clock": host_clock(),
    }


def _protocol(client_config: Path) -> str:
    from base.security import clientprops

    return clientprops.read(client_config).get("security.protocol", "PLAINTEXT").upper()


def listener_security(client_configs: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """run.json's ``listener_security``: each secured listener's protocol and where its
    client configuration is (and each SASL user's); never a file's contents (secrets)."""
    security: dict[str, dict[str, Any]] = {
        n: {"protocol": _protocol(path), "client_config": str(path)}
        for n, path in client_configs.items()
        if "@" not in n
    }
    for key, path in client_configs.items():
        name, at, user = key.partition("@")
        if at and name in security:  # a SASL user's own configuration
            security[name].setdefault("users", {})[user] = str(path)
    return security
