"""Lab 05's hidden checks, run by the trusted harness (rocmlab.harness) after the notebook.

No check starts a process: the lab's kernel-side module (`in_kernel.py`) runs the ranks of
exercise 1 as threads of the learner's kernel that talk through a stand-in for `torch.distributed`,
and gives exercises 2 and S2 a stand-in for `DDP` with one replica (DDP's own averaging is not what
they grade). The references are computed here, with this file's code.
"""

import io
import math
from pathlib import PurePosixPath

import torch
import torch.nn.functional as F

from rocmlab import course_data
from rocmlab.check_compare import learner_says
from rocmlab.harness import check, mistake, own_work

# ---------------------------------------------------------------- references (this file's own code)


def mlp_state(gen, hidden):
    return {
        "0.weight": torch.randn(hidden, 8, generator=gen, dtype=torch.float64) * 0.4,
        "0.bias": torch.randn(hidden, generator=gen, dtype=torch.float64) * 0.1,
        "2.weight": torch.randn(1, hidden, generator=gen, dtype=torch.float64) * 0.4,
        "2.bias": torch.randn(1, generator=gen, dtype=torch.float64) * 0.1,
    }


def reference_mlp(state, frozen_bias=False):
    hidden = state["0.weight"].shape[0]
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)).double()
    model.load_state_dict(state)
    if frozen_bias:
        model[0].bias.requires_grad_(False)
    return model


