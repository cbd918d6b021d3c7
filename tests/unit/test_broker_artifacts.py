"""Artifact cache, Maven diagnosis and Java discovery, without running Maven or a JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker import artifacts
from broker.artifacts import (
    KAFKA_VERSION,
    MARKER,
    classify_maven_failure,
    find_java,
    parse_java_major,
    read_marker,
    render_pom,
    resolve_artifacts,
)
from broker.errors import BrokerError


def test_pom_asks_for_the_broker_tools_and_a_log_binding() -> None:
    pom = render_pom("4.3.1")
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<artifactId>kafka-tools</artifactId>" in pom
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in pom
    assert pom.count("<version>4.3.1</version>") == 3  # project + two Kafka artifacts


def _populate(vdir: Path, names: list[str], version: str = KAFKA_VERSION) -> None:
    lib = vdir / "lib"
    lib.mkdir(parents=True)
    for name in names:
        (lib / name).write_bytes(b"PK")
    marker = {
        "version": version,
        "pom_sha256": artifacts._sha(render_pom(version)),
        "jars": names,
    }
    (vdir / MARKER).write_text(json.dumps(marker))


def test_complete_cache_is_used_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    names = [f"kafka_2.13-{KAFKA_VERSION}.jar", "kafka-clients.jar"]
    _populate(tmp_path / "kafka" / KAFKA_VERSION, names)

    def no_maven() -> str:
        raise AssertionError("Maven must not run when the cache is complete")

    monkeypatch.setattr(artifacts, "find_maven", no_maven)
    arts = resolve_artifacts()
    assert arts.downloaded is False
    assert [j.name for j in arts.jars] == names
    assert arts.lib_dir == tmp_path / "kafka" / KAFKA_VERSION / "lib"


def test_a_missing_jar_invalidates_the_cache(tmp_path: Path) -> None:
    vdir = tmp_path / "v"
    _populate(vdir, ["a.jar", "b.jar"])
    assert read_marker(vdir) is not None
    (vdir / "lib" / "b.jar").unlink()
    assert read_marker(vdir) is None


def test_a_changed_pom_invalidates_the_cache(tmp_path: Path) -> None:
    vdir = tmp_path / "v"
    _populate(vdir, ["a.jar"])
    data = json.loads((vdir / MARKER).read_text())
    data["pom_sha256"] = "stale"
    (vdir / MARKER).write_text(json.dumps(data))
    assert read_marker(vdir) is None


def test_no_maven_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match=r"Maven \(mvn\) is not on PATH"):
        resolve_artifacts()


def test_unreachable_central_is_diagnosed_as_network() -> None:
    out = (
        "[ERROR] Failed to execute goal on project kafka-runtime: Could not resolve dependencies\n"
        "[ERROR] Could not transfer artifact org.apache.kafka:kafka_2.13:pom:4.3.1 from/to central"
        " (https://repo.maven.apache.org/maven2): repo.maven.apache.org: Unknown host"
    )
    msg = classify_maven_failure(out)
    assert msg.startswith("Maven cannot reach Maven Central (repo.maven.apache.org)")
    assert "settings.xml" in msg


def test_missing_artifact_is_diagnosed_as_version() -> None:
    out = "[ERROR] Could not find artifact org.apache.kafka:kafka_2.13:jar:9.9.9 in central"
    assert "check the Kafka version" in classify_maven_failure(out, "9.9.9")


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ("garbage", None),
    ],
)
def test_parse_java_major(text: str, major: int | None) -> None:
    assert parse_java_major(text) == major


def test_no_java_anywhere_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match=r"Java not found .*JAVA_HOME"):
        find_java({"PATH": str(tmp_path)})


def test_java_home_without_java_is_named(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match=r"JAVA_HOME='.*' has no bin/java"):
        find_java({"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "jdk")})


def test_a_tools_main_class_is_the_one_its_release_holds(tmp_path: Path) -> None:
    """ConfigCommand left the Scala core for `org.apache.kafka.tools` in 4.4.0: the class
    run is the one the release's jars hold, newest home first."""
    import os
    import zipfile

    from broker.tools import TOOLS, main_class

    def jar(name: str, *classes: str) -> str:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for c in classes:
                z.writestr(c.replace(".", "/") + ".class", b"")
        return str(path)

    old = jar("kafka_2.13-4.3.1.jar", "kafka.admin.ConfigCommand")
    new = jar("kafka-tools-4.4.0.jar", "org.apache.kafka.tools.ConfigCommand")
    configs = TOOLS["kafka-configs"]
    assert main_class(configs, os.pathsep.join([old, str(tmp_path)])) == "kafka.admin.ConfigCommand"
    both = os.pathsep.join([old, new])
    assert main_class(configs, both) == "org.apache.kafka.tools.ConfigCommand"
    assert main_class(configs, "") == configs[0]  # none found: the JVM names it
