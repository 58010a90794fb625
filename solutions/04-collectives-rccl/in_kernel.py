"""Lab 04's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

``busbw_vs_peak`` (the learner's, the notebook's own name) takes an ``Interconnect`` row, which
the check cannot send as plain data: these build the row in the kernel and return the learner's
answer for ``checks.py`` to judge against its reference.
"""

from rocmlab.lab.datasheets import Interconnect, interconnect


def peak_of_row(busbw, key, n):
    """``busbw_vs_peak`` against the course table's row ``key``."""
    return busbw_vs_peak(busbw, interconnect(key), n)


def peak_of_fabric(busbw, fields, n):
    """``busbw_vs_peak`` against a fabric made from ``fields`` (``Interconnect``'s, in order)."""
    return busbw_vs_peak(busbw, Interconnect(*fields), n)
