"""Lab 09's hidden checks, run by the trusted harness (rocmlab.harness) outside the learner's kernel.

Each check grades one rule that the lab's prose states, on inputs drawn from the learner's seed; the
references below are computed here, from the contract, never with the learner's code.
"""

import json
import re
import statistics

from rocmlab.check_compare import assert_close, assert_equal, label
from rocmlab.harness import check, mistake

# The notebook's course data, read by the harness from lab.py (never from the kernel, where a later
# cell may rebind it): one copy, the notebook's.
CATEGORIES = LAB_CONSTANTS["CATEGORIES"]  # noqa: F821 (given by the harness)
LEVER_CHOICES = LAB_CONSTANTS["LEVER_CHOICES"]  # noqa: F821
METRIC_CHOICES = LAB_CONSTANTS["METRIC_CHOICES"]  # noqa: F821

# ---------------------------------------------------------------- references (instructor only)


def ref_shares(rows, categories):
    total = sum(r["self_us"] for r in rows)
    shares = dict.fromkeys(categories, 0.0) | {"other": 0.0}
    for r in rows:
        cat = next((c for c, patterns in categories.items() if any(p in r["name"] for p in patterns)), "other")
        shares[cat] += r["self_us"]
    return {c: v / total for c, v in shares.items()}


def ref_busy_idle(intervals, start, end):
    """Union length and longest gap inside [start, end], by sweeping the clipped, sorted intervals."""
    spans = sorted((max(a, start), min(b, end)) for a, b in intervals if b > a)
    spans = [(a, b) for a, b in spans if b > a]
    busy, gap, cursor = 0, 0, start
    for a, b in spans:
        if a > cursor:
            gap = max(gap, a - cursor)
            cursor = a
        if b > cursor:
            busy += b - cursor
            cursor = b
    gap = max(gap, end - cursor)
    idle = (end - start) - busy
    return {"busy": busy, "idle": idle, "idle_fraction": idle / (end - start), "largest_gap": gap}


def ref_compare(baseline, lever):
    def iqr(samples):
        q = statistics.quantiles(samples, n=4, method="inclusive")
        return q[2] - q[0]

    base, new = statistics.median(baseline), statistics.median(lever)
    noise = max(iqr(baseline), iqr(lever))
    verdict = "faster" if base - new > noise else "slower" if new - base > noise else "no difference"
    return {
        "baseline_median_s": base,
        "lever_median_s": new,
        "speedup": base / new,
        "noise_s": noise,
        "verdict": verdict,
        "margin": abs(abs(base - new) - noise),
    }


def names(message, number):
    """Whether an error message names ``number`` (not as part of a longer number)."""
    return re.search(rf"(?<!\d){number}(?!\d)", message) is not None


TOL = 1e-9  # the references' float rounding, relative and absolute


def samples(rng, center, n):
    return [round(center * (1 + rng.uniform(-0.05, 0.05)), 6) for _ in range(n)]


# ---------------------------------------------------------------- exercise 1: self_time_shares

OPS = [
    "aten::addmm",
    "aten::mm",
    "aten::add",
    "aten::add_",
    "aten::mul",
    "aten::silu",
    "aten::copy_",
    "aten::flip",
    "aten::cat",
    "aten::scaled_dot_product_attention",
    "aten::rsqrt",
    "aten::index",
]


def random_rows(rng, n):
    return [
        {"name": rng.choice(OPS), "self_us": float(rng.randint(0, 500)), "calls": rng.randint(1, 9)} for _ in range(n)
    ] + [{"name": "aten::mm", "self_us": float(rng.randint(1, 99)), "calls": 1}]


@check(
    "09-shares-1",
    points=0.5,
    en="each category's share is its self time over the total self time",
    zh="每个类别的比例 = 该类自身时间 / 全部自身时间",
)
def shares_values(learner, variant):
    rng = variant.random
    categories = {"matmul": ["mm"], "elementwise": ["aten::mul", "aten::silu"], "data": ["copy_", "cat"]}
    cases = [(random_rows(rng, rng.randint(4, 15)), categories)]
    rows = learner.get("PROFILE_ROWS")  # the notebook's own profile: evidence of its run, sorted here by CATEGORIES
    assert type(rows) is list and len(rows) >= 5, (
        f"the notebook's profile has {len(rows) if type(rows) is list else rows!r} rows"
    )
    cases.append((rows, CATEGORIES))
    for rows, cats in cases:
        got, want = learner.call("self_time_shares", rows, cats), ref_shares(rows, cats)
        assert_close(got, want, rtol=TOL, atol=TOL, what=label("self_time_shares", rows=len(rows), categories=cats))


