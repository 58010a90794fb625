"""Python source parsed into a syntax tree, one tree at a time per process.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion depth in
per-interpreter state, so two threads building trees at once can fail with "SystemError: AST
constructor recursion depth mismatch" (python/cpython#106905; fixed by python/cpython#113035,
backported to 3.12 in #113472 and to 3.11 in #113476, both merged 2023-12-25, first released in
3.12.2 and 3.11.8). The grader prepares its learners in threads, and each preparation reads the
lab's sources (the parameters cell, the lab's constants, the kernel-side module): every
``ast.parse`` of rocmlab's goes through ``parse``.

rocmlab's own calls are not the only ones: on 3.11 and later, ``traceback`` parses the failing
line with ``ast.parse`` to place its ``^~~`` carets, so a grading thread formatting an exception
builds a tree too. ``guard_threads`` (called where the grader starts its threads) routes the
process's ``ast.parse`` through the same lock on the affected versions only; ``compile(...,
ast.PyCF_ONLY_AST)`` called directly, or an ``ast.parse`` bound by ``from ast import parse``
before the guard, stays outside it."""

import ast
import functools
import sys
import threading

# Reentrant: a finalizer that the garbage collector runs in the middle of a parse may parse too.
_ONE_TREE_AT_A_TIME = threading.RLock()
_UNGUARDED_PARSE = ast.parse


def has_the_race(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this CPython builds syntax trees with shared recursion-depth state (gh-106905)."""
    return (3, 11, 0) <= version < (3, 11, 8) or (3, 12, 0) <= version < (3, 12, 2)


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never beside another thread's (raises SyntaxError)."""
    with _ONE_TREE_AT_A_TIME:
        return _UNGUARDED_PARSE(source, filename)


@functools.wraps(_UNGUARDED_PARSE)
def _guarded_parse(*args, **kwargs):
    with _ONE_TREE_AT_A_TIME:
        return _UNGUARDED_PARSE(*args, **kwargs)


def guard_threads() -> bool:
    """On an affected CPython, make ``ast.parse`` everywhere in this process (``traceback``'s
    included) take the lock; idempotent. Returns whether the process's ``ast.parse`` is guarded."""
    if not has_the_race():
        return False
    with _ONE_TREE_AT_A_TIME:
        ast.parse = _guarded_parse
    return True
