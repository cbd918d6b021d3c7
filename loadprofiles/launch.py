"""Command lines for the profiles: what ``harness run`` and the tests execute.

Builds ``locust -f loadprofiles/<profile>.py --headless ...`` argument lists (no
Locust import here: the load runs in its own process, so the caller's process never
gets monkey-patched by gevent).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILES: dict[str, Path] = {
    name: HERE / f"{name}.py"
    for name in ("storm", "connect", "per_request", "single_ip_flood", "steady", "greedy")
}


def locustfile(profile: str) -> Path:
    """The Locust file of ``profile``; unknown names list the known ones."""
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(
            f"profile={profile!r}: expected one of {', '.join(sorted(PROFILES))}"
        ) from None


def locust_command(
    profile: str,
    *,
    host: str,
    run_time_s: float,
    run_dir: str | Path | None = None,
    run_id: str | None = None,
    users: int = 1,
    processes: int | None = None,
    csv_prefix: str | Path | None = None,
    html: str | Path | None = None,
    options: Mapping[str, object] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """Headless Locust argv for one profile.

    ``options`` are the harness options without dashes (``{"arrival":
    "constant:rate=50", "source_ips": "127.0.0.2-127.0.0.9"}``). Arrival profiles take
    one driver per process, so ``users`` defaults to 1 and ``--processes N`` wants
    ``users=N``.
    """
    locust = Path(sys.executable).with_name("locust")
    target = host if "://" in host else f"kafka://{host}"
    argv = [
        str(locust),
        "-f",
        str(locustfile(profile)),
        "--headless",
        "-u",
        str(users),
        "-r",
        str(max(users, 1)),
        "-t",
        f"{max(1, round(run_time_s))}s",
        "--host",
        target,
    ]
    if processes:
        argv += ["--processes", str(processes)]
    if run_dir is not None:
        argv += ["--run-dir", str(run_dir)]
    if run_id:
        argv += ["--run-id", run_id]
    if csv_prefix is not None:
        argv += ["--csv", str(csv_prefix)]
    if html is not None:
        argv += ["--html", str(html)]
    for key, value in (options or {}).items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv + list(extra)


def run(
    argv: Sequence[str], *, timeout_s: float, cwd: str | Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Locust command line to completion (bounded), output captured."""
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, cwd=cwd, check=False
    )
