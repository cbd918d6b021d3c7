"""The one place secrets are masked, and the run-private folder they live in.

A secret (a SASL password) is registered once, when it is made (`register`); from then on
`mask` replaces it in any text, `mask_properties` in a properties mapping (also every value
under a key Kafka treats as a password: ``*.sasl.jaas.config``, ``*password*``,
``ssl.keystore.key``), `mask_json` in anything bound for ``run.json``, and `MaskingFilter` in
log records. Whatever the harness writes outside the private folder goes through one of them.

The private folder (`private_dir`) is mode 0700 and each file in it 0600 (`write_private`),
created fresh each start; it is the only place a secret is written in clear.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: What a masked secret reads as.
MASK = "******"

#: Keys whose values are secret whatever they hold (Kafka's PASSWORD-type keys, prefixed or not).
_SECRET_KEY = re.compile(
    r"(^|\.)(sasl\.jaas\.config|ssl\.keystore\.key|ssl\.key\.password|[a-z.]*password)$",
    re.IGNORECASE,
)

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(*secrets: str) -> None:
    """Remember secrets so every later `mask` hides them (at least 4 characters each)."""
    global _pattern
    with _lock:
        for secret in secrets:
            if len(secret) < 4:
                raise ValueError("a secret shorter than 4 characters cannot be masked safely")
            _secrets.add(secret)
        # Longest first, so a secret containing another is masked whole.
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None


def forget(*secrets: str) -> None:
    """Stop masking these secrets (their broker is gone)."""
    global _pattern
    with _lock:
        _secrets.difference_update(secrets)
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None


def registered() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def mask(text: str) -> str:
    """``text`` with every registered secret replaced by `MASK`."""
    pattern = _pattern
    return pattern.sub(MASK, text) if pattern is not None else text


def is_secret_key(key: str) -> bool:
    """True for a key whose value is a secret (e.g. ``listener.name.x.plain.sasl.jaas.config``)."""
    return bool(_SECRET_KEY.search(key))


def mask_properties(props: Mapping[str, str]) -> dict[str, str]:
    """A copy with secret keys' values and registered secrets masked."""
    return {k: MASK if is_secret_key(k) else mask(str(v)) for k, v in props.items()}


def mask_json(value: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with secrets masked, for ``run.json``."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {
            k: MASK if isinstance(k, str) and is_secret_key(k) and v else mask_json(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_json(v) for v in value]
    return value


class MaskingFilter(logging.Filter):
    """A logging filter that masks registered secrets in every record's final message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


# --- the private folder --------------------------------------------------------------------


def private_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700, emptied if it existed) and return it."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(mode=0o700, parents=True)
    os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    return path


def write_private(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` with mode 0600 from the first byte (never world-readable)."""
    raw = data.encode() if isinstance(data, str) else data
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    os.chmod(path, 0o600)
    return path


def remove_private(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def leaks(paths: Iterable[Path], secrets: Iterable[str]) -> list[str]:
    """``"path: secret #i"`` for every file under ``paths`` holding a secret in clear.

    For tests and checks: a file that cannot be read is skipped.
    """
    wanted = [s.encode() for s in secrets]
    found: list[str] = []
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for file in files:
            try:
                data = file.read_bytes()
            except OSError:
                continue
            found += [f"{file}: secret #{i}" for i, s in enumerate(wanted) if s in data]
    return found
