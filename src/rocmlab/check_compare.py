"""The comparisons a lab's checks make (``solutions/<lab>/checks.py``), in one place.

A check compares what the learner's kernel answered (plain data, ``rocmlab.lab.answers``) with
the reference it computed itself. These functions do it the same way in every lab, and their
messages name what was compared and where it differs::

    assert_close(got, want, rtol=1e-4, atol=1e-7, what=label("gradient", world=world))
    assert_equal(learner.call("bill", n), {"params": 2 * n, "grads": 2 * n}, what="bill")

The rules:

- **Structure.** A dict asked is matched by any mapping with the same keys, a tuple by any tuple
  (a ``namedtuple`` too), a list by a list; each item is compared by the same rules, and a
  message names its path (``bill['grads']``, ``layers[2][0]``). ``rocmlab.lab.answers`` sends an
  ``OrderedDict`` or a ``namedtuple`` as its plain value for the same reason: the text asks for a
  dict or a tuple, and those are ones. A bool is not a number, and no number is a bool.
- **Numbers, arrays and tensors.** A tensor is asked as a tensor, an array as a numpy array, a
  number as a real number (int, float or numpy scalar). Shapes must be equal, and dtypes too
  unless ``dtype=False``. ``assert_close`` holds where ``|got - want| <= atol + rtol * |want|``
  (numpy's and torch's rule: the reference's magnitude scales the tolerance); ``assert_equal``
  where they are equal.
- **NaN and infinity.** Where the reference is finite, a NaN or an infinity fails, and the message
  gives its index. Where the reference is NaN, only NaN passes; where it is an infinity, only the
  same infinity.
- **What the learner reads.** A wrong kind, shape or dtype begins the message with a learner-safe
  detail (``[[learner: shape (2, 3), expected (3, 2)]]``, shown beside the rule on the feedback
  page, ``grading.feedback.learner_detail``); values and indices stay the instructor's.
"""

from __future__ import annotations

from collections.abc import Mapping

RTOL, ATOL = 1e-5, 1e-8  # numpy.allclose's defaults
# torch dtypes numpy holds as they are (the others are read as float32)
NUMPY_HAS = frozenset(
    ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64", "complex128")
)


def assert_close(got, want, *, rtol: float = RTOL, atol: float = ATOL, what: str = "value", dtype: bool = True):
    """``got`` is ``want`` within ``rtol``/``atol`` (numbers, arrays and tensors, also inside dicts,
    lists and tuples); AssertionError naming ``what`` and where otherwise."""
    found = _mismatch(got, want, what, _Rule(rtol, atol, dtype))
    if found:
        raise AssertionError(found)


def assert_equal(got, want, *, what: str = "value", dtype: bool = True):
    """``got`` equals ``want`` as plain data (the rules above, with no tolerance)."""
    found = _mismatch(got, want, what, _Rule(0.0, 0.0, dtype, exact=True))
    if found:
        raise AssertionError(found)


