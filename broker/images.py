"""The harness's Docker images, built on this machine from Debian packages: no registry needed.

Many CI runners (and this project's machines) reach Debian's mirrors and Maven Central but no
image registry, so nothing here is ever pulled. Each image is a Debian root filesystem made by
Debian's own ``mmdebstrap`` (``--variant=minbase`` plus one runtime), with the harness's files
appended, brought in with ``docker import``: one layer, no Dockerfile, no base image.

``kafka-connection-harness/kafka:<kafka version>``
    Debian's ``openjdk-17-jre-headless``, the Maven-resolved Kafka jars the local launcher
    uses (``/opt/kafka/libs``) and an entrypoint with the official ``apache/kafka`` image's
    conventions (``KAFKA_*`` variables → server.properties, ``CLUSTER_ID``; see
    ``images/kafka-entrypoint.sh``).
``kafka-connection-harness/harness:<kafka version>``
    Debian's ``python3`` and the harness with its runtime dependencies (minus PySpark and
    matplotlib: the analysis runs where the run directory is, ``harness analyze``), for the
    acceptor and Locust in ``compose/``.

Both are reused when present: an image carries the digest of its inputs as a label, so a
changed entrypoint or jar set rebuilds it and nothing else does. The root filesystem tarballs
are cached in ``<cache>/images/``, so a rebuild after ``docker image rm`` skips Debian.

``python -m broker.images`` (what ``make images`` runs) builds what is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.artifacts import (
    KAFKA_VERSION,
    Progress,
    cache_dir,
    jmx_exporter,
    project_root,
    resolve_artifacts,
)
from broker.config import LOG4J2_PROPERTIES, LOG4J_PROPERTIES
from broker.errors import BrokerError, tail

REPOSITORY = "kafka-connection-harness"
KAFKA_REPO = f"{REPOSITORY}/kafka"
HARNESS_REPO = f"{REPOSITORY}/harness"
SUITE = "bookworm"
MIRROR = os.environ.get("HARNESS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: Label on every image this module builds: the digest of its inputs (reuse when it matches).
INPUTS_LABEL = "org.kafka-connection-harness.inputs"
#: Bump to rebuild every image (layout changes).
FORMAT = "1"

#: Debian packages per root filesystem, on top of mmdebstrap's minbase.
ROOTFS_PACKAGES: dict[str, tuple[str, ...]] = {
    "jre17": ("openjdk-17-jre-headless",),
    "python3": ("python3",),
}
#: Debian bookworm's python3: the harness image's wheels are installed by a pip of this version.
IMAGE_PYTHON = (3, 11)
#: Runtime dependencies the harness image leaves out (the analysis runs outside compose).
HARNESS_IMAGE_EXCLUDES = ("pyspark", "matplotlib")


def kafka_image(version: str = KAFKA_VERSION) -> str:
    return f"{KAFKA_REPO}:{version}"


def harness_image(version: str = KAFKA_VERSION) -> str:
    return f"{HARNESS_REPO}:{version}"


def images_dir() -> Path:
    return cache_dir() / "images"


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    size_bytes: int
    #: seconds this call spent building; 0.0 when the image was already there
    build_s: float
    reused: bool

    def describe(self) -> str:
        how = "reused" if self.reused else f"built in {self.build_s:.0f} s"
        return f"{self.tag}: {self.size_bytes / 1e6:.0f} MB ({how})"


# --- root filesystems ---------------------------------------------------------------------


#: After the packages are in: mmdebstrap installs usrmerge on bookworm, which pulls in the
#: whole of Perl (~47 MB) for a conversion already done; nothing at run time needs either.
PURGE = (
    "usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl "
    "perl libperl5.36 perl-modules-5.36"
)


def _mmdebstrap_options(kind: str) -> list[str]:
    return [
        "--variant=minbase",
        "--format=tar",
        # usr-is-merged (not usrmerge) satisfies init-system-helpers, so Perl can go
        f"--include={','.join(ROOTFS_PACKAGES[kind])},usr-is-merged",
        # Lean: no documentation or translations. update-alternatives still needs the man
        # folders to exist (the JRE's postinst links its man page there).
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-include=/usr/share/locale/locale.alias",
        '--setup-hook=mkdir -p "$1/usr/share/man/man1"',
        f'--customize-hook=chroot "$1" dpkg --purge {PURGE}',
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin',
    ]


def rootfs_tarball(kind: str, progress: Progress = print) -> Path:
    """``<cache>/images/rootfs-bookworm-<kind>-<options digest>.tar``, made with mmdebstrap
    when missing (a change of packages or options makes a new one)."""
    packages = ROOTFS_PACKAGES[kind]
    options = _mmdebstrap_options(kind)
    out = images_dir() / f"rootfs-{SUITE}-{kind}-{_digest(*options)[:8]}.tar"
    if out.is_file() and out.stat().st_size > 0:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out.with_suffix(".lock")):
        if out.is_file() and out.stat().st_size > 0:
            return out
        mmdebstrap = shutil.which("mmdebstrap")
        if not mmdebstrap:
            raise BrokerError(
                "mmdebstrap is not installed; it builds the images' Debian root filesystem "
                "(Debian: apt-get install mmdebstrap, or `make setup`), or use --launcher local"
            )
        tmp = out.with_name(f".tmp-{os.getpid()}-{out.name}")
        log = out.with_suffix(".log")
        cmd = [mmdebstrap, *options, SUITE, str(tmp), MIRROR]
        progress(
            f"building a Debian {SUITE} root filesystem with {', '.join(packages)} "
            f"(mmdebstrap, about a minute; log {log})"
        )
        started = time.monotonic()
        with open(log, "wb") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
        if rc != 0:
            tmp.unlink(missing_ok=True)
            raise BrokerError(
                f"mmdebstrap exited {rc} building the {kind} root filesystem from {MIRROR} "
                f"(set HARNESS_DEBIAN_MIRROR for another mirror; mmdebstrap needs root or "
                f"user namespaces); last lines of {log}:\n"
                f"{tail(log.read_text(errors='replace'))}"
            )
        tmp.rename(out)
        for stale in images_dir().glob(f"rootfs-{SUITE}-{kind}*.tar"):
            if stale != out:
                stale.unlink(missing_ok=True)  # built with other options: never used again
        progress(
            f"root filesystem {out.name}: {out.stat().st_size / 1e6:.0f} MB in "
            f"{time.monotonic() - started:.0f} s"
        )
    return out


# --- docker ---------------------------------------------------------------------------------


def docker_client(timeout_s: float = 600) -> Any:
    """A docker SDK client; a clear error when there is no engine."""
    try:
        import docker
    except ImportError as exc:
        raise BrokerError(
            "the docker package is not installed (pip install '.[container]')"
        ) from exc
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except Exception as exc:
        raise BrokerError(
            f"no Docker engine answers ({type(exc).__name__}: {exc}); start one "
            "(Debian: apt-get install docker.io, then dockerd as root) or use --launcher local"
        ) from exc
    return client


def present(client: Any, tag: str, digest: str) -> int | None:
    """The image's size if ``tag`` exists and was built from these inputs, else None."""
    import docker.errors

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    labels = image.attrs.get("Config", {}).get("Labels") or {}
    if labels.get(INPUTS_LABEL) != digest:
        return None
    return int(image.attrs.get("Size", 0))


