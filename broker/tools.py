"""Kafka's own command-line tools (kafka-configs, kafka-topics, ...) from the cached jars.

The harness claims compatibility with Kafka's tools (``kafka-configs.sh --ip ...`` against the
acceptor), and the honest proof is running the real ``ConfigCommand``. The release
shell scripts are thin wrappers around ``java -cp libs/* <main class>``; this does the same
with the Maven-resolved classpath, so no tarball is needed; a tool's main class is looked up
in that classpath (its home moves between releases).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from broker.artifacts import KAFKA_VERSION, Progress, find_java, resolve_artifacts

#: script name (as in Kafka's bin/) -> its main class, newest home first: tools move from
#: the Scala core to `org.apache.kafka.tools` between releases (ConfigCommand in 4.4.0), and
#: the one the release's classpath holds is run
TOOLS: dict[str, tuple[str, ...]] = {
    "kafka-configs": ("org.apache.kafka.tools.ConfigCommand", "kafka.admin.ConfigCommand"),
    "kafka-storage": ("org.apache.kafka.tools.StorageTool", "kafka.tools.StorageTool"),
    "kafka-topics": ("org.apache.kafka.tools.TopicCommand",),
    "kafka-consumer-groups": ("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",),
    "kafka-broker-api-versions": ("org.apache.kafka.tools.BrokerApiVersionsCommand",),
    "kafka-producer-perf-test": ("org.apache.kafka.tools.ProducerPerformance",),
}

#: Tools log to stderr at WARN, like bin/tools-log4j2.yaml in the release.
_TOOL_JVM_OPTS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dlog4j2.level=WARN",
    "-Dlog4j2.rootLogger.level=WARN",
    "-Djava.awt.headless=true",
)


def tool_command(tool: str, args: Sequence[str], *, progress: Progress = print) -> list[str]:
    """The argv that runs ``tool`` (a bin/ script name or a main class) with ``args``."""
    java = find_java()
    arts = resolve_artifacts(KAFKA_VERSION, progress)
    candidates = TOOLS.get(tool.removesuffix(".sh"), (tool,))
    main = main_class(candidates, arts.classpath)
    return [str(java), *_TOOL_JVM_OPTS, "-cp", arts.classpath, main, *args]


def main_class(candidates: Sequence[str], classpath: str) -> str:
    """The first of ``candidates`` that a jar of ``classpath`` holds (else the first: the
    JVM then names the class it could not find)."""
    import zipfile

    wanted = {c.replace(".", "/") + ".class": c for c in candidates}
    found: set[str] = set()
    for jar in classpath.split(os.pathsep):
        if not jar.endswith(".jar"):
            continue
        try:
            with zipfile.ZipFile(jar) as z:
                found |= wanted.keys() & set(z.namelist())
        except (OSError, zipfile.BadZipFile):
            continue
    return next((c for path, c in wanted.items() if path in found), candidates[0])


def run_tool(
    tool: str, *args: str, timeout_s: float = 120, progress: Progress = print
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka tool to completion; the caller checks ``returncode``/``stdout``."""
    return subprocess.run(
        tool_command(tool, args, progress=progress),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )
