"""`sized_for` restores the caller's settings, and never replaces the exception a block
ends on with a failure of that restore (a signal inside a py4j call breaks the next call)."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.session import SMALL_RUN_EVENTS, sized_for


class BrokenAfterSignal(Exception):
    """What py4j raises on the call after one a signal interrupted (a KeyError in reality)."""


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)
        self.broken = False

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        if self.broken:
            raise BrokenAfterSignal(key)
        self.values[key] = value

    def unset(self, key: str) -> None:
        if self.broken:
            raise BrokenAfterSignal(key)
        self.values.pop(key, None)


class Session:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = Conf(values)


class Interrupted(Exception):
    pass


def test_the_callers_settings_come_back() -> None:
    spark: Any = Session({"spark.sql.shuffle.partitions": "3"})
    with sized_for(spark, SMALL_RUN_EVENTS - 1):
        assert spark.conf.values == {
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        }
    assert spark.conf.values == {"spark.sql.shuffle.partitions": "3"}


def test_an_interruption_is_not_replaced_by_the_failed_restore() -> None:
    spark: Any = Session({"spark.sql.shuffle.partitions": "3"})
    with pytest.raises(Interrupted), sized_for(spark, SMALL_RUN_EVENTS - 1):
        spark.conf.broken = True
        raise Interrupted("SIGTERM")


def test_a_failed_restore_after_a_clean_block_is_reported() -> None:
    spark: Any = Session({})
    with pytest.raises(BrokenAfterSignal), sized_for(spark, SMALL_RUN_EVENTS - 1):
        spark.conf.broken = True
