"""rocmlab.lab.qc_adapter: lab 03's prompt, kept in step with lab 03's source; the cached build, whose
reference recipe (solutions/03-lora-finetune-zh/course_adapter.py) is outside the learner's package."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import unicodedata
from pathlib import Path

import pytest
from labsource import LabSource

from rocmlab.assets.cache import CacheError
from rocmlab.lab import qc_adapter

BUILDER = qc_adapter.course_builder()

LAB03 = Path(__file__).resolve().parents[2] / "solutions" / "03-lora-finetune-zh" / "lab.py"
WANTED = {"ANSWER_KEYS", "SYSTEM_PROMPT", "to_answer", "to_messages"}


def lab03_prompt_code():
    """Lab 03's own definitions of the answer keys, the system prompt and the chat turns."""
    tree = ast.parse(LAB03.read_text(encoding="utf-8"))
    nodes = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name in WANTED)
        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in WANTED for t in n.targets))
    ]
    namespace = {"json": json}
    exec(compile(ast.Module(nodes, []), str(LAB03), "exec"), namespace)  # noqa: S102 (the course's own lab source)
    assert WANTED <= set(namespace), f"lab 03 no longer defines {sorted(WANTED - set(namespace))}"
    return namespace


def test_prompt_and_answer_are_lab03s():
    lab03 = lab03_prompt_code()
    assert qc_adapter.SYSTEM_PROMPT == lab03["SYSTEM_PROMPT"]
    assert qc_adapter.ANSWER_KEYS == lab03["ANSWER_KEYS"]
    record = {
        "product_line": "PCB 组装",
        "description": "焊点发灰，疑似冷焊",
        "report": {k: f"值{i}" for i, k in enumerate(lab03["ANSWER_KEYS"])} | {"extra": "x"},
    }
    expected = lab03["to_messages"](record)
    assert qc_adapter.qc_messages(record["product_line"], record["description"], lab03["to_answer"](record)) == expected
    assert qc_adapter.qc_messages(record["product_line"], record["description"]) == expected[:2]


def test_training_records_drop_repeats_and_eval_leaks():
    from rocmlab.assets.loaders import load_qc_reports

    records = BUILDER.training_records()
    keys = [BUILDER._normal(r["description"]) for r in records]
    assert records and len(keys) == len(set(keys))
    assert not set(keys) & {BUILDER._normal(r["description"]) for r in load_qc_reports("eval")}


def lab03_fit_records(seed: int) -> list[dict]:
    """``fit_records`` as lab 03's own pipeline cell makes them, with its solution functions."""
    from rocmlab.assets.loaders import load_qc_reports

    source = LabSource("03-lora-finetune-zh")
    namespace = source.run_solutions("03-data-sol-1", namespace={"hashlib": hashlib, "unicodedata": unicodedata})
    (cell,) = [c.source for c in source.code_cells if "fit_records, dev_records = split_by_hash" in c.source]
    namespace |= {"train_records": load_qc_reports("train"), "eval_records": load_qc_reports("eval"), "SEED": seed}
    exec(compile(cell, "lab 03's pipeline cell", "exec"), namespace)  # noqa: S102 (the course's own lab source)
    return namespace["fit_records"]


@pytest.mark.parametrize("seed", [0, 2])
def test_the_build_trains_on_lab03s_fit_records_in_their_order(seed):
    """Lab 03's loop must reproduce the build's losses step by step: same records, same order."""
    assert [r["id"] for r in BUILDER.training_records(seed)] == [r["id"] for r in lab03_fit_records(seed)]


def test_a_cache_that_cannot_be_written_is_a_clear_error(tmp_path, monkeypatch):
    """Lab 03 falls back to training every step on CommandFailed: a read-only cache must raise it, not OSError."""
    import filelock

    from rocmlab.errors import CommandFailed

    class ReadOnlyLock:  # a lock file in a read-only cache cannot be made
        def __init__(self, *args, **kwargs):
            pass

        def acquire(self, *args, **kwargs):
            raise OSError(30, "Read-only file system")

        def __enter__(self):
            self.acquire()

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(qc_adapter, "adapter_dir", lambda *a, **k: tmp_path / "adapters" / "x")
    monkeypatch.setattr(filelock, "FileLock", ReadOnlyLock)
    with pytest.raises(CommandFailed, match="Read-only file system"):
        qc_adapter.ensure_qc_adapter(log=None)


