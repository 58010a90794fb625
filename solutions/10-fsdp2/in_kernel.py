"""Lab 10's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

Each function builds the inputs an exercise's function needs where they live (modules, an
optimizer, a checkpoint folder), calls the learner's function and returns plain data for
``checks.py`` to judge. The learner's functions (``set_prefetch``, ``rank_loss``,
``save_checkpoint``, ``load_latest_checkpoint``, ``export_full_model``) are the notebook's own
names: this module is run over a copy of them.
"""

import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from transformers import AutoModelForCausalLM

from rocmlab import lab


class _Layer:
    """A stand-in for a sharded block: records what ``set_prefetch`` asks it to prefetch."""

    def __init__(self, index):
        self.index, self.forward, self.backward = index, None, None

    def set_modules_to_forward_prefetch(self, modules):
        self.forward = [m.index for m in modules]

    def set_modules_to_backward_prefetch(self, modules):
        self.backward = [m.index for m in modules]


def prefetch_lists(n, depth):
    """``(forward, backward)`` indices per layer after ``set_prefetch`` over ``n`` layers."""
    layers = [_Layer(i) for i in range(n)]
    set_prefetch(layers, depth)
    return [(layer.forward, layer.backward) for layer in layers]


def rank_gradient(logits, labels, n_global, world):
    """The gradient of ``rank_loss`` with respect to ``logits``."""
    x = logits.clone().requires_grad_()
    (grad,) = torch.autograd.grad(rank_loss(x, labels, n_global, world), x)
    return grad


class _Trainer:
    """A two-layer net and its AdamW optimizer, trained a step at a time on random inputs."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.model, self.optimizer = self.fresh()

    @staticmethod
    def fresh():
        model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    def step(self):
        self.model(torch.randn(4, 5)).sum().backward()
        self.optimizer.step()


ROOT_FORMS = {"Path": lambda p: p, "str": str, "absolute str": lambda p: str(p.resolve())}


def _check_folder(prefix):
    return Path(tempfile.mkdtemp(prefix=prefix, dir="."))  # relative, as a learner may pass it


def saved_paths(seed, steps, form):
    """``save_checkpoint`` at each of ``steps``, ``root`` given as ``ROOT_FORMS[form]``: the paths
    it returned (resolved), the root (resolved), and whether each step's ``.metadata`` exists."""
    root, trainer = _check_folder("lab10-check-"), _Trainer(seed)
    try:
        returned, complete = [], []
        for step in steps:
            trainer.step()
            returned.append(str(save_checkpoint(trainer.model, trainer.optimizer, step, ROOT_FORMS[form](root))))
            complete.append((root / f"step-{step:06d}" / ".metadata").is_file())
        return [str(Path(p).resolve()) for p in returned], str(root.resolve()), complete
    finally:
        shutil.rmtree(root, ignore_errors=True)


def loaded_latest(seed, steps, torn):
    """``load_latest_checkpoint`` on an empty root, then on checkpoints this module's own
    ``dcp.save`` wrote at ``steps`` beside a torn ``step-{torn}`` folder (no ``.metadata``):
    (empty's step, empty's optimizer state count, the step loaded, the saved model state, the
    loaded one, the saved first ``exp_avg``, the loaded one)."""
    root, trainer = _check_folder("lab10-check-"), _Trainer(seed)
    try:
        empty = load_latest_checkpoint(trainer.model, trainer.optimizer, root)
        empty_state = len(trainer.optimizer.state)
        for step in steps:
            trainer.step()
            model_state, optim_state = get_state_dict(trainer.model, trainer.optimizer)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(root / f"step-{step:06d}"))
        want = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        want_m = trainer.optimizer.state_dict()["state"][0]["exp_avg"].clone()
        (root / f"step-{torn:06d}").mkdir()
        (root / f"step-{torn:06d}" / "__0_0.distcp").write_bytes(b"torn")
        model, optimizer = _Trainer.fresh()
        loaded = load_latest_checkpoint(model, optimizer, root)
        got_m = optimizer.state_dict()["state"][0]["exp_avg"].clone()
        return empty, empty_state, loaded, want, dict(model.state_dict()), want_m, got_m
    finally:
        shutil.rmtree(root, ignore_errors=True)


def parameter_shapes(model):
    """``{name: shape}`` of the course model ``model``'s parameters."""
    loaded, _ = lab.load_model(model, device="cpu", dtype=torch.float32)
    return {n: tuple(p.shape) for n, p in loaded.named_parameters()}


def exported(model, keys, noise, seed):
    """``export_full_model`` of a DCP checkpoint of ``model`` with ``noise`` added to ``keys``
    (small seeded noise elsewhere), loaded back by transformers: (what it returned, the out_dir
    asked, its type's name, the files in out_dir, ``keys``' values before the noise, after)."""
    folder = _check_folder("lab10-export-check-")
    try:
        noisy, _ = lab.load_model(model, device="cpu", dtype=torch.float32)
        base = {k: noisy.state_dict()[k].clone() for k in keys}
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            for name, p in noisy.named_parameters():
                p.add_(
                    noise[name] if name in noise else torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.01
                )
        dcp.save({"model": noisy.state_dict()}, checkpoint_id=str(folder / "ckpt"))
        fresh, fresh_tokenizer = lab.load_model(model, device="cpu", dtype=torch.float32)
        out = export_full_model(folder / "ckpt", fresh, fresh_tokenizer, folder / "out")
        back = AutoModelForCausalLM.from_pretrained(folder / "out", dtype=torch.float32).state_dict()
        files = sorted(p.name for p in (folder / "out").iterdir())
        return str(out), str(folder / "out"), type(out).__name__, files, base, {k: back[k] for k in keys}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
