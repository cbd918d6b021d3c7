"""Where scenarios live and how a name on the command line becomes a Scenario.

A name resolves to ``<catalog>/<name>.yaml``; a path to a YAML file works too, so a
person can try a scenario of their own without adding it to the catalog.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.runner.scenario import Scenario, ScenarioError, load_scenario_file


def catalog_dir() -> Path:
    """The catalog folder: $HARNESS_SCENARIOS_DIR, else loadprofiles/scenarios/."""
    override = os.environ.get("HARNESS_SCENARIOS_DIR")
    if override:
        return Path(override)
    import loadprofiles.scenarios as pkg

    return Path(pkg.__file__).resolve().parent


def scenario_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise ScenarioError("scenario", name_or_path, "no such file")
        return p
    candidate = catalog_dir() / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = ", ".join(sorted(s.stem for s in catalog_dir().glob("*.yaml")))
        raise ScenarioError(
            "scenario", name_or_path, f"not in the catalog ({known}); `harness scenarios` lists it"
        )
    return candidate


def load(name_or_path: str) -> Scenario:
    scenario = load_scenario_file(scenario_path(name_or_path))
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml") and scenario.name != name_or_path:
        raise ScenarioError(
            "name", scenario.name, f"the file {name_or_path}.yaml must be named {name_or_path!r}"
        )
    return scenario


@dataclass(frozen=True)
class Entry:
    path: Path
    scenario: Scenario | None
    error: str | None


def entries() -> list[Entry]:
    """Every catalog file, parsed; a broken one is listed with its error, not hidden."""
    out = []
    for path in sorted(catalog_dir().glob("*.yaml")):
        try:
            out.append(Entry(path, load_scenario_file(path), None))
        except ScenarioError as exc:
            out.append(Entry(path, None, str(exc)))
    return out
