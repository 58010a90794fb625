"""Python source parsed into a syntax tree, one tree at a time per process.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state, so two threads
building trees at once can fail with "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905). The grader prepares its learners in threads, and each preparation reads
the lab's sources (the parameters cell, the lab's constants, the kernel-side module): every
``ast.parse`` of rocmlab's goes through here."""

import ast
import threading

_ONE_TREE_AT_A_TIME = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, never beside another thread's (raises SyntaxError)."""
    with _ONE_TREE_AT_A_TIME:
        return ast.parse(source, filename)
