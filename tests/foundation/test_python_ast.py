"""rocmlab's Python parsing never builds two syntax trees at once (rocmlab.python_ast)."""

import ast
import threading
import time

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

    monkeypatch.setattr(python_ast.ast, "parse", watched)
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