def _import(
    client: Any,
    base: Path,
    add: Sequence[tuple[Path | bytes, str, int]],
    tag: str,
    changes: Sequence[str],
    progress: Progress,
) -> None:
    """Base tarball + extra files → one-layer image ``tag`` (``docker import``)."""
    work = images_dir() / f".import-{os.getpid()}.tar"
    try:
        shutil.copyfile(base, work)
        with tarfile.open(work, "a") as tf:
            for src, arcname, mode in add:
                if isinstance(src, bytes):
                    info = tarfile.TarInfo(arcname)
                    info.size, info.mode, info.mtime = len(src), mode, int(time.time())
                    tf.addfile(info, _BytesReader(src))
                else:
                    info = tf.gettarinfo(str(src), arcname)
                    info.uid = info.gid = 0
                    info.uname = info.gname = "root"
                    info.mode = mode
                    with open(src, "rb") as fh:
                        tf.addfile(info, fh)
        repository, _, version = tag.rpartition(":")
        progress(f"docker import {tag} ({work.stat().st_size / 1e6:.0f} MB)…")
        old = _image_id(client, tag)
        client.api.import_image_from_file(
            str(work), repository=repository, tag=version, changes=list(changes)
        )
        if old and old != _image_id(client, tag):
            with contextlib.suppress(Exception):  # still used by a container: leave it
                client.images.remove(old)
    finally:
        work.unlink(missing_ok=True)


def _image_id(client: Any, tag: str) -> str | None:
    import docker.errors

    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._pos + size
        chunk = self._data[self._pos : end]
        self._pos += len(chunk)
        return chunk


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256(FORMAT.encode())
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _entrypoint() -> bytes:
    return (project_root() / "images" / "kafka-entrypoint.sh").read_bytes()


