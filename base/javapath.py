"""Which `java` runs: ``$JAVA_HOME/bin/java`` when JAVA_HOME has one, else ``java`` on PATH,
as Kafka's scripts and PySpark's launcher choose it. A leaf module: the broker launcher
checks the version of the one it finds (`broker.artifacts.find_java`), the analysis
names its JVM's class archive after it (`analysis.session.archive_path`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path


def locate_java(env: Mapping[str, str] | None = None) -> str | None:
    """The `java` that `env` (default: this process's) selects, or None."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH", ""))
