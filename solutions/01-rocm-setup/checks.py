"""Lab 01's hidden checks, run by the trusted harness (rocmlab.harness), outside the learner's kernel.

Every reference below is computed here, from the rules stated in the lab's prose; inputs come from
the learner's seed (``variant``), beside a few fixed edge cases.
"""

import math

from rocmlab.check_compare import assert_equal
from rocmlab.harness import LearnerRaised, check, mistake


def _backend(learner, version, capability=(9, 0)):
    return learner.run("backend_with", version, tuple(capability))


def _hip_version(rng):
    return f"{rng.randint(5, 10)}.{rng.randint(0, 14)}.{rng.randint(10000, 99999)}"


def _cuda_version(rng):
    return f"{rng.randint(11, 13)}.{rng.randint(0, 9)}"


def _capability(rng):
    return (rng.choice([7, 8, 9, 10, 11, 12]), rng.randint(0, 9))


# ---------------------------------------------------------------- 01-backend-1 (2 points)


@check(
    "01-backend-1",
    points=0.5,
    en="a non-empty version.hip gives the str 'rocm', whatever the capability",
    zh="version.hip 为非空字符串时返回 str 'rocm'，与 capability 无关",
)
def backend_rocm(learner, variant):
    rng = variant.random
    for _ in range(3):
        got = _backend(
            learner, {"hip": _hip_version(rng), "cuda": rng.choice([None, _cuda_version(rng)])}, _capability(rng)
        )
        assert type(got) is str and got == "rocm", f"got {got!r}"


@check(
    "01-backend-1",
    points=0.5,
    en="no hip version and a non-empty version.cuda gives 'cuda', whatever the capability",
    zh="没有 hip 版本而 version.cuda 为非空字符串时返回 'cuda'，与 capability 无关",
)
def backend_cuda(learner, variant):
    rng = variant.random
    for _ in range(3):
        got = _backend(learner, {"hip": None, "cuda": _cuda_version(rng)}, _capability(rng))
        assert type(got) is str and got == "cuda", f"got {got!r}"


@check(
    "01-backend-1",
    points=0.5,
    en="a missing version attribute counts as None ('cpu' when both are missing)",
    zh="缺少的版本属性按 None 处理（两者都缺时为 'cpu'）",
)
def backend_missing(learner, variant):
    rng = variant.random
    cuda = _cuda_version(rng)
    assert _backend(learner, {"cuda": cuda}) == "cuda"
    assert _backend(learner, {"hip": _hip_version(rng)}) == "rocm"
    got = _backend(learner, {})
    assert type(got) is str and got == "cpu", f"got {got!r}"


@mistake(
    en="`version.hip is not None` taken for ROCm: an empty string (and a missing attribute) passes as a version",
    zh="把 `version.hip is not None` 当作 ROCm：空字符串（以及缺少的属性）被当成了版本",
    code="""
def backend_of(torch_module):
    if torch_module.version.hip is not None:
        return "rocm"
    if torch_module.version.cuda is not None:
        return "cuda"
    return "cpu"
""",
)
@check(
    "01-backend-1",
    points=0.5,
    en="an empty string is not a version",
    zh="空字符串不算版本",
)
def backend_empty_string(learner, variant):
    rng = variant.random
    assert _backend(learner, {"hip": "", "cuda": None}) == "cpu"
    assert _backend(learner, {"hip": "", "cuda": _cuda_version(rng)}) == "cuda"
    assert _backend(learner, {"hip": "", "cuda": ""}) == "cpu"


# ---------------------------------------------------------------- 01-rocminfo-1 (3 points)

PRODUCTS = [  # (marketing name, gfx, compute units, wavefront size): inputs, not facts the checks rely on
    ("AMD Instinct MI300X", "gfx942", 304, 64),
    ("AMD Instinct MI250X", "gfx90a", 110, 64),
    ("AMD Instinct MI210", "gfx90a", 104, 64),
    ("AMD Instinct MI100", "gfx908", 120, 64),
    ("Radeon RX 7900 XTX", "gfx1100", 96, 32),
    ("AMD Radeon PRO W7800", "gfx1100", 70, 32),
    ("AMD Radeon RX 9070 XT", "gfx1201", 64, 32),
    ("AMD Radeon 780M", "gfx1103", 12, 32),
    ("AMD Radeon VII", "gfx906", 60, 64),
]


def _cpu_block(rng, name):
    return [
        f"  Name:                    {name}",
        "  Uuid:                    CPU-XX",
        f"  Marketing Name:          {name}",
        "  Vendor Name:             CPU",
        "  Device Type:             CPU",
        f"  Compute Unit:            {rng.choice([16, 32, 64, 96, 128])}",
        "  ISA Info:",
    ]