@check(
    "09-shares-1",
    points=0.5,
    en="an operator goes to the first category with a matching pattern",
    zh="算子归入第一个有模式匹配的类别",
)
def shares_first_match(learner, variant):
    rng = variant.random
    a, m = float(rng.randint(10, 90)), float(rng.randint(10, 90))
    rows = [{"name": "aten::addmm", "self_us": a, "calls": 1}, {"name": "aten::mm", "self_us": m, "calls": 2}]
    got = learner.call("self_time_shares", rows, {"add": ["aten::add"], "matmul": ["mm"]})
    assert_close(got["add"], a / (a + m), rtol=TOL, atol=TOL, what="the share of 'add' (aten::addmm)")
    assert_close(got["matmul"], m / (a + m), rtol=TOL, atol=TOL, what="the share of 'matmul' (aten::mm)")


@check(
    "09-shares-1",
    points=0.5,
    en="every category and 'other' is a key, 0.0 when it has no operator",
    zh="每个类别和 'other' 都是键，没有算子时为 0.0",
    counts_with="shares_values",
)
def shares_keys(learner, variant):
    rng = variant.random
    names = rng.sample(["gemm", "norm", "act", "io", "misc"], 3)
    rows = [{"name": "aten::mm", "self_us": float(rng.randint(1, 50)), "calls": 1}]
    got = learner.call("self_time_shares", rows, {names[0]: ["mm"], names[1]: ["zzz"], names[2]: ["yyy"]})
    empty = (names[1], names[2], "other")
    assert_equal(sorted(got), sorted([names[0], *empty]), what="the keys")
    assert_equal([got[k] for k in empty], [0.0] * 3, what="the shares of the categories without an operator")
    assert_close(got[names[0]], 1.0, rtol=TOL, atol=TOL, what="the share of the one category with an operator")


@check(
    "09-shares-1",
    points=0.5,
    en="raises ValueError when the self times sum to 0 or there are no rows",
    zh="自身时间之和为 0 或没有行时抛出 ValueError",
)
def shares_raises(learner, variant):
    for rows in ([], [{"name": "aten::mm", "self_us": 0.0, "calls": variant.random.randint(1, 5)}]):
        raised = learner.raised("self_time_shares(rows, {'matmul': ['mm']})", rows=rows)
        assert raised is not None and raised.is_a("ValueError"), f"{rows}: {raised}"


# ---------------------------------------------------------------- exercise 1b: profile_decode


def recorded_trace(learner, variant, tag):
    """Run the learner's profile_decode on a step count of this learner's own; the step count and the trace events."""
    steps = variant.random.randint(2, 4)
    path = f"check_{tag}_{variant.random.randrange(10**6)}.json"
    returned = learner.call("profile_decode", steps, path)
    assert returned == path, "profile_decode did not return trace_path"
    events = json.loads(learner.file(path).decode("utf-8"))["traceEvents"]
    return steps, events


@check(
    "09-record-1",
    points=0.5,
    en="profile_decode writes a Chrome trace of operator events to trace_path and returns trace_path",
    zh="profile_decode 把含算子事件的 Chrome 轨迹写到 trace_path，并返回 trace_path",
)
def record_writes_trace(learner, variant):
    _, events = recorded_trace(learner, variant, "trace")
    assert any(e.get("cat") == "cpu_op" and e.get("name", "").startswith("aten::") for e in events)


@check(
    "09-record-1",
    points=1,
    en="the warm-up step is not recorded: exactly n_steps decode_step ranges, marks ProfilerStep#1 … #n_steps",
    zh="预热步不被记录：恰好 n_steps 个 decode_step 区间，步标记为 ProfilerStep#1 … #n_steps",
)
def record_schedule(learner, variant):
    steps, events = recorded_trace(learner, variant, "schedule")
    marks = sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert marks == sorted(f"ProfilerStep#{i}" for i in range(1, steps + 1)), marks
    ranges = [e for e in events if e.get("name") == "decode_step" and e.get("cat") == "user_annotation"]
    assert len(ranges) == steps, len(ranges)


