"""The kernel's side of the grading channel, and the wire format both sides share.

The trusted harness (``rocmlab.harness``) never runs learner code in its own interpreter. It
sends the learner's kernel a request (an expression over the learner's names, with values it
chose), and the kernel answers with the result as plain data: JSON types, with tagged objects
for what JSON lacks (tuples, bytes, numpy arrays and torch tensors as raw ``.npy`` buffers read
with ``allow_pickle=False``, a raised exception as its type names and message). Anything else
arrives as its type name only, so it cannot be compared equal to anything.

A check's own kernel-side code is a lab's module of functions (``solutions/<lab>/in_kernel.py``),
sent by the harness with its requests and compiled once per kernel (``evaluate``'s ``run``).

Whatever the kernel sends is only an answer: learner code may replace ``serve`` or forge the
message, and the harness still compares the data it received with its own reference.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
from collections.abc import Mapping

ANSWER_MIME = "application/x-rocmlab-answer+json"
TAG = "$rocmlab"
MAX_DEPTH = 24
TORCH_VIA_FLOAT32 = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
# the dtypes an answer's tensor may name (the name travels; the dtype is looked up here, never on torch)
TORCH_DTYPES = (
    *("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"),
    *("float16", "float32", "float64", "complex64", "complex128", *TORCH_VIA_FLOAT32),
)
# the numpy dtypes an array may hold: a kind (bool, signed, unsigned, float, complex, bytes, text)
# and a positive item size, so that an array's bytes cover its elements
NUMPY_KINDS = "biufcSU"
MAX_ARRAY_BYTES = 64 * 2**20


# ---------------------------------------------------------------- encode (either side)


def encode(value, depth: int = 0):
    """``value`` as JSON-able data. A subclass of ``str``, ``int`` or ``float`` is sent as the
    plain value it holds (whatever its ``__eq__`` says); other objects as their type name only."""
    if depth > MAX_DEPTH:
        return {TAG: "object", "type": "too deep"}
    kind = type(value)
    if value is None or kind in (bool, str):
        return value
    if kind is int:
        return value if abs(value) < 2**53 else {TAG: "int", "v": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {TAG: "float", "v": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {TAG: "tuple", "v": [encode(v, depth + 1) for v in value]}
    if kind in (set, frozenset):
        return {TAG: "set", "v": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        if all(type(k) is str for k in value):
            return {k: encode(v, depth + 1) for k, v in value.items()} if TAG not in value else _pairs(value, depth)
        return _pairs(value, depth)
    if kind is bytes:
        return {TAG: "bytes", "b64": base64.b64encode(value).decode()}
    plain = _plain_container(value)
    if plain is not None:  # an OrderedDict, a namedtuple, a list subclass: compared by value
        return encode(plain, depth + 1)
    for base in (str, int, float):  # a subclass (torch's TorchVersion, an enum) travels as its value
        if isinstance(value, base) and base in kind.__mro__:
            return encode(base.__new__(base, value), depth + 1)
    return _encode_array(value) or {TAG: "object", "type": f"{kind.__module__}.{kind.__qualname__}"}


def _plain_container(value):
    """The plain dict, tuple or list a mapping, tuple subclass or list subclass holds (None for
    anything else). The lab's text asks for a dict or a tuple, and an ``OrderedDict`` or a
    ``namedtuple`` is one; a check that needs the exact type asks for ``type(x).__name__``."""
    if isinstance(value, Mapping):
        return {k: value[k] for k in value}
    if isinstance(value, tuple):
        return tuple(value)
    if isinstance(value, list):
        return list(value)
    return None


def _pairs(value: dict, depth: int) -> dict:
    return {TAG: "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}


def _encode_array(value):
    module = type(value).__module__.split(".")[0]
    if module == "numpy":
        import numpy as np

        if isinstance(value, np.generic):
            return {TAG: "scalar", "dtype": str(value.dtype), "npy": _npy(np.asarray(value))}
        if type(value) is np.ndarray and value.dtype != object:
            return {TAG: "ndarray", "npy": _npy(value)}
    if module == "torch":
        import torch

        if type(value) is torch.Tensor or type(value) is torch.nn.Parameter:
            tensor = value.detach().cpu()
            dtype = str(tensor.dtype).removeprefix("torch.")
            plain = tensor.float() if dtype in TORCH_VIA_FLOAT32 else tensor
            return {
                TAG: "tensor",
                "dtype": dtype,
                "stride": list(value.stride()),
                "contiguous": bool(value.is_contiguous()),
                "device": value.device.type,
                "npy": _npy(plain.contiguous().numpy()),
            }
        if type(value) is torch.dtype:
            return {TAG: "torch.dtype", "v": str(value).removeprefix("torch.")}
        if type(value) is torch.Size:
            return {TAG: "tuple", "v": list(value)}
    return None


def _npy(array) -> str:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def encode_raised(exc: BaseException) -> dict:
    mro = [
        f"{c.__module__}.{c.__qualname__}" if c.__module__ != "builtins" else c.__qualname__ for c in type(exc).__mro__
    ]
    return {TAG: "raised", "type": mro[0], "mro": mro, "message": str(exc)[:500]}


# ---------------------------------------------------------------- decode (either side)


class Raised:
    """An exception the kernel raised for a request: its type, the names of its classes, its text."""

    def __init__(self, data: dict):
        self.type, self.mro, self.message = (
            str(data.get("type")),
            [str(m) for m in data.get("mro", [])],
            str(data.get("message", "")),
        )

    def is_a(self, name: str) -> bool:
        return name in self.mro

    def __repr__(self) -> str:
        return f"Raised({self.type})"


class Opaque:
    """A value that is not plain data (its type name only): equal to nothing."""

    def __init__(self, type_name: str):
        self.type = type_name

    def __repr__(self) -> str:
        return f"<{self.type}>"


def decode(data, depth: int = 0):
    """Plain data back into values: numpy arrays and torch tensors (with their dtype), tuples,
    ``Raised`` and ``Opaque``. Reads ``.npy`` with ``allow_pickle=False`` and nothing else."""
    if depth > MAX_DEPTH + 2:
        raise ValueError("answer nested too deep")
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if not isinstance(data, dict):
        return data
    tag = data.get(TAG)
    if tag is None:
        return {k: decode(v, depth + 1) for k, v in data.items()}
    if tag == "tuple":
        return tuple(decode(v, depth + 1) for v in data["v"])
    if tag == "set":
        return {_hashable(decode(v, depth + 1)) for v in data["v"]}
    if tag == "dict":
        return {_hashable(decode(k, depth + 1)): decode(v, depth + 1) for k, v in data["v"]}
    if tag == "int":
        return int(data["v"])
    if tag == "float":
        return float(data["v"])
    if tag == "bytes":
        return base64.b64decode(data["b64"])
    if tag in ("ndarray", "scalar"):
        array = _load_npy(data["npy"])
        return array[()] if tag == "scalar" else array
    if tag == "tensor":
        return _tensor(data)
    if tag == "torch.dtype":
        return _torch_dtype(data.get("v"))
    if tag == "raised":
        return Raised(data)
    return Opaque(str(data.get("type", "object")))


def _hashable(value):
    return Opaque(type(value).__name__) if isinstance(value, (list, dict, set)) else value


def _torch_dtype(name):
    """The torch dtype ``name`` stands for, from ``TORCH_DTYPES`` only (ValueError otherwise)."""
    import torch

    if name not in TORCH_DTYPES or not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"not a dtype an answer may hold: {str(name)[:40]!r}")
    return getattr(torch, name)


def _load_npy(text):
    """A ``.npy`` payload as an array, read only if its header names a plain dtype of
    ``NUMPY_KINDS`` and its bytes hold every element it claims (at most ``MAX_ARRAY_BYTES``)."""
    import numpy as np

    if not isinstance(text, str) or len(text) > 2 * MAX_ARRAY_BYTES:
        raise ValueError("array payload missing or too large")
    raw = base64.b64decode(text, validate=True)
    buffer = io.BytesIO(raw)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    reader = readers.get(np.lib.format.read_magic(buffer))
    if reader is None:
        raise ValueError("not a .npy version an answer may use")
    shape, _, dtype = reader(buffer, max_header_size=10_000)
    if dtype.kind not in NUMPY_KINDS or dtype.fields is not None or dtype.subdtype is not None or dtype.itemsize <= 0:
        raise ValueError(f"not a dtype an answer may hold: {dtype.str}")
    count = math.prod(shape)
    if count * dtype.itemsize > MAX_ARRAY_BYTES or len(raw) - buffer.tell() != count * dtype.itemsize:
        raise ValueError(f"array of {count} elements of {dtype.itemsize} bytes does not match its {len(raw)} bytes")
    return np.load(io.BytesIO(raw), allow_pickle=False)


def _tensor(data: dict):
    import torch

    dtype = _torch_dtype(data.get("dtype"))
    tensor = torch.from_numpy(_load_npy(data["npy"]).copy())
    if dtype != tensor.dtype:
        tensor = tensor.to(dtype)
    tensor.rocmlab_layout = {k: data.get(k) for k in ("stride", "contiguous", "device")}
    return tensor


# ---------------------------------------------------------------- the kernel's request handler

_COMPILED: dict[str, object] = {}  # a lab's kernel-side module, compiled once per kernel


def evaluate(request: dict, names: dict):
    """The answer to one request, over a copy of the learner's ``names``: with ``run``, the
    named function of the lab's kernel-side module (``request["module"]``) called with the
    request's ``args`` and ``values``; otherwise the value of ``request["expr"]`` with the
    request's values bound. Or the exception it raised."""
    scope = dict(names)
    values = {k: decode(v) for k, v in (request.get("values") or {}).items()}
    try:
        if request.get("run"):
            return encode(_run(request, scope, values))
        scope.update(values)
        return encode(eval(request["expr"], scope))
    except Exception as exc:  # noqa: BLE001 (the learner's error is the answer)
        return encode_raised(exc)


def _run(request: dict, scope: dict, values: dict):
    """``request["run"]`` of the lab's kernel-side module, defined over ``scope`` (the copy of the
    learner's names, so the module's free names are the notebook's) and called."""
    module = request["module"]
    exec(_compiled(module["source"], module["filename"]), scope)  # noqa: S102 (the course's kernel-side module)
    return scope[request["run"]](*decode(request.get("args") or []), **values)


def _compiled(source: str, filename: str):
    key = hashlib.sha256(f"{filename}\0{source}".encode()).hexdigest()
    if key not in _COMPILED:
        _COMPILED[key] = compile(source, filename, "exec")
    return _COMPILED[key]


def serve(request_json: str) -> None:
    """Answer one harness request in this kernel: display the answer as ``ANSWER_MIME``."""
    from IPython import get_ipython
    from IPython.display import display

    answer = evaluate(json.loads(request_json), get_ipython().user_ns)
    display({ANSWER_MIME: answer}, raw=True)