def _gpu_block(rng, product):
    name, gfx, cus, wave = product
    suffix = rng.choice(["", ":sramecc+:xnack-", ":xnack-"])
    return [
        f"  Name:                    {gfx}",
        f"  Uuid:                    GPU-{rng.getrandbits(64):016x}",
        f"  Marketing Name:          {name}",
        "  Vendor Name:             AMD",
        "  Device Type:             GPU",
        "  Cache Info:",
        f"    L1:                      {16 * rng.randint(1, 4)}(0x10) KB",
        f"  Compute Unit:            {cus}",
        "  SIMDs per CU:            4",
        f"  Wavefront Size:          {wave}(0x{wave:x})",
        "  Workgroup Max Size:      1024(0x400)",
        f"  Max Waves Per CU:        {rng.choice([20, 32])}(0x20)",
        "  ISA Info:",
        "    ISA 1",
        f"      Name:                    amdgcn-amd-amdhsa--{gfx}{suffix}",
        "      Machine Models:          HSA_LARGE_MODEL",
        "      Workgroup Max Size:      1024(0x400)",
    ]


def _rocminfo(rng, agents):
    """rocminfo text for ``agents`` (("cpu", name) or ("gpu", product)), and its GPU agents as dicts."""
    lines = [
        "ROCk module version 6.12.12 is loaded",
        "=====================",
        "HSA System Attributes",
        "=====================",
        "Runtime Version:         1.14",
        "",
        "==========",
        "HSA Agents",
        "==========",
    ]
    want = []
    for number, (kind, what) in enumerate(agents, start=1):
        lines += ["*******", f"Agent {number}", "*******"]
        if kind == "cpu":
            lines += _cpu_block(rng, what)
        else:
            lines += _gpu_block(rng, what)
            want.append({"name": what[0], "gfx": what[1], "compute_units": what[2], "wavefront_size": what[3]})
    lines.append("*** Done ***")
    return "\n".join(lines) + "\n", want


def _node(rng):
    """A node: one or two CPU agents, then 1-8 GPU agents (GCDs) of one or two products."""
    cpus = [
        ("cpu", f"AMD EPYC 9{rng.randint(100, 999)} {rng.choice([32, 64, 96])}-Core Processor")
        for _ in range(rng.randint(1, 2))
    ]
    products = rng.sample(PRODUCTS, 2)
    gpus = [("gpu", rng.choice(products)) for _ in range(rng.randint(2, 8))]
    return cpus + gpus


def _same(a, b):
    """Type and value, all the way down, where the rule names the types (an int, a list of int):
    ``check_compare`` takes any number for a number."""
    if type(a) is not type(b):
        return False
    if isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


@check(
    "01-rocminfo-1",
    points=1,
    en="every GPU agent, in order, with its Marketing Name, Name, Compute Unit and Wavefront Size",
    zh="按顺序返回每个 GPU 代理，带 Marketing Name、Name、Compute Unit 与 Wavefront Size",
)
def rocminfo_agents(learner, variant):
    rng = variant.random
    for _ in range(2):
        text, want = _rocminfo(rng, _node(rng))
        got = learner.call("parse_rocminfo", text)
        assert isinstance(got, list) and len(got) == len(want), f"{len(want)} agents, got {got!r}"
        for g, w in zip(got, want):
            assert isinstance(g, dict) and {k: g.get(k) for k in w} == w, f"expected {w}, got {g!r}"


@check(
    "01-rocminfo-1",
    points=0.5,
    en="a list of dicts with exactly the four keys, compute_units and wavefront_size as int ('64(0x40)' is 64)",
    zh="返回字典列表，恰有四个键，compute_units 与 wavefront_size 为 int（'64(0x40)' 取 64）",
)
def rocminfo_types(learner, variant):
    rng = variant.random
    text, want = _rocminfo(rng, _node(rng))
    assert _same(learner.call("parse_rocminfo", text), want)


