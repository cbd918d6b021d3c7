"""`harness analyze` interrupted: exit 143 (SIGTERM) or 130 (SIGINT) and no verdict, even
when the exception that reaches the command is not the interruption but what it broke on
the way out (a signal inside a py4j call: PySpark's clean-up then fails with a py4j error)."""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import analysis
from analysis import cli


def _args(run_dir: Path) -> argparse.Namespace:
    return argparse.Namespace(
        run_dir=str(run_dir), spark_master=None, gate=False, quiet=True, no_html=True
    )


@pytest.fixture(autouse=True)
def _here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis in this process (no analysis server: analysis/server.py)."""
    monkeypatch.delenv("HARNESS_ANALYSIS_SERVER", raising=False)


def _signalled_then_broken(signum: int) -> Any:
    def analyze_run(*_a: Any, **_k: Any) -> Any:
        try:
            os.kill(os.getpid(), signum)  # lands "inside a py4j call"
        finally:
            raise KeyError("c")  # py4j's answer to the next call, as PySpark's wrapper makes it

    return analyze_run


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interruption_replaced_by_a_py4j_error_is_still_the_interruption(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, signum: int, code: int
) -> None:
    monkeypatch.setattr(analysis, "analyze_run", _signalled_then_broken(signum))
    before = signal.getsignal(signum)
    assert cli.run(_args(tmp_path)) == code
    assert signal.getsignal(signum) is before  # the caller's handler is back


def test_an_error_without_a_signal_is_reported_as_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken(*_a: Any, **_k: Any) -> Any:
        raise KeyError("c")

    monkeypatch.setattr(analysis, "analyze_run", broken)
    with pytest.raises(KeyError):
        cli.run(_args(tmp_path))