def _done(client: Any, tag: str, started: float, progress: Progress) -> BuiltImage:
    size = int(client.images.get(tag).attrs.get("Size", 0))
    return BuiltImage(tag, size, time.monotonic() - started, reused=False)


def ensure_kafka_image(
    client: Any | None = None, version: str = KAFKA_VERSION, progress: Progress = print
) -> BuiltImage:
    """Build-or-reuse under a lock: concurrent harness processes build an image once."""
    client = client or docker_client()
    images_dir().mkdir(parents=True, exist_ok=True)
    with _lock(images_dir() / ".kafka.lock"):
        return _ensure_kafka(client, version, progress)


def _ensure_kafka(client: Any, version: str, progress: Progress) -> BuiltImage:
    """The Kafka image for ``version``, built when missing or built from other inputs."""
    tag = kafka_image(version)
    arts = resolve_artifacts(version, progress)
    exporter = jmx_exporter(progress=progress)
    entry = _entrypoint()
    digest = _digest(
        "kafka", version, SUITE, *_mmdebstrap_options("jre17"), entry, LOG4J2_PROPERTIES,
        LOG4J_PROPERTIES, *(f"{j.name}:{j.stat().st_size}" for j in arts.jars),
        exporter.jar.name, exporter.rules,
    )  # fmt: skip
    size = present(client, tag, digest)
    if size is not None:
        return BuiltImage(tag, size, 0.0, reused=True)
    started = time.monotonic()
    base = rootfs_tarball("jre17", progress)
    add: list[tuple[Path | bytes, str, int]] = [
        (entry, "usr/local/bin/kafka-entrypoint", 0o755),
        (LOG4J2_PROPERTIES.encode(), "opt/kafka/config/log4j2.properties", 0o644),
        # Kafka before 4.0 logs through log4j 1 (reload4j): the same console output
        (LOG4J_PROPERTIES.encode(), "opt/kafka/config/log4j.properties", 0o644),
        # the Prometheus JMX exporter, as the local launcher runs it (KAFKA_OPTS=-javaagent:…)
        (exporter.jar, "opt/kafka/jmx/jmx_prometheus_javaagent.jar", 0o644),
        (exporter.rules.encode(), "opt/kafka/jmx/jmx-exporter.yaml", 0o644),
    ]
    add += [(jar, f"opt/kafka/libs/{jar.name}", 0o644) for jar in arts.jars]
    _import(
        client,
        base,
        add,
        tag,
        [
            'ENTRYPOINT ["/usr/local/bin/kafka-entrypoint"]',
            "WORKDIR /opt/kafka",
            f"LABEL {INPUTS_LABEL}={digest}",
            f"LABEL org.opencontainers.image.version={version}",
            "LABEL org.opencontainers.image.title=apache-kafka-kraft",
        ],
        progress,
    )
    return _done(client, tag, started, progress)


def _requirements() -> list[str]:
    data = tomllib.loads((project_root() / "pyproject.toml").read_text())
    deps = data["project"]["dependencies"]
    return [d for d in deps if not any(d.lower().startswith(x) for x in HARNESS_IMAGE_EXCLUDES)]


def ensure_harness_image(
    client: Any | None = None, version: str = KAFKA_VERSION, progress: Progress = print
) -> BuiltImage:
    """Build-or-reuse under a lock: concurrent harness processes build an image once."""
    client = client or docker_client()
    images_dir().mkdir(parents=True, exist_ok=True)
    with _lock(images_dir() / ".harness.lock"):
        return _ensure_harness(client, version, progress)


