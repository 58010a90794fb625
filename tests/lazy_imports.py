"""Heavy libraries a test module needs, checked at collection and imported where a test uses them.

pytest-xdist's every worker imports every test module to collect it, and the imports at the top of
a module run there whether or not that worker then runs the module's tests: peft and transformers
alone are seconds of CPU per worker. A module calls ``skip_unless_installed`` at its top (it skips
the module as ``pytest.importorskip`` would, without running the library's code) and imports the
library inside the fixtures and tests that use it.
"""

import importlib.util

import pytest


def skip_unless_installed(*names: str) -> None:
    """Skip the calling test module when one of the top-level packages ``names`` is not installed."""
    for name in names:
        if "." in name:
            raise ValueError(f"{name!r}: name a top-level package; finding a submodule imports its parents")
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"could not import {name!r}: it is not installed", allow_module_level=True)
