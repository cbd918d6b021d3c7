"""History: the one table every part writes and the analysis reads (Jepsen's interface)."""

from base.history.schema import EVENTS, SCHEMA, SOURCES
from base.history.writer import HistoryWriter, read_history

__all__ = ["EVENTS", "SCHEMA", "SOURCES", "HistoryWriter", "read_history"]