def reference_sgd(state, x, y, batches, lr, momentum=0.0, frozen_bias=False):
    model = reference_mlp(state, frozen_bias)
    opt = torch.optim.SGD([p for p in model.parameters()], lr=lr, momentum=momentum)
    for idx in batches:
        idx = torch.as_tensor(idx, dtype=torch.long)
        loss = F.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def regression(gen, n):
    x = torch.randn(n, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(8, 1, generator=gen, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    return x, y


def sampler_order(n, world, rank, seed, epoch):
    """DistributedSampler(shuffle=True, drop_last=False): a permutation seeded with seed + epoch,
    padded with its own head to a multiple of world, rank r taking items r, r+W, ..."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    total = math.ceil(n / world) * world
    perm = (perm * math.ceil(total / n))[:total]
    return perm[rank:total:world]


def assert_state(got, want, what, atol):
    assert isinstance(got, dict) and set(got) == set(want), (
        f"{what}: names {sorted(got) if isinstance(got, dict) else got}"
    )
    for k in want:
        assert isinstance(got[k], torch.Tensor) and tuple(got[k].shape) == tuple(want[k].shape), f"{what}: {k} shape"
        diff = float((got[k].double() - want[k]).abs().max())
        assert diff <= atol, f"{what}: {k} differs by {diff:.3e}"


# ---------------------------------------------------------------- exercise 1: data parallelism from scratch


@check(
    "05-scratch-1",
    points=1,
    en="broadcast_parameters copies every parameter of rank src (frozen ones too) into all ranks",
    zh="broadcast_parameters 把 rank src 的每个参数（包括冻结的）复制到所有 rank",
)
def scratch_broadcast(learner, variant):
    gen = variant.torch()
    n = variant.random.randint(2, 4)
    src = variant.random.randrange(n)
    hidden = variant.random.randint(3, 12)
    states = [mlp_state(gen, hidden) for _ in range(n)]
    got = learner.run("broadcast_states", states, src)
    assert isinstance(got, list) and len(got) == n, "one state per rank"
    for r in range(n):
        assert_state(got[r], states[src], f"rank {r} after broadcast from {src}", atol=0.0)


@mistake(
    en="the gradients all-reduced with SUM and never divided by the world size: the step is world_size times too large",
    zh="梯度用 SUM 做 all-reduce 后没有除以 world size：每步大了 world_size 倍",
    code="""
def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
""",
)
@check(
    "05-scratch-1",
    points=0.75,
    en="average_gradients replaces each .grad by its mean over all ranks",
    zh="average_gradients 把每个 .grad 换成它在所有 rank 上的平均",
)
def scratch_average(learner, variant):
    gen = variant.torch()
    n = variant.random.randint(2, 4)
    hidden = variant.random.randint(3, 12)
    state = mlp_state(gen, hidden)
    grads = [{k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in state.items()} for _ in range(n)]
    got = learner.run("averaged_gradients", state, grads, False)
    mean = {k: sum(g[k] for g in grads) / n for k in state}
    for r in range(n):
        assert_state(got[r], mean, f"rank {r} gradients", atol=1e-12)


@check(
    "05-scratch-1",
    points=0.25,
    en="average_gradients skips parameters whose .grad is None (frozen ones)",
    zh="average_gradients 跳过 .grad 为 None 的参数（冻结的）",
)
def scratch_skip_frozen(learner, variant):
    gen = variant.torch()
    n = variant.random.randint(2, 4)
    state = mlp_state(gen, variant.random.randint(3, 12))
    grads = [{k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in state.items()} for _ in range(n)]
    got = learner.run("averaged_gradients", state, grads, True)
    for r in range(n):
        assert got[r]["0.bias"] is None, f"rank {r}: the frozen bias got a gradient"
        for k in ("0.weight", "2.weight", "2.bias"):
            want = sum(g[k] for g in grads) / n
            assert float((got[r][k] - want).abs().max()) <= 1e-12, f"rank {r}: {k}"


@check(
    "05-scratch-1",
    points=1,
    en="training with both on every rank equals single-process SGD on the global batch (float64, 1e-12)",
    zh="各 rank 用这两个函数训练的结果等于单进程在全局批上的 SGD（float64，1e-12）",
)
def scratch_training(learner, variant):
    gen = variant.torch()
    n = variant.random.randint(2, 4)
    hidden = variant.random.randint(4, 16)
    per_rank = variant.random.randint(2, 5)
    steps = variant.random.randint(3, 7)
    lr = variant.random.choice([0.02, 0.05, 0.1])
    x, y = regression(gen, 48)
    inits = [mlp_state(gen, hidden) for _ in range(n)]
    batches = [torch.randperm(48, generator=gen)[: n * per_rank].tolist() for _ in range(steps)]
    got = learner.run("scratch_train", inits, lr, batches, per_rank, x, y)
    want = reference_sgd(inits[0], x, y, batches, lr, frozen_bias=True)
    for r in range(n):
        assert_state(got[r], want, f"rank {r} vs single process", atol=1e-12)


# ---------------------------------------------------------------- exercise 2: DDP and DistributedSampler


@check(
    "05-ddp-1",
    points=1,
    en="make_sharded_loader yields batches of per_rank_batch in DistributedSampler(seed) order for its rank",
    zh="make_sharded_loader 按 DistributedSampler(seed) 的顺序给出本 rank 的批，每批 per_rank_batch 个",
)
def ddp_loader(learner, variant):
    gen = variant.torch()
    world = variant.random.randint(2, 4)
    per_rank = variant.random.randint(2, 5)
    n = world * per_rank * variant.random.randint(2, 4) + variant.random.choice([0, 0, 1])
    seed = variant.random.randint(0, 10_000)
    x, y = regression(gen, n)
    got = learner.run("sharded_orders", x, y, per_rank, world, seed)
    for rank in range(world):
        for epoch in (0, 1):
            want = sampler_order(n, world, rank, seed, epoch)
            batches = got[rank][epoch]
            assert [i for b in batches for i in b] == want, f"rank {rank}, epoch {epoch}: order"
            assert all(len(b) == per_rank for b in batches[:-1]) and 0 < len(batches[-1]) <= per_rank, "batch sizes"


def ddp_train(learner, variant, epochs):
    """Run train_ddp_epochs for one rank of a harness-chosen world (one replica: DDP is the stand-in)."""
    gen = variant.torch()
    world = variant.random.randint(2, 4)
    rank = variant.random.randrange(world)
    per_rank = variant.random.randint(2, 5)
    n = world * per_rank * variant.random.randint(2, 3)
    seed = variant.random.randint(0, 10_000)
    lr = variant.random.choice([0.02, 0.05, 0.1])
    x, y = regression(gen, n)
    state = mlp_state(gen, variant.random.randint(4, 12))
    got = learner.run("ddp_train", x, y, per_rank, world, rank, seed, lr, state, epochs)
    orders = [sampler_order(n, world, rank, seed, e) for e in range(epochs)]
    return got, orders, (state, x, y, per_rank, lr)


@mistake(
    en="set_epoch never called: every epoch repeats the first epoch's shuffle",
    zh="从不调用 set_epoch：每个 epoch 都重复第一个 epoch 的打乱顺序",
    code="""
def train_ddp_epochs(model, loader, epochs, lr, device):
    ddp = DDP(model, device_ids=device_ids_for(device))
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    seen = []
    for epoch in range(epochs):
        order = []
        for idx, xb, yb in loader:
            loss = F.mse_loss(ddp(xb.to(device)), yb.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            order += idx.tolist()
        seen.append(order)
    return ddp, seen
""",
)
@check(
    "05-ddp-1",
    points=1,
    en="train_ddp_epochs calls set_epoch(epoch) at the start of every epoch: seen follows the sampler's order",
    zh="train_ddp_epochs 在每个 epoch 开始时调用 set_epoch(epoch)：seen 与采样器的顺序一致",
)
def ddp_set_epoch(learner, variant):
    epochs = variant.random.randint(2, 3)
    got, orders, _ = ddp_train(learner, variant, epochs)
    seen = got[2]
    assert isinstance(seen, list) and len(seen) == epochs, "one list per epoch"
    for e, want in enumerate(orders):
        assert all(type(i) is int for i in seen[e]), "indices are ints"
        assert seen[e] == want, f"epoch {e}: not the sampler's order for seed + epoch"


@check(
    "05-ddp-1",
    points=1,
    en="train_ddp_epochs wraps the model in DDP and runs SGD(lr) on the MSE loss, one step per batch",
    zh="train_ddp_epochs 用 DDP 包装模型，每个批做一步 SGD(lr)、MSE 损失",
)
def ddp_trains(learner, variant):
    epochs = variant.random.randint(1, 2)
    got, orders, (state, x, y, per_rank, lr) = ddp_train(learner, variant, epochs)
    wrapped, params, _, built = got
    assert getattr(wrapped, "type", "").endswith("_OneReplicaDDP"), f"returned {wrapped!r}, not the DDP model"
    assert len(built) == 1 and built[0]["device_ids"] is None, f"DDP built {built}"
    batches = [order[i : i + per_rank] for order in orders for i in range(0, len(order), per_rank)]
    want = reference_sgd(state, x, y, batches, lr)
    assert_state(params, want, "parameters after training", atol=1e-12)


# ---------------------------------------------------------------- exercise 3: atomic checkpoints


def checkpoint_state(variant):
    gen = variant.torch()
    step = variant.random.randint(1, 10_000)
    return {"step": step, "payload": torch.randn(variant.random.randint(3, 200), generator=gen, dtype=torch.float64)}


def loads(data):
    return torch.load(io.BytesIO(data), weights_only=True)


def saved_with_spy(learner, variant):
    name = variant.random.choice(["ckpt.pt", "model-state.pt", "last.ckpt", "step.bin"])
    state = checkpoint_state(variant)
    got = learner.run("spied_save", name, state)
    return name, state, got


@check(
    "05-ckpt-1",
    points=1,
    en="the temporary file sits next to path, is named <name>.tmp-..., and is fsynced before the rename",
    zh="临时文件与 path 同目录、名为 <文件名>.tmp-...，并在改名之前 fsync",
)
def ckpt_temporary(learner, variant):
    name, state, (calls, listing, data) = saved_with_spy(learner, variant)
    moves = [i for i, c in enumerate(calls) if c[0] in ("replace", "rename")]
    assert moves, "no os.replace / os.rename"
    src, dst = (PurePosixPath(p) for p in calls[moves[0]][1][:2])
    assert dst.name == name and src.parent == dst.parent, f"the rename goes {src} -> {dst}"
    assert src.name.startswith(name + ".tmp-"), f"temporary named {src.name}"
    assert any(c[0] == "fsync" and not c[1] for c in calls[: moves[0]]), "no fsync of the file before the rename"
    got = loads(data)
    assert got["step"] == state["step"] and torch.equal(got["payload"], state["payload"]), "the file holds the state"
    assert listing == [name], f"left in the folder: {listing}"


@check(
    "05-ckpt-1",
    points=1,
    en="exactly one os.replace (or os.rename) onto path, then an fsync of the directory",
    zh="恰好一次 os.replace（或 os.rename）到 path，之后对目录 fsync",
)
def ckpt_one_rename(learner, variant):
    name, _, (calls, _, _) = saved_with_spy(learner, variant)
    moves = [i for i, c in enumerate(calls) if c[0] in ("replace", "rename")]
    assert len(moves) == 1, f"{len(moves)} renames"
    assert PurePosixPath(calls[moves[0]][1][1]).name == name, "the rename's target is not path"
    assert any(c[0] == "fsync" and c[1] for c in calls[moves[0] + 1 :]), "no fsync of the directory after the rename"


@check(
    "05-ckpt-1",
    points=1,
    en="a failing save raises, leaves the old file as it was and no temporary behind",
    zh="保存失败时抛出异常，旧文件保持不变，不留下临时文件",
)
def ckpt_failure(learner, variant):
    name = variant.random.choice(["ckpt.pt", "model-state.pt", "last.ckpt"])
    state = checkpoint_state(variant)
    raised, before, data, listing = learner.run("failed_save", name, state)
    assert raised is not None, "a state that cannot be pickled was saved without an error"
    assert data == before, "the failed save changed the old checkpoint"
    assert listing == [name], f"left in the folder: {listing}"


# ---------------------------------------------------------------- exercise 4: elastic restart


def saved_training(variant):
    """A model and SGD-with-momentum optimizer after a few steps, saved as the lab's checkpoint dict."""
    gen = variant.torch()
    hidden = variant.random.randint(3, 12)
    model = reference_mlp(mlp_state(gen, hidden))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = regression(gen, 16)
    for _ in range(variant.random.randint(1, 3)):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    step = variant.random.randint(1, 500)
    buffer = io.BytesIO()
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return buffer.getvalue(), step, params, momentum, mlp_state(gen, hidden)


@check(
    "05-elastic-1",
    points=1,
    en="resume_from_checkpoint loads the saved model and returns the saved step as an int",
    zh="resume_from_checkpoint 装回保存的模型，并以 int 返回保存的步数",
)
def resume_model(learner, variant):
    blob, step, params, _, init = saved_training(variant)
    got_step, got_params, _ = learner.run("resumed", blob, init)
    assert type(got_step) is int and got_step == step, f"returned {got_step!r}, saved step {step}"
    assert_state(got_params, params, "resumed model", atol=0.0)


@check(
    "05-elastic-1",
    points=1,
    en="resume_from_checkpoint restores the optimizer state (the momentum buffers)",
    zh="resume_from_checkpoint 恢复优化器状态（动量缓冲区）",
)
def resume_momentum(learner, variant):
    blob, _, _, momentum, init = saved_training(variant)
    _, _, got = learner.run("resumed", blob, init)
    assert isinstance(got, list) and len(got) == len(momentum), "one buffer per parameter"
    for g, w in zip(got, momentum):
        assert isinstance(g, torch.Tensor) and torch.equal(g, w), "momentum buffer not restored"


@check(
    "05-elastic-1",
    points=0.5,
    en="without a checkpoint file it changes nothing and returns 0",
    zh="没有检查点文件时不做任何改动并返回 0",
    counts_with="resume_model",
)
def resume_absent(learner, variant):
    init = mlp_state(variant.torch(), variant.random.randint(3, 12))
    got_step, got_params, momentum = learner.run("resumed", None, init)
    assert type(got_step) is int and got_step == 0, f"returned {got_step!r}"
    assert_state(got_params, init, "model without a checkpoint", atol=0.0)
    assert all(m is None for m in momentum), "the optimizer got state"


ELASTIC_FIXED = {
    "n": 64,
    "global_batch": 16,
    "hidden": 16,
    "lr": 0.05,
    "momentum": 0.9,
    "steps": 9,
    "every": 2,
    "crash_at": 5,
    "crash_rank": 1,
}


def lab_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g, dtype=torch.float64)
    w = torch.randn(8, 1, generator=g, dtype=torch.float64)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=g, dtype=torch.float64)
    return x, y


def lab_batch(step, cfg):
    g = torch.Generator().manual_seed(cfg["seed"] * 100_003 + step)
    return torch.randperm(cfg["n"], generator=g)[: cfg["global_batch"]]


@check(
    "05-elastic-1",
    points=0.5,
    en="the crashed run resumes from the last checkpoint on restart 1 and ends like an uninterrupted run",
    zh="崩溃的训练在第 1 次重启时从最后一个检查点恢复，结果与不中断的训练相同",
)
def elastic_run(learner, variant):
    cfg = {**ELASTIC_FIXED, "seed": PARAMETERS["SEED"]}  # noqa: F821 (the notebook's ELASTIC_CFG, the run's SEED)
    ranks = learner.get("elastic_ranks")
    assert isinstance(ranks, list) and len(ranks) >= 2, "one result per rank"
    with torch.random.fork_rng():
        torch.manual_seed(cfg["seed"])  # the lab's make_mlp(seed, hidden)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    want_start = (cfg["crash_at"] // cfg["every"]) * cfg["every"]
    x, y = lab_data(cfg["n"], cfg["seed"])
    want = reference_sgd(init, x, y, [lab_batch(s, cfg) for s in range(cfg["steps"])], cfg["lr"], cfg["momentum"])
    for r, got in enumerate(ranks):
        assert isinstance(got, dict), f"rank {r} wrote no result"
        assert got["attempt"] == 1 and got["resumed_from"] == want_start, (
            f"rank {r}: {got['attempt']}, {got['resumed_from']}"
        )
        assert_state(got["params"], want, f"rank {r} vs uninterrupted", atol=1e-12)


# ---------------------------------------------------------------- exercise 5: the QC fine-tune

# The pieces the lab gives (the course tokenizer, qc_items, qc_messages, qc_answer) are made here,
# on the harness's side (rocmlab.course_data, from the run's MODEL and the course's QC reports):
# the learner's kernel gets the items as data and the notebook's tokenizer to tokenize them with,
# and its build_qc_batch must put them together as the contract says. Nothing the kernel computes
# with the notebook's qc_* helpers, which a later cell may rebind, is the expectation.
TOKENIZERS = {"course": ("ft_tokenizer", False), "base-like": ("base_like", True)}


def qc_case(learner, variant, tokenizer="course", cut=None):
    """(pieces, pad id, max_len, the learner's batch) for a few QC items; max_len from `cut`: None
    pads every row, "answer" cuts inside an answer, "prompt" inside a prompt."""
    model, (name, base_like) = PARAMETERS["MODEL"], TOKENIZERS[tokenizer]  # noqa: F821 (the run's, from the harness)
    with own_work("the QC items and their tokens"):
        items = course_data.qc_train_items()
        picked = [items[i] for i in variant.random.sample(range(len(items)), variant.random.randint(2, 4))]
        pieces = course_data.qc_pieces(model, picked, base_like)
        pad = course_data.chat_tokenizer(model, base_like).pad_token_id
    lengths = [len(p) + len(a) for p, a in pieces]
    if cut is None:
        max_len = max(lengths) + variant.random.randint(1, 16)
    elif cut == "answer":
        longest = max(range(len(pieces)), key=lambda i: lengths[i])
        max_len = variant.random.randint(len(pieces[longest][0]) + 1, lengths[longest] - 1)
    else:
        max_len = variant.random.randint(2, min(len(p) for p, _ in pieces) - 1)
    batch = learner.eval(f"build_qc_batch(__items, {name}, __max_len)", __items=picked, __max_len=max_len)
    return pieces, pad, max_len, batch


def expected_rows(pieces, pad, max_len):
    rows = []
    for prompt, answer in pieces:
        ids = (prompt + answer)[:max_len]
        labels = ([-100] * len(prompt) + answer)[:max_len]
        fill = max_len - len(ids)
        rows.append((ids + [pad] * fill, [1] * len(ids) + [0] * fill, labels + [-100] * fill))
    return rows


def learner_rows(batch, i):
    return [batch[k][i].tolist() for k in ("input_ids", "attention_mask", "labels")]


@check(
    "05-finetune-1",
    points=0.4,
    en="build_qc_batch returns input_ids, attention_mask and labels as LongTensors of shape (len(items), max_len)",
    zh="build_qc_batch 返回 input_ids、attention_mask、labels，均为形状 (len(items), max_len) 的 LongTensor",
    counts_with="qc_prompt_answer",  # any stub of the right shape holds it
)
def qc_shapes(learner, variant):
    pieces, _, max_len, batch = qc_case(learner, variant, cut=variant.random.choice([None, "answer"]))
    assert isinstance(batch, dict), f"returned {type(batch).__name__}"
    for key in ("input_ids", "attention_mask", "labels"):
        value = batch.get(key)
        assert isinstance(value, torch.Tensor) and value.dtype == torch.long, f"{key}: not a LongTensor"
        assert tuple(value.shape) == (len(pieces), max_len), f"{key}: shape {tuple(value.shape)}"


@check(
    "05-finetune-1",
    points=0.4,
    en="each row is the chat prompt followed by qc_answer, ending with the end-of-turn token whatever eos_token is",
    zh="每一行是对话提示加 qc_answer，不论 eos_token 是什么都以轮次结束符结尾",
)
def qc_prompt_answer(learner, variant):
    model = PARAMETERS["MODEL"]  # noqa: F821 (the run's, from the harness)
    with own_work("the course tokenizer's end of turn"):
        end_of_turn_id = course_data.chat_tokenizer(model).convert_tokens_to_ids("<|im_end|>")
        assert end_of_turn_id != course_data.chat_tokenizer(model, True).eos_token_id, "base-like eos is end of turn"
    for tokenizer in ("course", "base-like"):
        pieces, pad, max_len, batch = qc_case(learner, variant, tokenizer)
        with own_work("the course's answers"):
            assert all(a[-1] == end_of_turn_id for _, a in pieces), "qc_answer no longer ends with <|im_end|>"
        for i, row in enumerate(expected_rows(pieces, pad, max_len)):
            n = len(pieces[i][0]) + len(pieces[i][1])
            assert learner_rows(batch, i)[0][:n] == row[0][:n], f"{tokenizer} tokenizer, row {i}: input_ids"


@check(
    "05-finetune-1",
    points=0.4,
    en="labels are -100 on the prompt and equal input_ids on the answer",
    zh="labels 在提示部分为 -100，在回答部分等于 input_ids",
)
def qc_labels(learner, variant):
    for tokenizer in ("course", "base-like"):
        pieces, pad, max_len, batch = qc_case(learner, variant, tokenizer)
        for i, row in enumerate(expected_rows(pieces, pad, max_len)):
            n = len(pieces[i][0]) + len(pieces[i][1])
            assert learner_rows(batch, i)[2][:n] == row[2][:n], f"{tokenizer} tokenizer, row {i}: labels"


@check(
    "05-finetune-1",
    points=0.4,
    en="short rows are padded on the right with pad_token_id, attention_mask 0 and labels -100 there, mask 1 elsewhere",
    zh="不足的行在右侧用 pad_token_id 填充，填充处 attention_mask 为 0、labels 为 -100，其余 mask 为 1",
)
def qc_padding(learner, variant):
    pieces, pad, max_len, batch = qc_case(learner, variant)
    for i, row in enumerate(expected_rows(pieces, pad, max_len)):
        assert learner_rows(batch, i) == list(row), f"row {i}: padding, mask or labels"


@check(
    "05-finetune-1",
    points=0.4,
    en="rows longer than max_len are cut to their first max_len tokens",
    zh="超过 max_len 的行截断为前 max_len 个 token",
)
def qc_truncation(learner, variant):
    for cut in ("answer", "prompt"):
        pieces, pad, max_len, batch = qc_case(learner, variant, cut=cut)
        for i, row in enumerate(expected_rows(pieces, pad, max_len)):
            assert learner_rows(batch, i) == list(row), f"cut inside the {cut}, row {i}"


FIRST_LOSS_RTOL = 1e-3  # the ranks' float32 forward (one thread, or a GPU) against this process's


@check(
    "05-finetune-2",
    points=0.5,
    en="every rank of every run in SCALING_RANKS records one finite loss per step, the first its shard's loss under the course model",
    zh="SCALING_RANKS 中每次运行的每个 rank 都记录了每步一个有限的损失，第一个是课程模型在该 rank 数据分片上的损失",
    counts_with="finetune_throughput",  # the runs are real when their tokens are
)
def finetune_losses(learner, variant):
    scaling, steps = PARAMETERS["SCALING_RANKS"], PARAMETERS["FT_STEPS"]  # noqa: F821 (the run's, from the harness)
    runs = learner.eval("{n: ranks for n, (_, ranks) in ft_runs.items()}")
    assert isinstance(runs, dict) and sorted(runs) == sorted(scaling) and steps >= 2, f"runs for {sorted(runs)}"
    for n, ranks in runs.items():
        assert isinstance(ranks, list) and len(ranks) == n, f"{n} ranks: results"
        with own_work(f"the first losses of the {n}-rank fine-tune"):
            first = first_step_losses(n)
        for r, got in enumerate(ranks):
            assert isinstance(got, dict), f"{n} ranks, rank {r}: no result"
            losses = got["losses"]
            assert isinstance(losses, list) and len(losses) == steps, f"{n} ranks, rank {r}: {len(losses)} losses"
            assert all(type(v) is float and math.isfinite(v) and v > 0 for v in losses), f"{n} ranks, rank {r}: losses"
            assert math.isclose(losses[0], first[r], rel_tol=FIRST_LOSS_RTOL), (
                learner_says(
                    "a rank's first loss is not the course model's loss on that rank's first batch",
                    "某个 rank 的第一个损失不等于课程模型在该 rank 第一个批次上的损失",
                )
                + f"{n} ranks, rank {r}: step 0's loss {losses[0]}, the course model's on its shard {first[r]}"
            )


@check(
    "05-finetune-2",
    points=0.5,
    en="every rank counts its tokens and time after the warm-up step; throughput is their tokens over the slowest time",
    zh="每个 rank 统计热身步之后的 token 数与时间；吞吐 = token 总数 / 最慢 rank 的时间",
    counts_with="finetune_losses",  # no grader sees a run's times: its first losses show the run was real
)
def finetune_throughput(learner, variant):
    runs, throughput = learner.eval("({n: ranks for n, (_, ranks) in ft_runs.items()}, throughput)")
    scaling = PARAMETERS["SCALING_RANKS"]  # noqa: F821 (the run's, from the harness)
    assert isinstance(runs, dict) and sorted(runs) == sorted(scaling), "a run per rank count"
    assert isinstance(throughput, dict) and sorted(throughput) == sorted(runs), "throughput for every run"
    for n, ranks in runs.items():
        with own_work(f"the tokens of the {n}-rank fine-tune"):
            want = finetune_tokens(n)
        for r, got in enumerate(ranks):
            assert isinstance(got, dict), f"{n} ranks, rank {r}: no result"
            tokens, elapsed = got["tokens"], got["elapsed"]
            assert type(tokens) is int and tokens == want[r], f"{n} ranks, rank {r}: {tokens} tokens, want {want[r]}"
            assert type(elapsed) is float and 0 < elapsed < 3600, "elapsed"
        expected = sum(g["tokens"] for g in ranks) / max(g["elapsed"] for g in ranks)
        assert math.isclose(throughput[n], expected, rel_tol=1e-9), (
            f"{n} ranks: throughput {throughput[n]} vs {expected}"
        )


def finetune_tokens(world):
    """The tokens each rank of the notebook's finetune_worker counts from step 1 on, made here: its
    shard of the step's permutation of the course's QC items, each row's length up to max_len."""
    p = PARAMETERS  # noqa: F821 (the run's, from the harness)
    items = course_data.qc_train_items()
    per_rank, tokens = p["FT_BATCH"], [0] * world
    for step in range(1, p["FT_STEPS"]):
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(p["SEED"] * 7919 + step))
        for rank in range(world):
            mine = order[rank * per_rank : (rank + 1) * per_rank].tolist()
            pieces = course_data.qc_pieces(p["MODEL"], [items[i] for i in mine])
            tokens[rank] += sum(min(len(prompt) + len(answer), p["FT_MAX_LEN"]) for prompt, answer in pieces)
    return tokens