def is_close(got, want, *, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Whether ``assert_close(got, want, rtol=rtol, atol=atol, dtype=False)`` holds."""
    return _mismatch(got, want, "value", _Rule(rtol, atol, dtype=False)) is None


def label(what: str, **inputs) -> str:
    """``what`` with the inputs it was computed from, for a message:
    ``label("forward", layers=3, depth=2)`` is ``"forward (layers=3, depth=2)"``."""
    shown = ", ".join(f"{k}={_short(v, 40)}" for k, v in inputs.items())
    return f"{what} ({shown})" if shown else what


# ---------------------------------------------------------------- the rules


class _Rule:
    def __init__(self, rtol: float, atol: float, dtype: bool, exact: bool = False):
        self.rtol, self.atol, self.dtype, self.exact = float(rtol), float(atol), dtype, exact


def _mismatch(got, want, path: str, rule: _Rule) -> str | None:
    """Why ``got`` does not match ``want`` (the first difference, named by its path), or None."""
    if _is_array(want):
        return _array_mismatch(got, want, path, rule)
    if isinstance(want, Mapping):
        return _mapping_mismatch(got, want, path, rule)
    if isinstance(want, (tuple, list)):
        return _sequence_mismatch(got, want, path, rule)
    if _is_bool(want):
        ok = _is_bool(got) and bool(got) == bool(want)
        return None if ok else f"{path}: got {_short(got)}, expected {want!r}"
    if _is_number(want):
        if not _is_number(got):
            return f"{learner_says(f'expected a number, got {_kind(got)}', f'应为数值，得到 {_kind(got)}')}{path}: got {_short(got)}"
        return _number_mismatch(got, want, path, rule)
    if isinstance(want, (set, frozenset)):
        ok = isinstance(got, (set, frozenset)) and got == want
        return None if ok else f"{path}: got {_short(got)}, expected {_short(want)}"
    return None if type(got) is type(want) and got == want else f"{path}: got {_short(got)}, expected {_short(want)}"


def _mapping_mismatch(got, want: Mapping, path: str, rule: _Rule) -> str | None:
    if not isinstance(got, Mapping):
        return f"{learner_says(f'expected a dict, got {_kind(got)}', f'应为 dict，得到 {_kind(got)}')}{path}: got {_short(got)}"
    missing, extra = [k for k in want if k not in got], [k for k in got if k not in want]
    if missing or extra:
        return f"{path}: keys differ: missing {_short(missing)}, unexpected {_short(extra)}"
    for key in want:
        found = _mismatch(got[key], want[key], f"{path}[{key!r}]", rule)
        if found:
            return found
    return None


def _sequence_mismatch(got, want, path: str, rule: _Rule) -> str | None:
    kind = tuple if isinstance(want, tuple) else list
    if not isinstance(got, kind):
        return f"{learner_says(f'expected a {kind.__name__}, got {_kind(got)}', f'应为 {kind.__name__}，得到 {_kind(got)}')}{path}: got {_short(got)}"
    if len(got) != len(want):
        return f"{path}: {len(got)} items, expected {len(want)}"
    for index, (g, w) in enumerate(zip(got, want)):
        found = _mismatch(g, w, f"{path}[{index}]", rule)
        if found:
            return found
    return None


def _number_mismatch(got, want, path: str, rule: _Rule) -> str | None:
    import numpy as np

    if rule.exact and _is_integral(got) and _is_integral(want):  # exactly, however large
        return None if int(got) == int(want) else f"{path}: got {_short(got)}, expected {_short(want)}"
    common = np.complex128 if isinstance(got, complex) or isinstance(want, complex) else np.float64
    return _values_mismatch(np.asarray(got, dtype=common), np.asarray(want, dtype=common), path, rule)


def _array_mismatch(got, want, path: str, rule: _Rule) -> str | None:
    torch_wanted = _is_torch(want)
    if not (_is_torch(got) if torch_wanted else _is_numpy(got)):
        en, zh = ("a tensor", "张量 (tensor)") if torch_wanted else ("a numpy array", "numpy 数组")
        told = learner_says(f"expected {en}, got {_kind(got)}", f"应为{zh}，得到 {_kind(got)}")
        return f"{told}{path}: got {_short(got)}"
    shape, wanted = tuple(got.shape), tuple(want.shape)
    if shape != wanted:
        return (
            f"{learner_says(f'shape {shape}, expected {wanted}', f'形状为 {shape}，应为 {wanted}')}{path}: wrong shape"
        )
    if rule.dtype and got.dtype != want.dtype:
        told = learner_says(f"dtype {got.dtype}, expected {want.dtype}", f"dtype 为 {got.dtype}，应为 {want.dtype}")
        return f"{told}{path}: wrong dtype"
    return _values_mismatch(_numpy(got), _numpy(want), path, rule)


def _values_mismatch(got, want, path: str, rule: _Rule) -> str | None:
    """The NaN, infinity and tolerance rules over two numpy arrays of one shape."""
    import numpy as np

    if rule.exact and not (got.dtype.kind in "fc" or want.dtype.kind in "fc"):
        wrong = got != want
        return _first(wrong, got, want, path, "differs") if wrong.any() else None
    common = np.complex128 if "c" in got.dtype.kind + want.dtype.kind else np.float64
    g, w = got.astype(common), want.astype(common)
    w_finite, g_finite = np.isfinite(w), np.isfinite(g)
    not_finite = w_finite & ~g_finite
    if not_finite.any():
        return _first(not_finite, got, want, path, "is not finite where the reference is finite")
    w_nan = np.isnan(w)
    if (w_nan & ~np.isnan(g)).any():
        return _first(w_nan & ~np.isnan(g), got, want, path, "is not nan where the reference is")
    w_inf = ~w_finite & ~w_nan
    if (w_inf & (g != w)).any():
        return _first(w_inf & (g != w), got, want, path, "is not the reference's infinity")
    with np.errstate(invalid="ignore", over="ignore"):
        delta = np.where(w_finite, np.abs(g - w), 0.0)
        wrong = delta > rule.atol + rule.rtol * np.abs(np.where(w_finite, w, 0.0))
    if not wrong.any():
        return None
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(wrong, delta, -1.0))), delta.shape))
    tolerance = "" if rule.exact else f" (rtol {rule.rtol:g}, atol {rule.atol:g})"
    return (
        f"{path}: {int(wrong.sum())} of {wrong.size} differ{tolerance}; the largest |diff| {float(delta[worst]):.3g}"
        f"{_at(worst)}: got {_short(got[worst].item())}, expected {_short(want[worst].item())}"
    )


def _first(mask, got, want, path: str, what: str) -> str:
    import numpy as np

    index = tuple(int(i) for i in np.argwhere(mask)[0])
    count = int(mask.sum())
    more = f" ({count} such elements)" if count > 1 else ""
    return f"{path}{_at(index)}: {_short(got[index].item())} {what} {_short(want[index].item())}{more}"


def _at(index: tuple) -> str:
    return f" at index {index if len(index) != 1 else index[0]}" if index else ""


# ---------------------------------------------------------------- kinds of values


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _is_numpy(value) -> bool:
    return type(value).__module__.split(".")[0] == "numpy" and hasattr(value, "shape") and hasattr(value, "dtype")


def _is_array(value) -> bool:
    return _is_torch(value) or (_is_numpy(value) and getattr(value, "ndim", 0) > 0)


def _is_number(value) -> bool:
    """A real or complex number that is not a bool: int, float, complex, a numpy scalar."""
    if _is_bool(value):
        return False
    if isinstance(value, (int, float, complex)):
        return True
    return _is_numpy(value) and getattr(value, "ndim", 1) == 0 and value.dtype.kind in "iufc"


def _is_bool(value) -> bool:
    return isinstance(value, bool) or (_is_numpy(value) and getattr(value, "ndim", 1) == 0 and value.dtype.kind == "b")


def _is_integral(value) -> bool:
    return isinstance(value, int) or (_is_numpy(value) and value.dtype.kind in "iu")


def _numpy(value):
    """A tensor or array as a numpy array of the same values (bfloat16 and float8 as float32)."""
    if _is_torch(value):
        tensor = value.detach().cpu()
        if str(tensor.dtype).removeprefix("torch.") not in NUMPY_HAS:
            tensor = tensor.float()  # bfloat16, float8: every value is a float32
        return tensor.resolve_conj().numpy()
    return value


def _kind(value) -> str:
    return type(value).__name__


def learner_says(en: str, zh: str) -> str:
    """A learner-safe detail in both languages, to begin an assertion's message: the feedback page
    shows the learner's language (``grading.feedback.learner_detail``); the rest of the message,
    values and indices, stays the instructor's."""
    return f"[[learner: {en[:115]} |zh| {zh[:115]}]] "


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