def _ensure_harness(client: Any, version: str, progress: Progress) -> BuiltImage:
    """The harness image (acceptor, Locust profiles), built when missing or outdated.

    The harness's source is part of the digest, so editing it rebuilds the image.
    """
    tag = harness_image(version)
    root = project_root()
    sources = sorted(
        p
        for pkg in ("base", "acceptor", "broker", "loadprofiles", "analysis", "harness")
        for p in (root / pkg).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    reqs = _requirements()
    digest = _digest(
        "harness", version, SUITE, *_mmdebstrap_options("python3"), *reqs,
        (root / "pyproject.toml").read_bytes(),
        *(hashlib.sha256(p.read_bytes()).hexdigest() for p in sources),
    )  # fmt: skip
    size = present(client, tag, digest)
    if size is not None:
        return BuiltImage(tag, size, 0.0, reused=True)
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise BrokerError(
            f"the harness image installs its dependencies with this Python's pip for Debian "
            f"{SUITE}'s Python {'.'.join(map(str, IMAGE_PYTHON))}, but this is "
            f"{sys.version.split()[0]}: build it from a Python "
            f"{'.'.join(map(str, IMAGE_PYTHON))} venv (the Kafka image does not need one)"
        )
    started = time.monotonic()
    base = rootfs_tarball("python3", progress)
    site = images_dir() / f".harness-site-{os.getpid()}"
    shutil.rmtree(site, ignore_errors=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(site)]
    log = images_dir() / "harness-pip.log"
    progress(f"installing the harness and {len(reqs)} dependencies for the image (log {log})")
    try:
        with open(log, "wb") as fh:
            for extra in (["--no-deps", str(root)], reqs):
                rc = subprocess.run(
                    [*pip, *extra], stdout=fh, stderr=subprocess.STDOUT, check=False
                ).returncode
                if rc != 0:
                    raise BrokerError(
                        f"pip install for the harness image exited {rc}; see {log}:\n"
                        f"{tail(log.read_text(errors='replace'))}"
                    )
        add: list[tuple[Path | bytes, str, int]] = []
        for p in sorted(site.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                rel = p.relative_to(site)
                if rel.parts[0] == "bin":
                    continue  # console scripts name the host's interpreter; use python3 -m
                add.append((p, f"opt/harness/{rel}", 0o755 if os.access(p, os.X_OK) else 0o644))
        _import(
            client,
            base,
            add,
            tag,
            [
                "ENV PYTHONPATH=/opt/harness PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1",
                'ENTRYPOINT ["python3", "-m", "harness"]',
                'CMD ["scenarios"]',
                f"LABEL {INPUTS_LABEL}={digest}",
                f"LABEL org.opencontainers.image.version={version}",
            ],
            progress,
        )
    finally:
        shutil.rmtree(site, ignore_errors=True)
    return _done(client, tag, started, progress)


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_images(
    which: Sequence[str] = ("kafka", "harness"),
    progress: Progress = print,
    kafka_version: str = KAFKA_VERSION,
) -> list[BuiltImage]:
    """The images in ``which``; the Kafka image of ``kafka_version`` (the harness image is
    the same whichever Kafka it drives)."""
    client = docker_client()
    out = []
    images_dir().mkdir(parents=True, exist_ok=True)
    with _lock(images_dir() / ".build.lock"):
        if "kafka" in which:
            out.append(ensure_kafka_image(client, kafka_version, progress=progress))
        if "harness" in which:
            out.append(ensure_harness_image(client, progress=progress))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.images",
        description="Build the Kafka and harness images locally (no registry); reuse them "
        "when present.",
    )
    parser.add_argument("which", nargs="*", metavar="kafka|harness", help="default: both images")
    parser.add_argument("--json", action="store_true", help="print sizes and times as JSON")
    parser.add_argument(
        "--kafka-version",
        metavar="X.Y.Z",
        default=KAFKA_VERSION,
        help=f"the Kafka image's release (default {KAFKA_VERSION}; a KRaft release, 3.3 or newer)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.which) - {"kafka", "harness"}
    if unknown:
        parser.error(f"unknown image(s) {sorted(unknown)}: expected kafka and/or harness")
    started = time.monotonic()
    try:
        version = _image_release(args.kafka_version)
        built = ensure_images(
            args.which or ("kafka", "harness"), progress=_say, kafka_version=version
        )
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for b in built:
        print(b.describe())
    if args.json:
        print(json.dumps([b.__dict__ for b in built]))
    print(f"images ready in {time.monotonic() - started:.0f} s (docker image ls {REPOSITORY}/*)")
    return 0


def _image_release(text: str) -> str:
    """``--kafka-version`` as X.Y.Z; a release before KRaft's (3.3) is refused: the image
    formats KRaft storage and runs without ZooKeeper."""
    from base.quota.config import ConfigError
    from base.quota.versions import release

    try:
        version = release(text, key="--kafka-version")
    except ConfigError as exc:
        raise BrokerError(str(exc)) from exc
    if tuple(int(p) for p in version.split(".")[:2]) < (3, 3):
        raise BrokerError(
            f"config --kafka-version={text!r}: the image runs KRaft, production-ready from 3.3; "
            "ZooKeeper-mode releases run on the local launcher (harness broker --zookeeper)"
        )
    return version


def _say(message: str) -> None:
    print(message, flush=True)


if __name__ == "__main__":
    sys.exit(main())
