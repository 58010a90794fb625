"""Figures a lab measures (bandwidth, TFLOPS, TTFT), recorded so the freshness dashboard can plot
them across runs and releases: ``lab.record_figure("copy_bandwidth", 1234.5, "GB/s")``.

The figure is displayed as a cell output under its own MIME type, with a plain-text line for
the learner; the executed notebook keeps it, and ``rocmlab report`` reads it from there.
"""

from __future__ import annotations

import math

FIGURE_MIME = "application/vnd.rocmlab.figure+json"


def record_figure(name: str, value: float, unit: str = "") -> dict:
    """Show and record one measured figure; returns what was recorded."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a figure needs a name, got {name!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"figure {name!r}: value must be a finite number, got {value!r}")
    figure = {"name": name, "value": value, "unit": unit}
    from IPython.display import display

    display({FIGURE_MIME: figure, "text/plain": f"{name} = {value:g} {unit}".rstrip()}, raw=True)
    return figure
