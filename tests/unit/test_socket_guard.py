"""The `unit` socket guard (tests/conftest.py) tells a test's own socket from py4j's
collector telling a Spark JVM, started by an earlier module of the same worker, that Python
dropped one of its objects."""

from __future__ import annotations

import sys
from types import FrameType

from tests.conftest import _py4j_collecting


def _frame_in(filename: str, function: str) -> FrameType:
    """A frame of a function called ``function`` defined in a file named ``filename``."""
    namespace: dict[str, object] = {"sys": sys}
    exec(compile(f"def {function}():\n    return sys._getframe(0)\n", filename, "exec"), namespace)
    frame = namespace[function]()  # type: ignore[operator]
    assert isinstance(frame, FrameType)
    return frame


def test_py4j_collecting_an_object_is_not_the_tests_socket() -> None:
    frame = _frame_in("/venv/site-packages/py4j/java_gateway.py", "_garbage_collect_object")
    assert _py4j_collecting(frame)
    # a ClientServer's FinalizerWorker thread (PySpark's gateway): in its own thread's stack
    frame = _frame_in("/venv/site-packages/py4j/clientserver.py", "garbage_collect_object")
    assert _py4j_collecting(frame)


def test_a_socket_opened_elsewhere_is_the_tests() -> None:
    assert not _py4j_collecting(sys._getframe(0))
    assert not _py4j_collecting(_frame_in("/venv/site-packages/py4j/clientserver.py", "connect"))
    assert not _py4j_collecting(_frame_in("/work/ours.py", "_garbage_collect_object"))