@check(
    "09-record-1",
    points=0.5,
    en='every operator event carries its input shapes ("Input Dims")',
    zh='每个算子事件都带输入形状（"Input Dims"）',
)
def record_shapes(learner, variant):
    _, events = recorded_trace(learner, variant, "shapes")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    assert ops and all("Input Dims" in e.get("args", {}) for e in ops)


@check(
    "09-record-1",
    points=0.5,
    en='the trace holds memory events ("[memory]")',
    zh='轨迹里有内存事件（"[memory]"）',
)
def record_memory(learner, variant):
    _, events = recorded_trace(learner, variant, "memory")
    assert any(e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {}) for e in events)


@check(
    "09-record-1",
    points=0.5,
    en="profile_decode raises ValueError when n_steps is below 1",
    zh="n_steps 小于 1 时 profile_decode 抛出 ValueError",
)
def record_rejects_no_steps(learner, variant):
    for steps in (0, -variant.random.randint(1, 5)):
        raised = learner.raised("profile_decode(n, 'never_written.json')", n=steps)
        assert raised is not None and raised.is_a("ValueError"), steps


# ---------------------------------------------------------------- exercise 2: busy_and_idle


def random_intervals(rng, n, lo, hi):
    return [(a, a + rng.randint(1, 15)) for a in (rng.randint(lo, hi) for _ in range(n))]


@mistake(
    en="busy as the sum of the interval lengths: overlapping work (concurrent kernels, nested operators) is counted twice",
    zh="把区间长度直接相加当作 busy：重叠的工作（并发的 kernel、嵌套的算子）被算了两次",
    code="""
def busy_and_idle(intervals, start, end):
    if not end > start:
        raise ValueError(f"the window must have end > start, got [{start}, {end}]")
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals if b > a and b > start and a < end)
    busy = sum(b - a for a, b in clipped)
    gaps = [b - a for (_, a), (b, _) in zip([(start, start), *clipped], [*clipped, (end, end)])]
    idle = (end - start) - busy
    return {"busy": busy, "idle": idle, "idle_fraction": idle / (end - start), "largest_gap": max(gaps)}
""",
)
@check(
    "09-idle-1",
    points=1,
    en="busy is the length of the union of the intervals inside the window; idle and idle_fraction follow from it",
    zh="busy 是窗口内区间并集的长度，idle 与 idle_fraction 由它得出",
)
def idle_union(learner, variant):
    rng = variant.random
    for _ in range(6):
        start = rng.randint(-5, 20)
        end = start + rng.randint(30, 90)
        iv = random_intervals(rng, rng.randint(3, 12), start - 10, end + 5)
        got, want = learner.call("busy_and_idle", iv, start, end), ref_busy_idle(iv, start, end)
        for key in ("busy", "idle", "idle_fraction"):
            assert_close(got[key], want[key], rtol=TOL, atol=TOL, what=label(key, intervals=iv, window=(start, end)))
    windows, work = learner.call("trace_work", "decode_trace.json")  # the notebook's own decode trace
    total = sum(b - a for a, b in windows)
    idle = sum(ref_busy_idle(work, a, b)["idle"] for a, b in windows)
    mine = learner.get("DECODE_IDLE")
    assert_close(mine["idle"], idle, rtol=1e-6, atol=1e-6, what="DECODE_IDLE['idle'], from the decode trace")
    assert_close(mine["busy"], total - idle, rtol=1e-6, atol=1e-6, what="DECODE_IDLE['busy'], from the decode trace")


@check(
    "09-idle-1",
    points=1,
    en="largest_gap is the longest stretch without work, before the first and after the last interval included",
    zh="largest_gap 是最长的无工作时间，包括第一个区间之前和最后一个之后",
)
def idle_gap(learner, variant):
    rng = variant.random
    cases = [([(rng.randint(20, 40), 50), (rng.randint(1, 5), 10)], 0, 100), ([(0, 100), (10, 20)], 0, 100)]
    for _ in range(5):
        cases.append((random_intervals(rng, rng.randint(2, 8), -10, 90), 0, 90))
    for iv, start, end in cases:
        got = learner.call("busy_and_idle", iv, start, end)["largest_gap"]
        want = ref_busy_idle(iv, start, end)["largest_gap"]
        assert_close(got, want, rtol=TOL, atol=TOL, what=label("largest_gap", intervals=iv, window=(start, end)))


