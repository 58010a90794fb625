"""rocmlab's Python parsing never builds two syntax trees at once (rocmlab.python_ast), and on
the CPython versions with gh-106905 neither does anything else in a grading process."""

import ast
import gc
import sys
import threading
import time
import traceback

import pytest

from rocmlab import python_ast


def test_threads_parse_one_at_a_time(monkeypatch):
    inside, most = 0, 0
    count = threading.Lock()
    real = ast.parse

    def watched(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)  # long enough for another thread to try
        try:
            return real(*args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(python_ast, "_UNGUARDED_PARSE", watched)
    threads = [threading.Thread(target=python_ast.parse, args=("x = 1\n" * 50,)) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert most == 1


def test_a_syntax_error_is_raised_and_the_next_parse_goes_on():
    with pytest.raises(SyntaxError):
        python_ast.parse("def (")
    assert isinstance(python_ast.parse("y = 2").body[0], ast.Assign)


@pytest.mark.parametrize(
    "version, affected",
    [
        ((3, 10, 14), False),
        ((3, 11, 0), True),
        ((3, 11, 7), True),  # this machine's
        ((3, 11, 8), False),
        ((3, 12, 1), True),
        ((3, 12, 2), False),
        ((3, 13, 0), False),
    ],
)
def test_the_affected_versions_are_those_before_the_fix_was_released(version, affected):
    assert python_ast.has_the_race(version) is affected


def _failing_line(d):
    return d["a"]["b"] + (d["c"] * 2)  # a TypeError whose line traceback parses for its carets


def _format_an_exception() -> str:
    try:
        _failing_line({"a": {"b": 1}, "c": None})
    except TypeError as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("no exception")


@pytest.mark.skipif(not python_ast.has_the_race(), reason="this CPython builds syntax trees safely in threads")
def test_traceback_parses_through_the_lock_once_guarded(monkeypatch):
    parsed = []

    def recorded(source, *args, **kwargs):  # reached only with the lock held (python_ast._guarded_parse)
        parsed.append(source)
        return ast.parse.__wrapped__(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", ast.parse)  # put back after the test
    assert python_ast.guard_threads() and python_ast.guard_threads()  # idempotent
    monkeypatch.setattr(python_ast, "_UNGUARDED_PARSE", recorded)
    formatted = _format_an_exception()
    assert "~" in formatted and any('d["c"] * 2' in source for source in parsed), (formatted, parsed)


def test_guard_leaves_an_unaffected_cpython_alone(monkeypatch):
    monkeypatch.setattr(ast, "parse", ast.parse)
    monkeypatch.setattr(python_ast, "has_the_race", lambda: False)
    before = ast.parse
    assert python_ast.guard_threads() is False and ast.parse is before


class _Finalized:
    """Cyclic garbage whose finalizer runs Python code: a collection in the middle of building a
    tree then lets another thread run, which is how gh-106905's shared depth gets corrupted."""

    def __del__(self):
        sum(range(20))


_LAB_LIKE = "\n".join(
    f"def f{i}(a, b):\n    return [x * (a + b) for x in range(a) if x % 3 == {i % 3}]" for i in range(40)
)


def race(seconds: float) -> BaseException | None:
    """Threads parse through rocmlab, format exceptions and make garbage for ``seconds``, with
    thread switches and collections as often as CPython allows; the first SystemError, or None."""
    stop = time.monotonic() + seconds
    failures: list[BaseException] = []

    def keep(work):
        def loop():
            while time.monotonic() < stop and not failures:
                try:
                    work()
                except SystemError as exc:
                    failures.append(exc)

        return loop

    def garbage():
        cycle = [_Finalized() for _ in range(50)]
        for item in cycle:
            item.cycle = cycle

    jobs = [lambda: python_ast.parse(_LAB_LIKE), _format_an_exception, _format_an_exception, garbage]
    threads = [threading.Thread(target=keep(job), daemon=True) for job in jobs]
    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 60)
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    return failures[0] if failures else None


@pytest.mark.slow
def test_parsing_and_formatting_exceptions_in_threads_never_raise_systemerror(monkeypatch):
    """Without ``guard_threads`` this fails on CPython 3.11.7 within a second or so in most runs
    (``SystemError: AST constructor recursion depth mismatch``)."""
    monkeypatch.setattr(ast, "parse", ast.parse)
    python_ast.guard_threads()
    assert race(3.0) is None
