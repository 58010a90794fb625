"""The helper library that lab notebooks import (``from rocmlab import lab``).

Plumbing only: device choice, seeding, synchronized timers, plotting, loading the course
model and data (re-exported from ``rocmlab.assets``), launching torchrun. The idea a lab teaches is written in the notebook.
Names load lazily so that ``import rocmlab.lab`` stays cheap and torch-free.
"""

from importlib import import_module

_EXPORTS = {
    "describe_environment": "env",
    "pick_device": "env",
    "seed_everything": "env",
    "synchronize": "env",
    "Timer": "timing",
    "time_it": "timing",
    "plot_lines": "plotting",
    "plot_bars": "plotting",
    "load_qc_reports": "rocmlab.assets.loaders",
    "load_qc_kb": "rocmlab.assets.loaders",
    "qc_taxonomy": "rocmlab.assets.loaders",
    "qc_signals": "rocmlab.assets.loaders",
    "load_model": "models",
    "resolve_model": "models",
    "run_torchrun": "launch",
    "TorchrunResult": "launch",
    "RankOutput": "launch",
    "leftover_processes": "launch",
    "backend_threads": "teardown",
    "end_process_group": "teardown",
    "ScriptedSSEServer": "sse",
    "active_sse_servers": "sse",
}


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"rocmlab.lab has no attribute {name!r}")
    return getattr(import_module(module if "." in module else f"{__name__}.{module}"), name)


def __dir__():
    return sorted(_EXPORTS)


__all__ = sorted(_EXPORTS)
