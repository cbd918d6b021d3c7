"""Every test asserts something about its result.

A small AST pass over tests/: a test function (``test*`` at module level or in a class)
passes when its body, nested helpers included, has an ``assert``, a ``pytest.raises`` /
``pytest.warns`` / ``pytest.fail``, or a call to a checking helper (a name that starts with
``assert_``, ``check_`` or ``expect_``, or is ``check``/``expect``: ``mock.assert_called_once``,
``self.check(...)``). A test that only runs code is listed in ALLOWED with the reason its
claim needs no assertion; any other one fails this test. Lists functions, not their
parameters: one entry covers every parametrized case.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CHECKED_CALLS = frozenset({"raises", "warns", "fail", "check", "expect"})
CHECKED_PREFIXES = ("assert_", "check_", "expect_")

# test id -> why running it is the whole claim
ALLOWED: dict[str, str] = {
    "tests/unit/test_security_certs.py::"
    "test_python_ssl_loads_the_files_and_checks_expiry_and_host": (
        "the claim is that Python's ssl accepts the CA and the key+chain files (load_cert_chain "
        "raises ssl.SSLError otherwise); despite its name it checks neither expiry nor host"
    ),
}


def _callee(call: ast.Call) -> str:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


def checks_something(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _callee(node)
            if name in CHECKED_CALLS or name.startswith(CHECKED_PREFIXES):
                return True
    return False


def _test_functions(path: Path) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    rel = path.relative_to(ROOT).as_posix()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        scope = [(node, "")]
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            scope = [(child, f"{node.name}::") for child in node.body]
        for fn, prefix in scope:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name.startswith(
                "test"
            ):
                yield f"{rel}::{prefix}{fn.name}", fn


def all_tests() -> dict[str, bool]:
    """test id -> whether it checks something, over every test module under tests/."""
    return {
        test_id: checks_something(fn)
        for path in sorted(TESTS.rglob("test_*.py"))
        for test_id, fn in _test_functions(path)
    }


def test_every_test_asserts_on_its_result() -> None:
    found = all_tests()
    assert len(found) > 500, "the scan found too few tests: is it looking in the right place?"
    unchecked = sorted(t for t, ok in found.items() if not ok and t not in ALLOWED)
    assert not unchecked, (
        "tests with no assert, pytest.raises/warns/fail or assert_/check_/expect_ call "
        "(assert on the result, or list the test in ALLOWED with the reason):\n  "
        + "\n  ".join(unchecked)
    )


def test_allowed_entries_are_still_needed() -> None:
    # an entry whose test now checks something should go (a test not found is ignored: it may
    # be in a file someone has not committed yet)
    found = all_tests()
    stale = sorted(t for t in ALLOWED if found.get(t))
    assert not stale, "these now check their result, remove them from ALLOWED: " + ", ".join(stale)


def test_the_scan_tells_a_checking_test_from_one_that_only_runs() -> None:
    source = """
def test_runs(): f()
def test_asserts(): assert f()
def test_raises():
    with pytest.raises(ValueError): f()
def test_helper(): check_rows(f())
def test_mock(m): m.assert_called_once()
def test_nested():
    def inner(): assert f()
    inner()
class TestK:
    def test_self_check(self): self.check(f())
    def test_only_calls(self): self.f()
"""
    tree = ast.parse(source)
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name[:4] == "test"]
    assert {fn.name: checks_something(fn) for fn in fns} == {
        "test_runs": False,
        "test_asserts": True,
        "test_raises": True,
        "test_helper": True,
        "test_mock": True,
        "test_nested": True,
        "test_self_check": True,
        "test_only_calls": False,
    }