@mistake(
    en="every `Name:` line of a block kept, so the ISA Info's amdgcn-amd-amdhsa--gfx… name overwrites the agent's",
    zh="块里每一行 `Name:` 都照收，于是 ISA Info 的 amdgcn-amd-amdhsa--gfx… 覆盖了代理自己的名字",
    code="""
def parse_rocminfo(text):
    agents, current = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Agent ") and line[6:].isdigit():
            current = {}
            agents.append(current)
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "Name":
            current["gfx"] = value
        elif key == "Marketing Name":
            current["name"] = value
        elif key == "Device Type":
            current["type"] = value
        elif key in ("Compute Unit", "Wavefront Size"):
            field = "compute_units" if key == "Compute Unit" else "wavefront_size"
            current[field] = int(value.split("(")[0])
    return [{k: a.get(k) for k in ("name", "gfx", "compute_units", "wavefront_size")}
            for a in agents if a.get("type") == "GPU"]
""",
)
@check(
    "01-rocminfo-1",
    points=0.5,
    en="gfx is the agent's own Name, the first in its block, not the one in ISA Info",
    zh="gfx 取代理自己的 Name（块中第一个），不是 ISA Info 里的",
)
def rocminfo_own_name(learner, variant):
    rng = variant.random
    text, want = _rocminfo(rng, [("cpu", "AMD EPYC 9654 96-Core Processor"), ("gpu", rng.choice(PRODUCTS))])
    got = learner.call("parse_rocminfo", text)
    assert isinstance(got, list) and len(got) == 1 and isinstance(got[0], dict), f"got {got!r}"
    assert got[0].get("gfx") == want[0]["gfx"], f"expected {want[0]['gfx']!r}, got {got[0].get('gfx')!r}"


@check(
    "01-rocminfo-1",
    points=0.5,
    en="CPU agents are skipped, even one whose name says Radeon (an APU)",
    zh="跳过 CPU 代理，即使名字里带 Radeon（APU）",
)
def rocminfo_skip_cpu(learner, variant):
    rng = variant.random
    apu = ("gpu", ("AMD Radeon 780M", "gfx1103", 12, 32))
    cpu = ("cpu", f"AMD Ryzen {rng.choice([5, 7, 9])} {rng.randint(7000, 8999)}U w/ Radeon 780M Graphics")
    text, want = _rocminfo(rng, [cpu, apu])
    got = learner.call("parse_rocminfo", text)
    assert isinstance(got, list) and len(got) == 1, f"one GPU agent, got {got!r}"
    assert got[0] == want[0], f"expected {want[0]}, got {got[0]!r}"


@check(
    "01-rocminfo-1",
    points=0.5,
    en="empty text gives []",
    zh="空文本返回 []",
    counts_with="rocminfo_agents",
)
def rocminfo_empty(learner, variant):
    got = learner.call("parse_rocminfo", "")
    assert type(got) is list and got == [], f"got {got!r}"


# ---------------------------------------------------------------- 01-arch-1 (2 points)

CDNA_TARGETS = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
SUFFIXES = ("", ":sramecc+", ":xnack-", ":sramecc+:xnack-", ":sramecc-:xnack+")


def _arch(learner, gfx, want):
    got = learner.call("arch_family", gfx)
    assert type(got) is tuple and tuple(map(type, got)) == (str, int), f"{gfx}: a (str, int) tuple, got {got!r}"
    assert got == want, f"{gfx}: expected {want}, got {got}"


@check(
    "01-arch-1",
    points=0.4,
    en="a target in CDNA_TARGETS gives the tuple ('CDNA', 64)",
    zh="CDNA_TARGETS 中的目标返回元组 ('CDNA', 64)",
)
def arch_cdna(learner, variant):
    for gfx in variant.random.sample(CDNA_TARGETS, 3):
        _arch(learner, gfx, ("CDNA", 64))


@check(
    "01-arch-1",
    points=0.4,
    en="gfx plus four digits starting 10, 11 or 12 gives ('RDNA', 32)",
    zh="gfx 后跟以 10、11、12 开头的四位数字返回 ('RDNA', 32)",
)
def arch_rdna(learner, variant):
    rng = variant.random
    for major in ("10", "11", "12"):
        _arch(learner, f"gfx{major}{rng.randint(0, 5)}{rng.randint(0, 9)}", ("RDNA", 32))


@check(
    "01-arch-1",
    points=0.4,
    en="any other gfx plus three characters starting 6-9 gives ('GCN', 64)",
    zh="其余 gfx 后跟以 6–9 开头的三位返回 ('GCN', 64)",
)
def arch_gcn(learner, variant):
    rng = variant.random
    seen = 0
    while seen < 3:
        gfx = f"gfx{rng.choice('6789')}{rng.randint(0, 9)}{rng.choice('0123456789abc')}"
        if gfx not in CDNA_TARGETS:
            _arch(learner, gfx, ("GCN", 64))
            seen += 1


@check(
    "01-arch-1",
    points=0.4,
    en="feature suffixes after the first colon are dropped first",
    zh="先去掉第一个冒号后的特性后缀",
)
def arch_suffixes(learner, variant):
    rng = variant.random
    cases = [
        (rng.choice(CDNA_TARGETS), ("CDNA", 64)),
        (f"gfx11{rng.randint(0, 5)}{rng.randint(0, 3)}", ("RDNA", 32)),
        ("gfx906", ("GCN", 64)),
    ]
    for gfx, want in cases:
        _arch(learner, gfx + rng.choice(SUFFIXES[1:]), want)