@check(
    "09-idle-1",
    points=0.5,
    en="an empty interval (end <= start) holds no work",
    zh="长度为 0 的区间（结束 <= 开始）不含工作",
)
def idle_empty(learner, variant):
    a = variant.random.randint(10, 40)
    iv = [(a, a), (a + 20, a + 5), (a + 30, a + 35)]
    got, want = learner.call("busy_and_idle", iv, 0, 100), ref_busy_idle(iv, 0, 100)
    assert_close(got["busy"], 5, rtol=TOL, atol=TOL, what=label("busy", intervals=iv))
    assert_close(got["largest_gap"], want["largest_gap"], rtol=TOL, atol=TOL, what=label("largest_gap", intervals=iv))


@check("09-idle-1", points=0.5, en="raises ValueError when end <= start", zh="end <= start 时抛出 ValueError")
def idle_raises(learner, variant):
    s = variant.random.randint(0, 50)
    for start, end in ((s, s), (s + 3, s)):
        raised = learner.raised("busy_and_idle([(0, 1)], s, e)", s=start, e=end)
        assert raised is not None and raised.is_a("ValueError"), f"[{start}, {end}]: {raised}"


# ---------------------------------------------------------------- exercise 4: compare_runs


def random_pair(rng, outlier=False):
    n, m = rng.randint(3, 9), rng.randint(3, 9)
    base = samples(rng, rng.uniform(1e-3, 1e-2), n)
    lever = samples(rng, base[0] * rng.choice([0.5, 0.99, 1.0, 1.01, 1.6]), m)
    if outlier:
        base.append(base[0] * 20)
    return base, lever


@check(
    "09-noise-1",
    points=0.5,
    en="baseline_median_s and lever_median_s are medians; speedup is their ratio",
    zh="两个中位数正确，speedup = 基线中位数 / 杠杆中位数",
)
def noise_medians(learner, variant):
    rng = variant.random
    for i in range(5):
        base, lever = random_pair(rng, outlier=i % 2 == 0)
        got, want = learner.call("compare_runs", base, lever), ref_compare(base, lever)
        for key in ("baseline_median_s", "lever_median_s", "speedup"):
            assert_close(got[key], want[key], rtol=TOL, atol=TOL, what=label(key, baseline=base, lever=lever))


@mistake(
    en="noise as max - min: one outlier sample hides any difference",
    zh="把噪声取为最大值减最小值：一个离群样本就会掩盖任何差异",
    code="""
def compare_runs(baseline, lever):
    for name, samples in (("baseline", baseline), ("lever", lever)):
        if len(samples) < 3:
            raise ValueError(f"{name} needs at least 3 samples, got {len(samples)}")
    base, new = statistics.median(baseline), statistics.median(lever)
    noise = max(max(baseline) - min(baseline), max(lever) - min(lever))
    verdict = "faster" if base - new > noise else ("slower" if new - base > noise else "no difference")
    return {"baseline_median_s": base, "lever_median_s": new, "speedup": base / new, "noise_s": noise,
            "verdict": verdict}
""",
)
@check(
    "09-noise-1",
    points=1,
    en="noise_s is the larger interquartile range (Q3 - Q1), not max - min",
    zh="noise_s 是两组四分位距 (Q3 - Q1) 中较大者，不是最大值 - 最小值",
)
def noise_iqr(learner, variant):
    rng = variant.random
    for i in range(5):
        base, lever = random_pair(rng, outlier=i < 3)
        got = learner.call("compare_runs", base, lever)["noise_s"]
        assert_close(got, ref_compare(base, lever)["noise_s"], rtol=TOL, atol=TOL, what=label("noise_s", baseline=base))


@check(
    "09-noise-1",
    points=1,
    en="the verdict is faster / slower only when the median difference exceeds the noise",
    zh="只有中位数之差超过噪声时才判为 faster / slower",
)
def noise_verdict(learner, variant):
    rng = variant.random
    cases = [([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])]
    while len(cases) < 8:
        pair = random_pair(rng, outlier=rng.random() < 0.5)
        if ref_compare(*pair)["margin"] > 1e-9:  # never grade a tie that rounding could flip
            cases.append(pair)
    for base, lever in cases:
        got = learner.call("compare_runs", base, lever)["verdict"]
        assert_equal(got, ref_compare(base, lever)["verdict"], what=label("verdict", baseline=base, lever=lever))


