"""Pristine references for graded tests, safe from a learner's monkeypatching.

A solution cell can write ``torch.allclose = lambda *a, **k: True`` or replace
``numpy.testing.assert_allclose``; a test that then calls them passes anything. A test cell
defends itself at its top::

    allclose, assert_allclose = lab.trusted("torch.allclose", "numpy.testing.assert_allclose")

``trusted`` returns the objects captured by ``capture`` before any learner code ran (the
grader and ``rocmlab check`` run ``capture`` in a first cell of their own), puts them back
where they belong (so library code the test calls sees them too), and reports the names it
found replaced. Outside the grader (a learner's own run) nothing was captured: the names
are resolved now, which is what the learner's code sees anyway.
"""

from __future__ import annotations

import importlib

_PRISTINE: dict[str, object] = {}
_PATCHED: set[str] = set()
_SHELL: dict = {}


def _split(name: str) -> tuple[str, str]:
    module, _, attr = name.rpartition(".")
    if not module or not attr:
        raise ValueError(f"trusted names look like 'module.function', got {name!r}")
    return module, attr


def _owner(module_name: str):
    """The module, or for 'numpy.testing' style paths whose last part is an attribute, that object."""
    try:
        return importlib.import_module(module_name)
    except ImportError:
        parent, _, attr = module_name.rpartition(".")
        return getattr(_owner(parent), attr)


def _resolve(name: str):
    module, attr = _split(name)
    return getattr(_owner(module), attr)


def capture(names) -> None:
    """Remember the current objects behind ``names`` (call it before learner code runs)."""
    for name in names:
        if name not in _PRISTINE:
            try:
                _PRISTINE[name] = _resolve(name)
            except (ImportError, AttributeError):
                continue  # a library this machine lacks: the test that needs it fails on its own


def trusted(*names):
    """The pristine objects behind ``names`` (one object for one name, else a tuple), restored in place."""
    found = []
    for name in names:
        module, attr = _split(name)
        owner = _owner(module)
        current = getattr(owner, attr)
        original = _PRISTINE.setdefault(name, current)
        if current is not original:
            _PATCHED.add(name)
            setattr(owner, attr, original)
        found.append(original)
    return found[0] if len(found) == 1 else tuple(found)


def patched() -> list[str]:
    """Names found replaced by learner code since ``capture`` (checked by ``trusted`` and here)."""
    for name, original in _PRISTINE.items():
        try:
            if _resolve(name) is not original:
                _PATCHED.add(name)
        except (ImportError, AttributeError):
            _PATCHED.add(name)
    return sorted(_PATCHED)


def _shell_objects(ip) -> list:
    kernel = getattr(ip, "kernel", None)
    found = [ip, kernel, getattr(kernel, "session", None), ip.displayhook, ip.display_pub]
    return [obj for obj in found if obj is not None]


def capture_shell() -> None:
    """Remember IPython's hooks, transformers and the methods of its shell, kernel and session."""
    from IPython import get_ipython

    ip = get_ipython()
    if ip is None:
        return
    _SHELL.update(
        ip=ip,
        manager=ip.input_transformer_manager,
        lists={
            "ast_transformers": list(ip.ast_transformers),
            "input_transformers_post": list(ip.input_transformers_post),
        },
        manager_lists={
            name: list(value) for name, value in vars(ip.input_transformer_manager).items() if isinstance(value, list)
        },
        callbacks={name: list(value) for name, value in ip.events.callbacks.items()},
        classes={cls: dict(vars(cls)) for obj in _shell_objects(ip) for cls in type(obj).__mro__ if cls is not object},
    )


def reset_shell() -> None:
    """Put back what ``capture_shell`` saw: the grader runs this before each test. Defence in
    depth only: the verdict does not depend on it (see rocmlab.grading.cells)."""
    if not _SHELL:
        return
    ip = _SHELL["ip"]
    for cls, saved in _SHELL["classes"].items():
        for name, value in saved.items():
            if callable(value) and vars(cls).get(name) is not value:
                try:
                    setattr(cls, name, value)
                except (AttributeError, TypeError):
                    continue
    for obj in _shell_objects(ip):
        for name in [n for n, v in vars(obj).items() if callable(v) and callable(getattr(type(obj), n, None))]:
            delattr(obj, name)
    ip.input_transformer_manager = _SHELL["manager"]
    for name, saved in _SHELL["manager_lists"].items():
        setattr(ip.input_transformer_manager, name, list(saved))
    for name, saved in _SHELL["lists"].items():
        setattr(ip, name, list(saved))
    for name, saved in _SHELL["callbacks"].items():
        ip.events.callbacks[name] = list(saved)
    ip.set_custom_exc((), None)
