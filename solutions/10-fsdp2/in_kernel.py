"""Lab 10's kernel-side helpers: what a hidden check runs in the kernel (``learner.run``).

Each function builds the inputs an exercise's function needs where they live (modules, an
optimizer, a checkpoint folder), calls the learner's function and returns plain data for
``checks.py`` to judge. ``launched`` starts a rank script the check wrote under torchrun and hands
back what the ranks saved; ``single_process_run`` is asked of the reference kernel only. The
learner's functions (``set_prefetch``, ``rank_loss``, ``save_checkpoint``, ``load_latest_checkpoint``,
``export_full_model``) are the notebook's own names: this module is run over a copy of them.
"""

import inspect
import json
import shutil
import tempfile
import textwrap
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from transformers import AutoModelForCausalLM, AutoTokenizer

from rocmlab import lab
from rocmlab.lab.launch import import_lines, run_torchrun


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


def saved_paths(seed, steps, form, name):
    """``save_checkpoint`` at each of ``steps`` into the new folder ``name`` (the check's), ``root``
    given as ``ROOT_FORMS[form]``: the paths it returned, as it returned them, and whether each
    step's ``.metadata`` exists."""
    root, trainer = Path(name), _Trainer(seed)
    root.mkdir()
    try:
        returned, complete = [], []
        for step in steps:
            trainer.step()
            returned.append(str(save_checkpoint(trainer.model, trainer.optimizer, step, ROOT_FORMS[form](root))))
            complete.append((root / f"step-{step:06d}" / ".metadata").is_file())
        return returned, complete
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _net(state):
    """The two-layer net of ``_Trainer`` holding the model ``state`` (``{name: tensor}``), and a
    fresh AdamW optimizer of it."""
    model, optimizer = _Trainer.fresh()
    model.load_state_dict(state)
    return model, optimizer


def _set_moments(model, optimizer, moments):
    """The optimizer's ``exp_avg`` / ``exp_avg_sq`` of each parameter set to ``moments[name]``
    (one step taken first, so that the optimizer has its state)."""
    model(torch.zeros(1, 5)).sum().backward()
    optimizer.step()
    for name, p in model.named_parameters():
        optimizer.state[p]["exp_avg"].copy_(moments[name][0])
        optimizer.state[p]["exp_avg_sq"].copy_(moments[name][1])


def _moments(model, optimizer):
    return {
        n: [optimizer.state[p][k].clone() for k in ("exp_avg", "exp_avg_sq")]
        for n, p in model.named_parameters()
        if p in optimizer.state
    }