@check(
    "01-arch-1",
    points=0.4,
    en="anything that is not such a gfx target raises ValueError",
    zh="不是上述 gfx 目标的输入抛出 ValueError",
)
def arch_invalid(learner, variant):
    rng = variant.random
    bad = [
        "",
        "gfx",
        f"sm_{rng.randint(50, 120)}",
        f"gfx13{rng.randint(0, 9)}{rng.randint(0, 9)}",
        f"gfx{rng.randint(1, 5)}{rng.randint(0, 9)}{rng.randint(0, 9)}",
        f"gfx{rng.randint(10, 12)}",
    ]
    for gfx in bad:
        raised = learner.raised("arch_family(__g)", __g=gfx)
        assert raised is not None and raised.is_a("ValueError"), f"{gfx!r}: expected ValueError, got {raised}"


# ---------------------------------------------------------------- 01-wheel-1 (2 points)


def _split(target):
    base, *features = target.split(":")
    return base, {f[:-1]: f[-1] for f in features if f and f[-1] in "+-"}


def _runs_on(device, entry):
    base, have = _split(device)
    entry_base, need = _split(entry)
    return entry_base == base and all(have.get(k, v) == v for k, v in need.items())


def _wheel(learner, device, arch_list):
    want = any(_runs_on(device, e) for e in arch_list)
    got = learner.call("wheel_supports", device, list(arch_list))
    assert got is want, f"{device} vs {arch_list}: expected {want}, got {got!r}"


@mistake(
    en="a substring test (`entry in device_arch`): gfx110 is taken for gfx1100",
    zh="用子串判断（`entry in device_arch`）：把 gfx110 当成了 gfx1100",
    code="""
def wheel_supports(device_arch, arch_list):
    base = device_arch.split(":")[0]
    return any(entry.split(":")[0] in base for entry in arch_list)
""",
)
@check(
    "01-wheel-1",
    points=0.5,
    en="True exactly when some entry has the same base target (no substring match), as a bool",
    zh="存在基础目标完全相同（不做子串匹配）的项时为 True，返回布尔值",
)
def wheel_base_target(learner, variant):
    rng = variant.random
    targets = [
        "gfx900",
        "gfx906",
        "gfx908",
        "gfx90a",
        "gfx942",
        "gfx950",
        "gfx1030",
        "gfx1100",
        "gfx1101",
        "gfx1102",
        "gfx1151",
        "gfx1200",
        "gfx1201",
    ]
    for _ in range(3):
        arch_list = rng.sample(targets, rng.randint(2, 6))
        device = rng.choice(arch_list)  # in the list, then not: both answers are asked
        _wheel(learner, device, arch_list)
        _wheel(learner, device, [t for t in arch_list if t != device])
        _wheel(learner, device, [device[:-1], device + "0", "x" + device])


@check(
    "01-wheel-1",
    points=0.5,
    en="a feature both sides name with opposite signs rules an entry out",
    zh="两边都写明且取值相反的特性使该项不可用",
)
def wheel_conflict(learner, variant):
    rng = variant.random
    base = rng.choice(["gfx90a", "gfx942", "gfx940"])
    feature = rng.choice(["xnack", "sramecc"])
    mine = rng.choice("+-")
    other = "-" if mine == "+" else "+"
    _wheel(learner, f"{base}:{feature}{mine}", [f"{base}:{feature}{other}"])
    _wheel(learner, f"{base}:sramecc+:xnack{mine}", [f"{base}:xnack{other}", f"{base}:xnack{mine}"])


@check(
    "01-wheel-1",
    points=0.5,
    en="a feature named on one side only does not matter",
    zh="只有一边写明的特性不影响兼容",
    counts_with="wheel_base_target",
)
def wheel_one_side(learner, variant):
    rng = variant.random
    base = rng.choice(["gfx90a", "gfx942", "gfx908"])
    sign = rng.choice("+-")
    _wheel(learner, f"{base}:sramecc+:xnack{sign}", [base])
    _wheel(learner, base, [f"{base}:xnack{sign}"])
    _wheel(learner, f"{base}:xnack{sign}", [f"{base}:sramecc{rng.choice('+-')}"])


@check(
    "01-wheel-1",
    points=0.5,
    en="an empty arch list gives False",
    zh="空列表返回 False",
    counts_with="wheel_base_target",
)
def wheel_empty(learner, variant):
    got = learner.call("wheel_supports", variant.random.choice(["gfx942", "gfx1100:xnack-"]), [])
    assert got is False, f"got {got!r}"


# ---------------------------------------------------------------- 01-visible-1 (3 points)