@check(
    "09-noise-1",
    points=0.5,
    en="raises ValueError when a set has fewer than 3 samples",
    zh="任一组少于 3 个样本时抛出 ValueError",
)
def noise_raises(learner, variant):
    ok = samples(variant.random, 1.0, 4)
    for base, lever in ((ok[:2], ok), (ok, []), (ok, ok[:1])):
        raised = learner.raised("compare_runs(b, l)", b=base, l=lever)
        assert raised is not None and raised.is_a("ValueError"), f"{len(base)}, {len(lever)}: {raised}"


# ---------------------------------------------------------------- exercise 7: kernel_summary


def trace_rows(rng, names, n):
    rows, t = [], rng.randint(0, 1000)
    for d in range(1, n + 1):
        dur = rng.randint(1, 5000)
        rows.append(
            {
                "Kernel_Name": rng.choice(names),
                "Start_Timestamp": str(t),
                "End_Timestamp": str(t + dur),
                "Dispatch_Id": str(d),
            }
        )
        t += dur + rng.randint(0, 300)
    return rows


def ref_summary(rows):
    totals, calls = {}, {}
    for r in rows:
        totals[r["Kernel_Name"]] = totals.get(r["Kernel_Name"], 0) + int(r["End_Timestamp"]) - int(r["Start_Timestamp"])
        calls[r["Kernel_Name"]] = calls.get(r["Kernel_Name"], 0) + 1
    grand = sum(totals.values())
    out = [{"name": k, "calls": calls[k], "total_ns": v, "share": v / grand} for k, v in totals.items()]
    return sorted(out, key=lambda r: (-r["total_ns"], r["name"]))


KERNELS = ["Cijk_Alik_Bljk_BBS_BH", "attn_fwd", "rms_norm_kernel", "elementwise_kernel", "reduce_kernel"]


@check(
    "09-rocprof-1",
    points=0.5,
    en="calls and total_ns (integer ns) per kernel name",
    zh="每个 kernel 名的 calls 与 total_ns（整数纳秒）",
)
def summary_totals(learner, variant):
    rows = trace_rows(variant.random, KERNELS, variant.random.randint(8, 40))
    got = {r["name"]: r for r in learner.call("kernel_summary", rows)}
    want = {r["name"]: r for r in ref_summary(rows)}
    assert_equal(sorted(got), sorted(want), what="the kernel names")
    for name, w in want.items():
        assert_equal(got[name]["calls"], w["calls"], what=label("calls", kernel=name))
        assert_equal(got[name]["total_ns"], w["total_ns"], what=label("total_ns", kernel=name))
        assert type(got[name]["total_ns"]) is int, f"total_ns is {type(got[name]['total_ns']).__name__}"


@check(
    "09-rocprof-1",
    points=0.5,
    en="share is the kernel's fraction of all kernels' time",
    zh="share 是该 kernel 占全部 kernel 时间的比例",
)
def summary_share(learner, variant):
    rows = trace_rows(variant.random, KERNELS, variant.random.randint(8, 40))
    got = {r["name"]: r["share"] for r in learner.call("kernel_summary", rows)}
    for w in ref_summary(rows):
        assert_close(got[w["name"]], w["share"], rtol=TOL, atol=TOL, what=label("share", kernel=w["name"]))


@check(
    "09-rocprof-1",
    points=0.5,
    en="sorted by total_ns descending, ties by name",
    zh="按 total_ns 从大到小排序，相同时按名字",
)
def summary_order(learner, variant):
    rng = variant.random
    rows = trace_rows(rng, KERNELS, rng.randint(8, 30))
    d = rng.randint(10, 99)
    ties = rng.sample(["zeta", "alpha", "mid", "beta"], 3)
    rows += [
        {"Kernel_Name": n, "Start_Timestamp": "0", "End_Timestamp": str(d), "Dispatch_Id": str(900 + i)}
        for i, n in enumerate(ties)
    ]
    got = [r["name"] for r in learner.call("kernel_summary", rows)]
    assert_equal(got, [r["name"] for r in ref_summary(rows)], what="the kernels, in order")


