"""What the loaders below `Run` read of a run: its files, its rows and its cache. A Protocol,
so that `files` and `incarnations` need not import `run`, which imports them (no cycle)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class RunView(Protocol):
    """A run or a view of it (`analysis.load.run.Run`), as the loaders use it."""

    @property
    def files(self) -> list[Path]: ...

    @property
    def front_node(self) -> int | None: ...

    def events(self, *names: str, source: str | None = None) -> DataFrame: ...

    def cached(self, key: str, build: Callable[[], Any]) -> Any: ...
