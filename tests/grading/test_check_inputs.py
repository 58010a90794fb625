"""Every lab's hidden checks draw their inputs per learner: two seeds give two different sets of
tensors in every check that draws them through ``variant.torch()`` (issue 47: torch's CPU
generator keeps the low 32 bits of its seed, and ``seed * 2**32 + crc32(name)`` kept none of the
seed, so every learner got the same tensors)."""

import ast
from pathlib import Path

import pytest
import torch

from rocmlab.harness import Variant, hidden_files, load_checks

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
CHECK_FILES = sorted(SOLUTIONS.glob("*/checks.py"))


def _is_check(node: ast.FunctionDef) -> bool:
    return any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "check" for d in node.decorator_list
    )


def _draws_directly(node: ast.FunctionDef) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == "torch" and isinstance(n.value, ast.Name) and n.value.id == "variant"
        for n in ast.walk(node)
    )


def _called(node: ast.FunctionDef) -> set[str]:
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def checks_drawing_tensors(path: Path) -> list[str]:
    """The checks of ``path`` that draw tensors from ``variant.torch()``, themselves or through a
    function of the file they call."""
    functions = {n.name: n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)}
    drawing = {name for name, node in functions.items() if _draws_directly(node)}
    while grown := {n for n, node in functions.items() if n not in drawing and _called(node) & drawing}:
        drawing |= grown
    return [name for name, node in functions.items() if _is_check(node) and name in drawing]


def test_the_torch_stream_depends_on_the_whole_seed():
    # the old derivation: seeds 1 and 2 shared their low 32 bits, and so their whole stream
    old = [torch.rand(4, generator=torch.Generator().manual_seed(s * 2**32 + 5)) for s in (1, 2)]
    assert torch.equal(*old)
    for seeds in ((1, 2), (0, 2**32), (7, 7 + 2**31)):
        a, b = (torch.rand(64, generator=Variant(s, "check").torch()) for s in seeds)
        assert not torch.equal(a, b), seeds
    assert torch.equal(
        torch.rand(8, generator=Variant(9, "c").torch()), torch.rand(8, generator=Variant(9, "c").torch())
    )
    assert 0 <= Variant(2**31 - 1, "x" * 300).torch_seed < 2**63


@pytest.mark.parametrize("path", CHECK_FILES, ids=lambda p: p.parent.name)
def test_two_seeds_give_two_sets_of_tensors_in_every_check_that_draws_them(path):
    names = checks_drawing_tensors(path)
    loaded = {c.name for c in load_checks(path.read_text(encoding="utf-8"), str(path), hidden_files(path))}
    assert set(names) <= loaded
    for name in names:
        for first, second in ((11, 12), (123456, 654321), (0, 2**31 - 1)):
            a, b = (torch.randn(256, generator=Variant(seed, name).torch()) for seed in (first, second))
            assert not torch.equal(a, b), (
                f"{path.parent.name}: {name} draws the same tensors for seeds {first}, {second}"
            )


def test_the_labs_that_draw_tensors_are_found():
    found = {p.parent.name[:2]: checks_drawing_tensors(p) for p in CHECK_FILES}
    assert {lab for lab, names in found.items() if names} >= {"03", "05", "07", "08", "10"}