@pytest.mark.slow
def test_adapter_is_built_once_cached_and_rebuilt_when_partial(tmp_path, monkeypatch):
    monkeypatch.setitem(qc_adapter.RECIPES, "tiny", {**qc_adapter.RECIPES["tiny"], "steps": 3})
    monkeypatch.setattr(BUILDER, "LOG_EVERY", 2)
    monkeypatch.setattr(qc_adapter, "course_builder", lambda root=None: BUILDER)
    lines, umask = [], os.umask(0o077)  # a builder whose umask hides its files from everyone else
    try:
        built = qc_adapter.ensure_qc_adapter(cache_dir=tmp_path, log=lines.append)
    finally:
        os.umask(umask)
    assert [line.split(" loss")[0].strip() for line in lines if "step" in line][:2] == ["step 2/3", "step 3/3"], lines
    # read by other users: the grader users' kernels and each learner's server
    assert {oct(p.stat().st_mode & 0o777) for p in built.iterdir()} == {"0o644"}, [p.stat() for p in built.iterdir()]
    assert built.stat().st_mode & 0o777 == 0o755
    manifest = json.loads((built / qc_adapter.MANIFEST).read_text(encoding="utf-8"))
    assert manifest["steps"] == 3 and (built / "adapter_model.safetensors").is_file()
    assert len(manifest["losses"]) == 3 and qc_adapter.read_manifest(built) == manifest
    assert built.parent == tmp_path / "adapters" and not list(tmp_path.glob("adapters/*.building-*"))

    def no_training(*args, **kwargs):
        raise AssertionError("a valid cached adapter must not be trained again")

    monkeypatch.setattr(BUILDER, "train", no_training)
    assert qc_adapter.ensure_qc_adapter(cache_dir=tmp_path, log=None) == built
    (built / "adapter_model.safetensors").write_bytes(b"cut")
    with pytest.raises(AssertionError, match="must not be trained"):
        qc_adapter.ensure_qc_adapter(cache_dir=tmp_path, log=None)


def test_lab03s_answers_are_not_in_the_package_a_learner_imports():
    """Issue 47: the split, the answer-only loss and the padding of lab 03 live in solutions/ (hidden
    from graded kernels, closed on a hub); the package keeps the prompt, the recipe's numbers, the cache."""
    public = {name for name in vars(qc_adapter) if not name.startswith("__")}
    assert not public & {"training_records", "in_dev_split", "_normal", "_sample", "_fit", "_train", "train"}
    assert BUILDER.__file__ == str(Path(__file__).resolve().parents[2] / qc_adapter.BUILDER)


def test_without_the_course_checkout_a_missing_adapter_is_a_clear_error(tmp_path, monkeypatch):
    """A learner's kernel sees the cache but not solutions/: it says where to build, never trains."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROCMLAB_ROOT", raising=False)
    monkeypatch.setattr(qc_adapter, "adapter_dir", lambda *a, **k: tmp_path / "adapters" / "x")
    with pytest.raises(CacheError, match="building it needs the course"):
        qc_adapter.ensure_qc_adapter(log=None)
    (tmp_path / "course").mkdir()
    with pytest.raises(CacheError, match=r"course_adapter.py cannot be read here: .*python -m rocmlab.lab.qc_adapter"):
        qc_adapter.course_builder(tmp_path / "course")


def lab03_parameters(profile: str) -> dict:
    """Lab 03's parameters cell (its literal assignments) overridden by the profile's params."""
    source = LabSource("03-lora-finetune-zh")
    defaults = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in ast.parse(source.parameters).body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    return defaults | source.lab.profiles[profile].params


@pytest.mark.parametrize(("recipe", "profile"), [("tiny", "smoke"), ("real", "gpu")])
def test_adapter_recipe_is_lab03s(recipe, profile):
    params = lab03_parameters(profile)
    assert qc_adapter.RECIPES[recipe] == {
        "r": params["LORA_R"],
        "alpha": params["LORA_ALPHA"],
        "steps": params["MAX_STEPS"],
        "batch_size": params["BATCH_SIZE"],
        "lr": params["LEARNING_RATE"],
        "warmup_fraction": params["WARMUP_FRACTION"],
        "dropout": params["LORA_DROPOUT"],
        "max_len": params["MAX_LEN"],
    }, f"lab 03's {profile} profile changed: update qc_adapter.RECIPES[{recipe!r}]"