def loaded_latest(start, saved, torn):
    """``load_latest_checkpoint`` on an empty root, then on checkpoints this module's own
    ``dcp.save`` wrote, one per ``[step, model state, moments]`` of ``saved`` (the check's tensors),
    beside a torn ``step-{torn}`` folder (no ``.metadata``); each time into the net holding the
    model state ``start`` and a fresh optimizer. ``(empty's step, the model state and moments after
    it, the step loaded, the model state and moments loaded)``: the check compares them with its own."""
    root = _check_folder("lab10-check-")
    try:
        model, optimizer = _net(start)
        empty = load_latest_checkpoint(model, optimizer, root)
        after_empty = dict(model.state_dict()), _moments(model, optimizer)
        for step, state, moments in saved:
            model, optimizer = _net(start)
            _set_moments(model, optimizer, moments)
            model.load_state_dict(state)
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(root / f"step-{step:06d}"))
        (root / f"step-{torn:06d}").mkdir()
        (root / f"step-{torn:06d}" / "__0_0.distcp").write_bytes(b"torn")
        model, optimizer = _net(start)
        loaded = load_latest_checkpoint(model, optimizer, root)
        return empty, *after_empty, loaded, dict(model.state_dict()), _moments(model, optimizer)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def exported(model, noise, seed, out_name, text):
    """``export_full_model`` of a DCP checkpoint of ``model`` with ``noise`` added to its named
    parameters (small seeded noise elsewhere), into ``out_name`` of a fresh folder: (what it
    returned, its type's name, the files in out_dir, the noisy parameters as transformers loads
    them back from out_dir, ``text``'s ids by the tokenizer loaded back from out_dir)."""
    folder = _check_folder("lab10-export-check-")
    try:
        noisy, _ = lab.load_model(model, device="cpu", dtype=torch.float32)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            for name, p in noisy.named_parameters():
                p.add_(
                    noise[name] if name in noise else torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.01
                )
        dcp.save({"model": noisy.state_dict()}, checkpoint_id=str(folder / "ckpt"))
        fresh, fresh_tokenizer = lab.load_model(model, device="cpu", dtype=torch.float32)
        out = export_full_model(folder / "ckpt", fresh, fresh_tokenizer, folder / out_name)
        back = AutoModelForCausalLM.from_pretrained(folder / out_name, dtype=torch.float32).state_dict()
        files = sorted(p.name for p in (folder / out_name).iterdir())
        ids = AutoTokenizer.from_pretrained(folder / out_name)(text)["input_ids"]
        return str(out), type(out).__name__, files, {k: back[k] for k in noise}, ids
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def single_process_run(cfg, steps, keep):
    """Section 4's single-process run (the notebook's ``train_single_process``) on the check's
    ``cfg``: its losses and its final ``keep`` parameters. Asked of the reference kernel, whose
    ``train_single_process`` is the solution's."""
    losses, params = train_single_process(cfg, steps)
    return {"losses": losses, "final": {name: params[name] for name in keep}}


def rank_inputs(names):
    """The learner's part of a rank script: the import lines of every module and imported name the
    notebook has bound (``rocmlab.lab.launch.import_lines``, as the notebook's ``write_rank_script``
    writes them) and the source of each function of ``names`` (None where there is none)."""
    found = {}
    for name in names:
        function = globals().get(name)
        try:
            found[name] = textwrap.dedent(inspect.getsource(function)) if callable(function) else None
        except (OSError, TypeError):
            found[name] = None
    return {"imports": import_lines(globals()), "sources": found}


def launched(script, cfg, nproc, timeout_s, max_restarts=0, env=None, keep=()):
    """A run of ``script`` (the rank script the check wrote) on ``nproc`` ranks under the course's
    ``run_torchrun``, in a folder of its own, with ``cfg`` (the check's) completed with the folder's
    ``out`` and ``ckpt`` and the backend: whether it ended well or timed out, torchrun's output, each rank's result
    (None where it wrote none; only the ``keep`` parameters of its ``final`` and ``snapshot``) and the
    lines of the run's ``train_log.jsonl``."""
    folder = Path(tempfile.mkdtemp(prefix="lab10-launch-check-", dir=".")).resolve()
    try:
        backend = cfg["backend"]
        if backend == "auto":  # the notebook's backend_for: nccl only with one GPU per rank
            backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc else "gloo"
        out, ckpt = folder / "out", folder / "finetune" / "checkpoints"
        ckpt.mkdir(parents=True)
        (folder / "ranks.py").write_text(script, encoding="utf-8")
        run = run_torchrun(
            folder / "ranks.py",
            nproc=nproc,
            args=[json.dumps(dict(cfg, out=str(out), ckpt=str(ckpt), backend=backend))],
            env=env,
            timeout_s=timeout_s,
            max_restarts=max_restarts,
            cwd=folder,
            show=False,
        )
        log = ckpt.parent / "train_log.jsonl"
        return {
            "backend": backend,
            "ok": run.ok,
            "timed_out": run.timed_out,
            "output": run.output,
            "ranks": [_rank_result(out / f"rank{r}.pt", keep) for r in range(nproc)],
            "log": [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else [],
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _rank_result(path, keep):
    if not path.exists():
        return None
    result = torch.load(path, weights_only=True)
    for key in ("final", "snapshot"):
        if isinstance(result.get(key), dict):
            result[key] = {name: result[key][name] for name in keep if name in result[key]}
    return result