_FIRST_LOSSES = {}


def first_step_losses(world):
    """Each rank's loss at step 0 of the notebook's ``world``-rank fine-tune, made here: the course
    model's weights before any update, on the rank's shard of step 0's permutation of the QC items,
    batched by exercise 1's rules (``expected_rows``) to FT_MAX_LEN."""
    p = PARAMETERS  # noqa: F821 (the run's, from the harness)
    key = (p["MODEL"], p["SEED"], p["FT_BATCH"], p["FT_MAX_LEN"], world)
    if key not in _FIRST_LOSSES:
        items, model = course_data.qc_train_items(), course_data.causal_lm(p["MODEL"])
        pad = course_data.chat_tokenizer(p["MODEL"]).pad_token_id
        order = torch.randperm(len(items), generator=torch.Generator().manual_seed(p["SEED"] * 7919)).tolist()
        losses = []
        for rank in range(world):
            mine = order[rank * p["FT_BATCH"] : (rank + 1) * p["FT_BATCH"]]
            rows = expected_rows(course_data.qc_pieces(p["MODEL"], [items[i] for i in mine]), pad, p["FT_MAX_LEN"])
            ids, mask, labels = (torch.tensor([row[k] for row in rows]) for k in range(3))
            with torch.no_grad():
                losses.append(float(model(input_ids=ids, attention_mask=mask, labels=labels).loss))
        _FIRST_LOSSES[key] = losses
    return _FIRST_LOSSES[key]