@check(
    "09-rocprof-1",
    points=0.5,
    en="a row that ends before it starts raises ValueError naming its Dispatch_Id",
    zh="结束早于开始的行抛出 ValueError，消息写明其 Dispatch_Id",
)
def summary_raises(learner, variant):
    rng = variant.random
    rows = trace_rows(rng, KERNELS, 5)
    bad = str(rng.randint(1000, 99999))
    rows.insert(
        rng.randint(0, 5), {"Kernel_Name": "k", "Start_Timestamp": "900", "End_Timestamp": "500", "Dispatch_Id": bad}
    )
    raised = learner.raised("kernel_summary(rows)", rows=rows)
    assert raised is not None and raised.is_a("ValueError"), raised
    assert names(raised.message, bad), f"dispatch {bad} not named: {raised.message}"


# ---------------------------------------------------------------- exercise 8: counter_metrics


def counter_rows(rng, name, counters, dispatches):
    rows, t = [], rng.randint(0, 10**6)
    for d in dispatches:
        dur = rng.randint(1000, 90000)
        for c in counters:
            value = round(rng.uniform(0, 1e5), 2)
            rows.append(
                {
                    "Kernel_Name": name,
                    "Dispatch_Id": str(d),
                    "Counter_Name": c,
                    "Counter_Value": str(value),
                    "Start_Timestamp": str(t),
                    "End_Timestamp": str(t + dur),
                }
            )
        t += dur + 100
    return rows


def ref_counters(rows, name):
    mine = [r for r in rows if r["Kernel_Name"] == name]
    ns = sum({r["Dispatch_Id"]: int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in mine}.values())
    c = {}
    for r in mine:
        c[r["Counter_Name"]] = c.get(r["Counter_Name"], 0.0) + float(r["Counter_Value"])
    return ns, c, len({r["Dispatch_Id"] for r in mine})


PASS_1 = ["FETCH_SIZE", "WRITE_SIZE", "SQ_INSTS_VALU_MFMA_MOPS_BF16"]
PASS_2 = ["SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT"]


@check(
    "09-stretch-counters-1",
    points=0.75,
    en="dispatches counts distinct Dispatch_Ids; each dispatch's duration counts once",
    zh="dispatches 是不同 Dispatch_Id 的个数；每个 dispatch 的时长只计一次",
)
def counters_duration(learner, variant):
    rng = variant.random
    rows = counter_rows(rng, "gemm", PASS_1, range(1, rng.randint(2, 6)))
    rows += counter_rows(rng, "attn", PASS_2, range(50, 50 + rng.randint(1, 5)))
    rng.shuffle(rows)
    got = learner.call("counter_metrics", rows)
    for name in ("gemm", "attn"):
        ns, _, n = ref_counters(rows, name)
        assert_equal(got[name]["dispatches"], n, what=label("dispatches", kernel=name))
        assert_equal(got[name]["duration_ns"], ns, what=label("duration_ns", kernel=name))


@check(
    "09-stretch-counters-1",
    points=0.5,
    en="dram_gbs = (FETCH_SIZE + WRITE_SIZE) x 1024 / duration_ns",
    zh="dram_gbs = (FETCH_SIZE + WRITE_SIZE) × 1024 / duration_ns",
)
def counters_dram(learner, variant):
    rows = counter_rows(variant.random, "gemm", PASS_1, range(1, variant.random.randint(2, 6)))
    ns, c, _ = ref_counters(rows, "gemm")
    got = learner.call("counter_metrics", rows)["gemm"]["dram_gbs"]
    assert_close(got, (c["FETCH_SIZE"] + c["WRITE_SIZE"]) * 1024 / ns, rtol=TOL, atol=TOL, what="dram_gbs")


@check(
    "09-stretch-counters-1",
    points=0.5,
    en="mfma_bf16_tflops = SQ_INSTS_VALU_MFMA_MOPS_BF16 x 512 / duration_ns / 1000",
    zh="mfma_bf16_tflops = SQ_INSTS_VALU_MFMA_MOPS_BF16 × 512 / duration_ns / 1000",
)
def counters_mfma(learner, variant):
    rows = counter_rows(variant.random, "gemm", PASS_1, range(1, variant.random.randint(2, 6)))
    ns, c, _ = ref_counters(rows, "gemm")
    got = learner.call("counter_metrics", rows)["gemm"]["mfma_bf16_tflops"]
    assert_close(got, c["SQ_INSTS_VALU_MFMA_MOPS_BF16"] * 512 / ns / 1000, rtol=TOL, atol=TOL, what="mfma_bf16_tflops")


