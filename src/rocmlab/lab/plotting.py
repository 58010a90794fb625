"""Small plotting helpers so that notebooks show a labelled figure in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def _axes(ax, title, xlabel, ylabel, logx=False, logy=False):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    return ax


def plot_lines(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title="",
    xlabel="",
    ylabel="",
    logx=False,
    logy=False,
    ax=None,
    marker="o",
):
    """Plot named ``(xs, ys)`` series on one axes; returns the axes."""
    ax = _axes(ax, title, xlabel, ylabel, logx, logy)
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker=marker, label=name)
    if len(series) > 1:
        ax.legend()
    return ax


def plot_bars(values: Mapping[str, float], *, title="", ylabel="", ax=None, reference=None):
    """Bar chart of named values, with an optional horizontal reference line (e.g. a peak)."""
    ax = _axes(ax, title, "", ylabel)
    names = list(values)
    ax.bar(names, [values[n] for n in names])
    if reference is not None:
        ax.axhline(reference, color="red", linestyle="--", label="reference")
        ax.legend()
    return ax