# ---------------------------------------------------------------- stretch S1: bucketing


def bucket_case(variant):
    gen = variant.torch()
    dtype = variant.random.choice([torch.float32, torch.float64])
    size = 4 if dtype == torch.float32 else 8
    shapes = [tuple(variant.random.randint(1, 6) for _ in range(variant.random.randint(1, 2))) for _ in range(3)]
    grads = [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]
    total = sum(g.numel() for g in grads)
    cap = size * variant.random.randint(1, max(1, total // 2))
    world = variant.random.randint(2, 4)
    others = torch.randn(total, generator=gen, dtype=torch.float64) * (world - 1)
    return grads, cap, world, others, size


def bucket_run(learner, variant):
    grads, cap, world, others, size = bucket_case(variant)
    calls, sent, after = learner.run("bucketed", grads, cap, world, others)
    return grads, cap, world, others, size, calls, sent, after


@check(
    "05-stretch-bucket-1",
    points=0.5,
    en="bucketed_all_reduce_ returns the number of all_reduce calls, ⌈total bytes / cap_bytes⌉",
    zh="bucketed_all_reduce_ 返回 all_reduce 的调用次数 ⌈总字节数 / cap_bytes⌉",
)
def bucket_calls(learner, variant):
    grads, cap, _, _, size, calls, sent, _ = bucket_run(learner, variant)
    want = math.ceil(sum(g.numel() for g in grads) * size / cap)
    assert type(calls) is int and calls == want == len(sent), f"returned {calls}, made {len(sent)} calls, want {want}"


@check(
    "05-stretch-bucket-1",
    points=0.5,
    en="each call gets a consecutive slice of at most cap_bytes of the concatenated gradients, every byte once",
    zh="每次调用得到拼接后梯度的一段连续切片，不超过 cap_bytes，每个字节恰好发送一次",
)
def bucket_slices(learner, variant):
    grads, cap, _, _, size, _, sent, _ = bucket_run(learner, variant)
    assert sent and all(t.numel() * size <= cap for t in sent), f"sizes {[t.numel() * size for t in sent]}"
    flat = torch.cat([g.reshape(-1) for g in grads])
    assert torch.equal(torch.cat(sent), flat), "the slices are not the concatenated gradients, in order, once each"


@check(
    "05-stretch-bucket-1",
    points=0.5,
    en="afterwards each gradient holds the mean over the ranks, in place, shape unchanged",
    zh="之后每个梯度原地变为各 rank 的平均，形状不变",
)
def bucket_mean(learner, variant):
    grads, _, world, others, _, _, _, after = bucket_run(learner, variant)
    flat = (torch.cat([g.reshape(-1).double() for g in grads]) + others) / world
    offset = 0
    assert isinstance(after, list) and len(after) == len(grads), "the gradients afterwards"
    for g, a in zip(grads, after):
        assert isinstance(a, torch.Tensor) and a.shape == g.shape and a.dtype == g.dtype, "shape or dtype changed"
        want = flat[offset : offset + g.numel()].view(g.shape)
        offset += g.numel()
        tol = 1e-5 if g.dtype == torch.float32 else 1e-12
        assert torch.allclose(a.double(), want, rtol=tol, atol=tol), "not the mean of the ranks' gradients"


@check(
    "05-stretch-bucket-1",
    points=0.5,
    en="a cap_bytes that is not a positive multiple of the element size raises ValueError",
    zh="cap_bytes 不是元素字节数的正整数倍时抛出 ValueError",
)
def bucket_bad_cap(learner, variant):
    for dtype, size in (("float64", 8), ("float32", 4)):
        for cap in (size * variant.random.randint(1, 6) + variant.random.randint(1, size - 1), 0):
            raised = learner.raised(
                "bucketed_all_reduce_([ones], cap, 1, lambda t: None)",
                ones=torch.ones(variant.random.randint(2, 9), dtype=getattr(torch, dtype)),
                cap=cap,
            )
            assert raised is not None and raised.is_a("ValueError"), f"{dtype}, cap {cap}: raised {raised}"


# ---------------------------------------------------------------- stretch S2: no_sync accumulation


def accumulation_case(learner, variant):
    gen = variant.torch()
    m = variant.random.randint(2, 5)
    per = variant.random.randint(1, 4)
    state = mlp_state(gen, variant.random.randint(3, 10))
    x, y = regression(gen, m * per)
    start_grads = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in state.items()}
    log, grads, params = learner.run("accumulated", state, start_grads, x, y, per, m)
    return m, state, x, y, start_grads, log, grads, params


@check(
    "05-stretch-nosync-1",
    points=1,
    en="the first M-1 micro-batches run forward and backward inside no_sync(), the last one outside",
    zh="前 M-1 个微批的前向与 backward 在 no_sync() 里，最后一个在它之外",
)
def nosync_context(learner, variant):
    m, *_, log, _, _ = accumulation_case(learner, variant)
    forwards = [sync for kind, sync in log if kind == "forward"]
    backwards = [sync for kind, sync in log if kind == "backward"]
    want = [False] * (m - 1) + [True]
    assert forwards == want and backwards == want, f"forward sync flags {forwards}, backward {backwards}"


@check(
    "05-stretch-nosync-1",
    points=1,
    en="each micro-batch loss is divided by M: the accumulated gradient is the whole batch's mean, optimizer untouched",
    zh="每个微批的损失除以 M：累积的梯度等于整批的平均梯度，不动优化器",
)
def nosync_mean(learner, variant):
    m, state, x, y, start_grads, _, grads, params = accumulation_case(learner, variant)
    model = reference_mlp(state)
    F.mse_loss(model(x), y).backward()
    for k, p in model.named_parameters():
        want = start_grads[k] + p.grad
        assert isinstance(grads.get(k), torch.Tensor), f"{k}: no gradient"
        assert torch.allclose(grads[k], want, rtol=1e-10, atol=1e-12), f"{k}: not the whole batch's mean gradient"
    assert_state(params, state, "parameters (no optimizer step)", atol=0.0)