@check(
    "09-stretch-counters-1",
    points=0.75,
    en="lds_conflicts_per_access = conflicts / (active - conflicts), None when that is 0",
    zh="lds_conflicts_per_access = 冲突 / (活跃 - 冲突)，分母为 0 时为 None",
)
def counters_lds(learner, variant):
    rng = variant.random
    rows = counter_rows(rng, "attn", PASS_2, range(1, rng.randint(2, 6)))
    for r in rows:  # conflicts stay below the active cycles
        low, high = (0, 2e4) if r["Counter_Name"] == "SQ_LDS_BANK_CONFLICT" else (3e4, 1e5)
        r["Counter_Value"] = str(round(rng.uniform(low, high), 2))
    q = rng.randint(0, 500)
    rows += [
        {
            "Kernel_Name": "idle",
            "Dispatch_Id": "99",
            "Counter_Name": c,
            "Counter_Value": str(q),
            "Start_Timestamp": "0",
            "End_Timestamp": "100",
        }
        for c in PASS_2
    ]
    _, c, _ = ref_counters(rows, "attn")
    got = learner.call("counter_metrics", rows)
    want = c["SQ_LDS_BANK_CONFLICT"] / (c["SQ_LDS_IDX_ACTIVE"] - c["SQ_LDS_BANK_CONFLICT"])
    assert_close(got["attn"]["lds_conflicts_per_access"], want, rtol=TOL, atol=TOL, what="lds_conflicts_per_access")
    assert got["idle"]["lds_conflicts_per_access"] is None, got["idle"]


@check(
    "09-stretch-counters-1",
    points=0.5,
    en="a metric whose counters are missing is None",
    zh="缺少所需计数器的指标为 None",
    counts_with="counters_duration",
)
def counters_missing(learner, variant):
    rng = variant.random
    rows = counter_rows(rng, "gemm", PASS_1, [1, 2]) + counter_rows(rng, "attn", PASS_2, [3])
    rows += counter_rows(rng, "half", ["FETCH_SIZE"], [4])
    got = learner.call("counter_metrics", rows)
    assert got["gemm"]["lds_conflicts_per_access"] is None, got["gemm"]
    assert got["attn"]["dram_gbs"] is None and got["attn"]["mfma_bf16_tflops"] is None, got["attn"]
    assert got["half"]["dram_gbs"] is None, got["half"]


# ---------------------------------------------------------------- exercise 9: memory_timeline


def memory_events(rng, device, n, start):
    events, total, live = [], start, []
    for t in range(n):
        if live and rng.random() < 0.4:
            size = -live.pop(rng.randrange(len(live)))
        else:
            size = rng.randint(1, 50) * 512
            live.append(size)
        total += size
        events.append(
            {
                "name": "[memory]",
                "ts": 1000 + 10 * t,
                "args": {"Bytes": size, "Total Allocated": total, "Device Type": device},
            }
        )
    return events


def ref_memory(events, device):
    mem = sorted(
        (e for e in events if e["name"] == "[memory]" and e["args"]["Device Type"] == device), key=lambda e: e["ts"]
    )
    start = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    peak = max(e["args"]["Total Allocated"] for e in mem)
    return {
        "start_bytes": start,
        "peak_bytes": peak,
        "peak_above_start": peak - start,
        "largest_alloc_bytes": max(e["args"]["Bytes"] for e in mem),
    }


@check(
    "09-memory-1",
    points=0.75,
    en="start, peak, peak above start and the largest allocation, in bytes",
    zh="起点、峰值、峰值减起点与最大单次分配（字节）",
)
def memory_values(learner, variant):
    rng = variant.random
    events = memory_events(rng, 0, rng.randint(5, 30), rng.randint(0, 10**6))
    events.insert(2, {"name": "aten::mm", "ts": 1005, "args": {}})
    assert_equal(learner.call("memory_timeline", events, 0), ref_memory(events, 0), what="memory_timeline")


@check("09-memory-1", points=0.5, en="events are taken in time order (ts)", zh="事件按时间 (ts) 顺序处理")
def memory_order(learner, variant):
    rng = variant.random
    events = memory_events(rng, 0, rng.randint(5, 30), rng.randint(0, 10**6))
    rng.shuffle(events)
    assert_equal(learner.call("memory_timeline", events, 0), ref_memory(events, 0), what="memory_timeline, shuffled")


