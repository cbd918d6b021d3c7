"""Where benches write their numbers: one JSON file per run, in bench/results/ unless the
caller names a file, and one line saying where it went."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(data: Any, stem: str, path: Path | None = None) -> Path:
    """Write `data` as JSON to `path`, or to bench/results/<stem>-<local time>.json; print
    and return where it went."""
    out = path or RESULTS / f"{stem}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    print(f"numbers written to {out}")
    return out


def args_record(args: argparse.Namespace) -> dict[str, Any]:
    """A run's command-line options as its JSON records them (paths as strings)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