def _uuids(rng, n):
    return [f"GPU-{rng.getrandbits(64):016X}" for _ in range(n)]


def _ref_visible(uuids, env):
    """The runtimes' rules of the prose, written again here."""
    visible = list(range(len(uuids)))
    if "ROCR_VISIBLE_DEVICES" in env:
        by_uuid = {u.upper(): i for i, u in enumerate(uuids)}
        chosen = []
        items = env["ROCR_VISIBLE_DEVICES"].split(",") if env["ROCR_VISIBLE_DEVICES"] != "" else []
        for raw in items:
            item = raw.strip()
            if item.upper() in by_uuid:
                index = by_uuid[item.upper()]
            elif item.isdecimal() and item.isascii():
                index = int(item)
            else:
                break
            if index >= len(uuids) or index in chosen:
                break
            chosen.append(index)
        visible = chosen
    hip = env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES") or ""
    if hip:
        chosen = []
        for item in hip.split(","):
            if not (item.isascii() and item.isdecimal() and str(int(item)) == item) or int(item) >= len(visible):
                break
            if visible[int(item)] not in chosen:
                chosen.append(visible[int(item)])
        visible = chosen
    return visible


def _visible(learner, uuids, env, want=None):
    want = _ref_visible(uuids, env) if want is None else want
    got = learner.call("visible_gpus", list(uuids), dict(env))
    assert _same(got, want), f"{len(uuids)} GPUs, env {env}: expected {want} (a list of int), got {got!r}"


@check(
    "01-visible-1",
    points=0.5,
    en="ROCR_VISIBLE_DEVICES: indices or whole UUIDs (any case, spaces stripped), in list order",
    zh="ROCR_VISIBLE_DEVICES：编号或完整 UUID（不区分大小写，去掉首尾空白），按列表顺序",
)
def visible_rocr_select(learner, variant):
    rng = variant.random
    n = rng.randint(4, 12)
    uuids = _uuids(rng, n)
    for _ in range(3):
        picks = rng.sample(range(n), rng.randint(1, n))
        items = []
        for i in picks:
            item = rng.choice([str(i), uuids[i], uuids[i].lower()])
            items.append(rng.choice(["", " "]) + item + rng.choice(["", " "]))
        _visible(learner, uuids, {"ROCR_VISIBLE_DEVICES": ",".join(items)}, picks)


@check(
    "01-visible-1",
    points=0.5,
    en="ROCR's list ends at its first invalid item (unknown, out of range, or a GPU already listed)",
    zh="ROCR 的列表在第一个无效项处结束（未知、越界或重复指向已列出的 GPU）",
)
def visible_rocr_stop(learner, variant):
    rng = variant.random
    n = rng.randint(4, 12)
    uuids = _uuids(rng, n)
    for bad in ("unknown", "range", "repeat", "word"):
        head = rng.sample(range(n), rng.randint(1, n - 1))
        if bad == "unknown":
            item = f"GPU-{rng.getrandbits(64):016X}"
        elif bad == "range":
            item = str(n + rng.randint(0, 5))
        elif bad == "repeat":
            item = rng.choice([str(head[0]), uuids[head[0]]])
        else:
            item = rng.choice(["x", "gpu0", "-1"])
        tail = [str(i) for i in range(n) if i not in head][:2]
        _visible(learner, uuids, {"ROCR_VISIBLE_DEVICES": ",".join([*map(str, head), item, *tail])}, head)