@check(
    "09-memory-1",
    points=0.5,
    en="only [memory] events of the requested device type count",
    zh="只计入所要求设备类型的 [memory] 事件",
)
def memory_device(learner, variant):
    rng = variant.random
    events = memory_events(rng, 0, 10, rng.randint(0, 1000)) + memory_events(rng, 1, 12, rng.randint(10**6, 10**7))
    rng.shuffle(events)
    for device in (0, 1):
        got = learner.call("memory_timeline", events, device)
        assert_equal(got, ref_memory(events, device), what=label("memory_timeline", device=device))


@check(
    "09-memory-1", points=0.25, en="raises ValueError when no event qualifies", zh="没有符合条件的事件时抛出 ValueError"
)
def memory_raises(learner, variant):
    events = memory_events(variant.random, 0, 5, 100) + [{"name": "aten::mm", "ts": 1, "args": {}}]
    raised = learner.raised("memory_timeline(e, 1)", e=events)
    assert raised is not None and raised.is_a("ValueError"), raised


# ---------------------------------------------------------------- exercise 10: two profiles, one lever

# The judgement for each case and why it holds (the notebook's prose and CASE_METRICS give the evidence).
JUDGEMENT_KEY = {
    # the same 921 kernels and the same busy time; only the gaps between launches close: graph replay
    "A": ("graphs", "idle_fraction"),
    # the peak falls while the largest single allocation (the logits) stays: activations are recomputed
    "B": ("activation checkpointing", "peak_above_start_mib"),
    # what checkpointing leaves is the largest single allocation, the logits (B x T x vocab): compute the loss in chunks
    "C": ("chunked loss", "largest_alloc_mib"),
}
CASE_RULES = {
    "A": ("the gaps between the same kernels close", "同样的 kernel 之间的空隙消失了"),
    "B": ("the training step's peak falls, its largest allocation does not", "训练步的峰值下降，最大的单次分配不变"),
    "C": ("the largest single allocation, which checkpointing leaves", "激活检查点留下的最大单次分配"),
}


def judgement(learner, case):
    answers = learner.get("JUDGEMENTS")
    assert type(answers) is dict and type(answers.get(case)) is dict, f"JUDGEMENTS[{case!r}] is not a dict"
    return answers[case]


@check(
    "09-judge-1",
    points=0.5,
    en="JUDGEMENTS has the cases A, B and C, each a lever from LEVER_CHOICES and a metric from METRIC_CHOICES",
    zh="JUDGEMENTS 含案例 A、B、C，每个的杠杆取自 LEVER_CHOICES、指标取自 METRIC_CHOICES",
)
def judge_choices(learner, variant):
    answers = learner.get("JUDGEMENTS")
    levers, metrics = LEVER_CHOICES, METRIC_CHOICES
    assert type(answers) is dict and sorted(answers) == ["A", "B", "C"], f"keys {answers}"
    for case, answer in answers.items():
        assert type(answer) is dict and answer.get("lever") in levers and answer.get("metric") in metrics, case


def same_answer(learner, case, part):
    got = judgement(learner, case).get(part)
    want = JUDGEMENT_KEY[case][0 if part == "lever" else 1]
    assert_equal(got, want, what=label("JUDGEMENTS", case=case, part=part))


def judge_rule(case, part):
    """Case ``case``'s ``part`` ("lever" or "metric") as one graded rule of its own, worth 0.75."""
    what_en, what_zh = CASE_RULES[case]
    if part == "lever":
        en, zh = f"case {case}: the lever for {what_en}", f"案例 {case}：针对“{what_zh}”的杠杆"
    else:
        en = f"case {case}: the metric that proves it ({what_en}), not one that any lever moves"
        zh = f"案例 {case}：能证明它的指标（{what_zh}），而不是哪个杠杆都会改变的指标"

    def rule(learner, variant):
        same_answer(learner, case, part)

    rule.__name__ = f"judge_{part}_{case}"
    return check("09-judge-1", points=0.75, en=en, zh=zh)(rule)


for _case in CASE_RULES:
    for _part in ("lever", "metric"):
        globals()[f"judge_{_part}_{_case}"] = judge_rule(_case, _part)
