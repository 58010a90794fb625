"""[[cuda]] entries of the release matrix: the device check's NVIDIA machines (docs/device-check.md),
read apart from the entries a lab is judged on, so that a CUDA run is never a ROCm verdict."""

from pathlib import Path

import pytest

from rocmlab.freshness import matrix
from rocmlab.freshness.matrix import MatrixError

ROOT = Path(__file__).resolve().parents[2]

GOOD = """schema = 1

[[cpu]]
name = "cpu-current"
python = "3.11"
status = "current"
pins = ["torch==2.14.1"]
sources = [{ url = "https://pypi.org/project/torch/", seen = 2026-12-01, facts = ["pins"], fact = "torch 2.14.1" }]

[[cuda]]
name = "cuda-h100"
device = "NVIDIA H100 80GB HBM3"
python = "3.12"
pytorch = "2.11.0"
cuda = "13.0"
status = "current"
unverified = ["device", "python"]
sources = [{ url = "https://download.pytorch.org/whl/cu130/", seen = 2026-12-06, facts = ["pytorch", "cuda"], fact = "2.11.0+cu130" }]
"""


def test_the_real_matrix_has_its_cuda_entry_apart_from_the_judged_ones():
    m = matrix.read_matrix(ROOT / "env" / "matrix.toml")
    assert [e.name for e in m.cuda] == ["cuda-h100"]
    entry = m.get("cuda-h100")
    assert (entry.kind, entry.device, entry.cuda) == ("cuda", "NVIDIA H100 80GB HBM3", "13.0")
    assert all(e.kind in ("rocm", "cpu") for e in matrix.load_matrix(ROOT / "env" / "matrix.toml"))
    assert matrix.newest_environment(path=ROOT / "env" / "matrix.toml").kind == "rocm"


def test_a_good_cuda_entry_loads(tmp_path):
    path = tmp_path / "matrix.toml"
    path.write_text(GOOD, encoding="utf-8")
    m = matrix.read_matrix(path)
    assert [e.name for e in m.entries] == ["cpu-current"] and m.cuda[0].pytorch == "2.11.0"


BAD = [
    ('name = "cuda-h100"', 'name = "h100"', "[[cuda]] entry 'h100'", "name"),
    ('cuda = "13.0"\n', "", "[[cuda]] entry 'cuda-h100': missing field", "cuda"),
    ('pytorch = "2.11.0"', 'pytorch = "2.11"', "[[cuda]] entry 'cuda-h100'", "pytorch"),
    ('unverified = ["device", "python"]', 'unverified = ["device"]', "[[cuda]] entry 'cuda-h100'", "sources"),
    ('name = "cuda-h100"', 'name = "cpu-current"', "entry 'cpu-current'", "name"),
]


@pytest.mark.parametrize("old,new,where,field", BAD, ids=[b[3] + "-" + b[1][:12] for b in BAD])
def test_a_bad_cuda_entry_names_the_file_entry_and_field(tmp_path, old, new, where, field):
    path = tmp_path / "matrix.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(MatrixError) as err:
        matrix.read_matrix(path)
    message = str(err.value)
    assert str(path) in message and where in message and repr(field) in message, message