@check(
    "01-visible-1",
    points=0.25,
    en="ROCR_VISIBLE_DEVICES set to the empty string leaves no GPU",
    zh="ROCR_VISIBLE_DEVICES 设为空字符串时一个也不可见",
    counts_with="visible_rocr_select",
)
def visible_rocr_empty(learner, variant):
    rng = variant.random
    uuids = _uuids(rng, rng.randint(1, 8))
    _visible(learner, uuids, {"ROCR_VISIBLE_DEVICES": ""}, [])
    _visible(learner, uuids, {"ROCR_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "0"}, [])


@check(
    "01-visible-1",
    points=0.5,
    en="HIP indices point into the GPUs ROCR left, renumbered from 0, in list order",
    zh="HIP 编号指向 ROCR 留下的 GPU（从 0 重新编号），按列表顺序",
)
def visible_hip_renumber(learner, variant):
    rng = variant.random
    n = rng.randint(4, 12)
    uuids = _uuids(rng, n)
    for _ in range(3):
        left = rng.sample(range(n), rng.randint(2, n))
        picks = rng.sample(range(len(left)), rng.randint(1, len(left)))
        env = {"ROCR_VISIBLE_DEVICES": ",".join(map(str, left)), "HIP_VISIBLE_DEVICES": ",".join(map(str, picks))}
        _visible(learner, uuids, env, [left[i] for i in picks])
    picks = rng.sample(range(n), rng.randint(1, n))
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": ",".join(map(str, picks))}, picks)


@check(
    "01-visible-1",
    points=0.5,
    en="CUDA_VISIBLE_DEVICES is read only when HIP_VISIBLE_DEVICES is unset or empty; both unset or empty: no filter",
    zh="仅当 HIP_VISIBLE_DEVICES 未设置或为空时读取 CUDA_VISIBLE_DEVICES；都未设置或为空则不筛选",
)
def visible_hip_fallback(learner, variant):
    rng = variant.random
    n = rng.randint(3, 10)
    uuids = _uuids(rng, n)
    a, b = rng.sample(range(n), 2)
    _visible(learner, uuids, {"CUDA_VISIBLE_DEVICES": f"{a},{b}"}, [a, b])
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": str(b)}, [b])
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": str(a), "CUDA_VISIBLE_DEVICES": str(b)}, [a])
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": ""}, list(range(n)))
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": ""}, list(range(n)))
    _visible(learner, uuids, {}, list(range(n)))


@check(
    "01-visible-1",
    points=0.5,
    en="HIP's list ends at its first item that is not a plain in-range number (no whitespace stripped)",
    zh="HIP 的列表在第一个不是规范、未越界数字的项处结束（不去空白）",
)
def visible_hip_stop(learner, variant):
    rng = variant.random
    n = rng.randint(4, 10)
    uuids = _uuids(rng, n)
    for bad in (f" {rng.randrange(n)}", f"{rng.randrange(n)} ", str(n + rng.randint(0, 4)), "x", "-1"):
        head = rng.sample(range(n), rng.randint(1, n - 1))
        tail = [i for i in range(n) if i not in head][:2]
        hip = ",".join([*map(str, head), bad, *map(str, tail)])
        _visible(learner, uuids, {rng.choice(["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]): hip}, head)
    _visible(learner, uuids[:2], {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "1"}, [])


@check(
    "01-visible-1",
    points=0.25,
    en="an index HIP lists again is skipped (it does not end the list)",
    zh="HIP 列表中重复的编号跳过（不结束列表）",
)
def visible_hip_repeat(learner, variant):
    rng = variant.random
    n = rng.randint(4, 10)
    uuids = _uuids(rng, n)
    a, b, c = rng.sample(range(n), 3)
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": f"{a},{b},{a},{c}"}, [a, b, c])
    _visible(learner, uuids, {"HIP_VISIBLE_DEVICES": f"{a},{a},{b}"}, [a, b])


# ---------------------------------------------------------------- 01-arith-1 (1 point)


@check(
    "01-arith-1",
    points=0.5,
    en="copy_bytes is 2 x n_elements x element_size (read + write), an int",
    zh="copy_bytes 为 2 × 元素数 × 元素字节数（读加写），整数",
)
def arith_copy_bytes(learner, variant):
    rng = variant.random
    for n, size in ((0, 4), (rng.randint(1, 2**31), rng.choice([1, 2, 4, 8])), (rng.randint(1, 4096), 2)):
        got = learner.call("copy_bytes", n, size)
        assert type(got) is int and got == 2 * n * size, f"({n}, {size}): expected {2 * n * size}, got {got!r}"


@check(
    "01-arith-1",
    points=0.5,
    en="matmul_flops is 2 x m x n x k, an int",
    zh="matmul_flops 为 2 × m × n × k，整数",
)
def arith_matmul_flops(learner, variant):
    rng = variant.random
    for _ in range(3):
        m, n, k = rng.randint(1, 16384), rng.randint(1, 16384), rng.randint(1, 16384)
        got = learner.call("matmul_flops", m, n, k)
        assert type(got) is int and got == 2 * m * n * k, f"({m}, {n}, {k}): expected {2 * m * n * k}, got {got!r}"


# ---------------------------------------------------------------- 01-harness-1 (3 points)


def _timed(learner, costs, *, calls, repeats, warmup, queued=0.0):
    """Seconds per call of time_per_call on a fake asynchronous device that follows the timing
    protocol (``in_kernel.time_on_device``: a step off it raises)."""
    seconds = learner.run("time_on_device", list(costs), float(queued), calls=calls, repeats=repeats, warmup=warmup)
    assert isinstance(seconds, float) and not isinstance(seconds, bool), f"seconds per call: a float, got {seconds!r}"
    return seconds


def _raised(learner, function, *args, **values):
    """What the kernel-side ``function`` raised, or None when it returned."""
    try:
        learner.run(function, *args, **values)
    except LearnerRaised as exc:
        return exc.raised
    return None


def _groups(costs, calls, repeats, warmup):
    """The per-call seconds of each group, as the rules define them (the last cost repeats)."""

    def cost(i):
        return costs[min(i, len(costs) - 1)]

    out, i = [], warmup
    for _ in range(repeats):
        out.append(sum(cost(j) for j in range(i, i + calls)) / calls)
        i += calls
    return out


def _median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


@check(
    "01-harness-1",
    points=0.5,
    en="warm-up calls are made first and left out of the timing (fn runs warmup + calls x repeats times)",
    zh="先做 warmup 次不计时的调用（fn 共调用 warmup + calls × repeats 次）",
)
def harness_warmup(learner, variant):
    rng = variant.random
    warmup, calls, repeats = rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 5)
    slow, fast = float(rng.randint(50, 200)), float(rng.randint(1, 4))
    seconds = _timed(learner, [slow] * warmup + [fast], calls=calls, repeats=repeats, warmup=warmup)
    assert math.isclose(seconds, fast), f"expected {fast} s per call, got {seconds}"


@check(
    "01-harness-1",
    points=0.5,
    en="start and stop run once per group, with no marks inside a group",
    zh="start 与 stop 每组各调用一次，组内不打标记",
)
def harness_one_mark(learner, variant):
    rng = variant.random
    calls, repeats, warmup = rng.randint(2, 6), rng.randint(1, 7), rng.randint(0, 3)
    pattern = [float(rng.randint(1, 9)) for _ in range(calls)]  # every group the same: only the marks matter
    costs = [float(rng.randint(50, 99)) for _ in range(warmup)] + pattern * repeats
    seconds = _timed(learner, costs, calls=calls, repeats=repeats, warmup=warmup)
    assert math.isclose(seconds, sum(pattern) / calls), f"expected {sum(pattern) / calls}, got {seconds}"


@check(
    "01-harness-1",
    points=0.5,
    en="a group's seconds, from a mark taken before its calls, are divided by calls",
    zh="每组的秒数（标记在该组调用之前）除以 calls",
)
def harness_per_call(learner, variant):
    rng = variant.random
    calls = rng.randint(2, 5)
    pattern = [float(rng.randint(1, 9)) for _ in range(calls)]
    want = sum(pattern) / calls
    seconds = _timed(learner, pattern * 3, calls=calls, repeats=3, warmup=0, queued=float(rng.randint(10, 90)))
    assert math.isclose(seconds, want), f"expected {want}, got {seconds}"
    cost = rng.choice([0.25, 0.5, 1.5])
    got = learner.run("time_on_host", cost, float(rng.randint(10, 90)), calls=calls, repeats=3, warmup=1)
    assert isinstance(got, float) and math.isclose(got, cost), (
        f"with a synchronizing host clock: expected {cost}, got {got!r}"
    )


@check(
    "01-harness-1",
    points=0.5,
    en="the result is the median of the groups (odd count), not their mean",
    zh="结果是各组的中位数（组数为奇数），不是平均值",
)
def harness_median_odd(learner, variant):
    rng = variant.random
    repeats = rng.choice([3, 5, 7])
    groups = [float(rng.randint(1, 20)) for _ in range(repeats)]
    groups[rng.randrange(repeats)] = float(rng.randint(500, 900))  # an outlier moves the mean, not the median
    seconds = _timed(learner, groups, calls=1, repeats=repeats, warmup=0)
    assert math.isclose(seconds, _median(groups)), f"groups {groups}: expected {_median(groups)}, got {seconds}"


@check(
    "01-harness-1",
    points=0.5,
    en="an even number of groups gives the mean of the middle two",
    zh="组数为偶数时取中间两个的平均",
)
def harness_median_even(learner, variant):
    rng = variant.random
    repeats, calls = rng.choice([2, 4, 6]), rng.randint(1, 3)
    costs = [float(rng.randint(1, 40)) for _ in range(repeats * calls)]
    want = _median(_groups(costs, calls, repeats, 0))
    seconds = _timed(learner, costs, calls=calls, repeats=repeats, warmup=0)
    assert math.isclose(seconds, want), f"expected {want}, got {seconds}"


@check(
    "01-harness-1",
    points=0.5,
    en="calls < 1 or repeats < 1 raises ValueError",
    zh="calls < 1 或 repeats < 1 时抛出 ValueError",
)
def harness_value_error(learner, variant):
    rng = variant.random
    for calls, repeats in ((0, rng.randint(1, 5)), (rng.randint(1, 5), 0), (-rng.randint(1, 3), 2)):
        raised = _raised(learner, "time_on_device", [1.0], 0.0, calls=calls, repeats=repeats, warmup=0)
        assert raised is not None and raised.is_a("ValueError"), f"calls={calls}, repeats={repeats}: got {raised}"


# ---------------------------------------------------------------- 01-watt-1 (2 points)


def _table(rng):
    rows = []
    for i in range(rng.randint(3, 7)):
        rows.append(
            {
                "gpu": f"GPU-{chr(65 + i)}{rng.randint(10, 99)}",
                "fp16_tflops": round(rng.uniform(50, 2500), 1),
                "sparse": rng.random() < 0.5,
                "board_w": rng.randint(150, 1000),
            }
        )
    return rows


@check(
    "01-watt-1",
    points=1,
    en="{gpu: dense TFLOPS / board watts}, a sparse figure halved first",
    zh="返回 {gpu: 稠密 TFLOPS / 板卡瓦数}，含稀疏的数字先除以 2",
)
def watt_dense(learner, variant):
    rng = variant.random
    for _ in range(2):
        table = _table(rng)
        want = {r["gpu"]: (r["fp16_tflops"] / 2 if r["sparse"] else r["fp16_tflops"]) / r["board_w"] for r in table}
        got = learner.call("tflops_per_watt", table)
        assert type(got) is dict and set(got) == set(want), f"keys {sorted(want)}, got {got!r}"
        for gpu, value in want.items():
            assert isinstance(got[gpu], float) and math.isclose(got[gpu], value, rel_tol=1e-9), (
                f"{gpu}: expected {value}, got {got[gpu]!r}"
            )


@check(
    "01-watt-1",
    points=0.5,
    en="an empty table gives {}",
    zh="空表返回 {}",
    counts_with="watt_dense",
)
def watt_empty(learner, variant):
    got = learner.call("tflops_per_watt", [])
    assert type(got) is dict and got == {}, f"got {got!r}"


@check(
    "01-watt-1",
    points=0.5,
    en="a row with board_w <= 0 raises ValueError",
    zh="某行 board_w <= 0 时抛出 ValueError",
)
def watt_bad_power(learner, variant):
    rng = variant.random
    for watts in (0, -rng.randint(1, 500)):
        table = _table(rng)
        table[rng.randrange(len(table))]["board_w"] = watts
        raised = learner.raised("tflops_per_watt(__t)", __t=table)
        assert raised is not None and raised.is_a("ValueError"), f"board_w={watts}: got {raised}"


# ---------------------------------------------------------------- 01-stretch-triage-1 (2 points)

CHECK_NAMES = [
    "os",
    "kernel",
    "amdgpu",
    "rocm",
    "gpus",
    "access",
    "torch",
    "torch-arch",
    "visible",
    "iommu",
    "numa",
    "nccl-env",
    "disk",
    "mirror",
]


def _report(rng, statuses=("ok", "skip", "warn", "fail")):
    findings = []
    for name in rng.sample(CHECK_NAMES, rng.randint(6, len(CHECK_NAMES))):
        n = rng.randint(100, 999)
        findings.append(
            {
                "check": name,
                "status": rng.choice(statuses),
                "title": f"{name} {n}",
                "fix_en": f"fix {name} ({n})",
                "fix_zh": f"修复 {name}（{n}）",
                "doc": "",
            }
        )
    return {"version": 1, "findings": findings}


def _ref_triage(report, key):
    return [
        {"check": f["check"], "status": f["status"], "fix": f[key]}
        for status in ("fail", "warn")
        for f in report["findings"]
        if f["status"] == status
    ]


@check(
    "01-stretch-triage-1",
    points=1,
    en="every fail, then every warn, each in report order, as {check, status, fix} with fix_en",
    zh="先所有 fail、再所有 warn，各组保持报告顺序，每项为 {check, status, fix}，fix 取 fix_en",
)
def triage_order(learner, variant):
    rng = variant.random
    for _ in range(2):
        report = _report(rng)
        got = learner.call("triage", report)
        assert_equal(got, _ref_triage(report, "fix_en"), what="triage")


@check(
    "01-stretch-triage-1",
    points=0.5,
    en="lang='zh' takes fix_zh",
    zh="lang='zh' 时 fix 取 fix_zh",
)
def triage_zh(learner, variant):
    rng = variant.random
    report = _report(rng, ("warn", "fail", "ok"))
    got = learner.call("triage", report, lang="zh")
    assert_equal(got, _ref_triage(report, "fix_zh"), what="triage(lang='zh')")


@check(
    "01-stretch-triage-1",
    points=0.5,
    en="nothing to act on gives []",
    zh="没有 fail / warn 时返回 []",
    counts_with="triage_order",
)
def triage_nothing(learner, variant):
    rng = variant.random
    for report in ({"findings": []}, _report(rng, ("ok", "skip"))):
        got = learner.call("triage", report)
        assert type(got) is list and got == [], f"got {got!r}"
