"""Write lab 09's illustrative profiler recordings into data/ (deterministic; run from anywhere).

No AMD GPU was available to record these files. They are ILLUSTRATIVE, not measured: every file
has the exact layout the tool writes (column names and order from the sources cited in
data/README.md), and every number comes from the simple model below, with the stated
efficiencies, for Qwen2.5-0.5B in bf16 on one MI300X (datasheet: 1307.4 TFLOPS dense BF16,
5.3 TB/s HBM3). tests/labs/test_lab09.py re-runs this script and checks that data/ matches it.

    python solutions/09-profiling/make_data.py [OUTPUT_DIR]
"""

from __future__ import annotations

import csv
import io
import math
import random
import statistics
import sys
from pathlib import Path

PEAK_BF16_FLOPS = 1307.4e12  # MI300X dense BF16, AMD datasheet
PEAK_HBM_BYTES = 5.3e12  # MI300X HBM3, AMD datasheet
GEMM_EFFICIENCY = 0.62  # assumed fraction of the compute peak a large bf16 GEMM reaches
MEMORY_EFFICIENCY = 0.65  # assumed fraction of the HBM peak a streaming kernel reaches
KERNEL_FLOOR_NS = 2600  # assumed shortest kernel duration
EAGER_GAP_NS = 9000  # assumed host time between two eager launches (Python + dispatcher + launch)
GRAPH_GAP_NS = 300  # assumed gap between kernels replayed from a HIP graph

HIDDEN, INTER, VOCAB, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 896, 4864, 151936, 24, 14, 2, 64

GEMM_SMALL = "Cijk_Alik_Bljk_BBS_BH_Bias_MT16x16x256_MI16x16x1_SN_GRVWA8_GRVWB8_WG16x16x1"
GEMM_LARGE = "Cijk_Alik_Bljk_BBS_BH_Bias_MT256x256x64_MI16x16x1_SN_GRVWA8_GRVWB8_WG32x8x1_WGM8"
GEMM_WIDE = "Cijk_Alik_Bljk_BBS_BH_MT256x224x64_MI16x16x1_SN_GRVWA8_GRVWB8_WG32x8x1_WGM8"
ATTN_DECODE = "attn_fwd_decode_bf16_hd64"
ATTN_PREFILL = "attn_fwd_bf16_causal_hd64_BLOCK128x64"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::{}>(int, at::native::{}, std::array<char*, {}ul>)"
COPY = EW.format("bfloat16_copy_kernel_cuda", "bfloat16_copy_kernel_cuda", 2)
POW = EW.format("pow_tensor_scalar_kernel<float>", "pow_tensor_scalar_kernel<float>", 2)
MEAN = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >"
RSQRT = EW.format("rsqrt_kernel_cuda<float>", "rsqrt_kernel_cuda<float>", 2)
MUL = EW.format("BinaryFunctor<c10::BFloat16, MulFunctor>", "BinaryFunctor<c10::BFloat16, MulFunctor>", 3)
ADD = EW.format("CUDAFunctor_add<c10::BFloat16>", "CUDAFunctor_add<c10::BFloat16>", 3)
CAT = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>"
NEG = EW.format("neg_kernel_cuda<c10::BFloat16>", "neg_kernel_cuda<c10::BFloat16>", 2)
SILU = EW.format("silu_kernel<c10::BFloat16>", "silu_kernel<c10::BFloat16>", 2)
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >"

TRACE_HEADER = [
    "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
    "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
    "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
    "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z",
]  # fmt: skip
COUNTER_HEADER = [
    "Correlation_Id", "Dispatch_Id", "Agent_Id", "Queue_Id", "Process_Id", "Thread_Id", "Grid_Size", "Kernel_Id",
    "Kernel_Name", "Workgroup_Size", "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count",
    "SGPR_Count", "Counter_Name", "Counter_Value", "Start_Timestamp", "End_Timestamp",
]  # fmt: skip
STATS_HEADER = ["Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs", "StdDev"]
RESOURCES = {  # kernel -> (LDS bytes, VGPR, AGPR, SGPR, workgroup size)
    GEMM_SMALL: (8192, 128, 0, 96, 256), GEMM_LARGE: (65536, 256, 256, 112, 256),
    GEMM_WIDE: (65536, 256, 256, 112, 256), ATTN_DECODE: (16384, 96, 0, 48, 256),
    ATTN_PREFILL: (49152, 128, 128, 80, 256),
}  # fmt: skip


def gemm_ns(m, n, k):
    flops, moved = 2 * m * n * k, 2 * (m * k + n * k + m * n)
    return max(KERNEL_FLOOR_NS, flops / (PEAK_BF16_FLOPS * GEMM_EFFICIENCY) * 1e9,
               moved / (PEAK_HBM_BYTES * MEMORY_EFFICIENCY) * 1e9)  # fmt: skip


def stream_ns(nbytes):
    return max(KERNEL_FLOOR_NS, nbytes / (PEAK_HBM_BYTES * MEMORY_EFFICIENCY) * 1e9)


def rmsnorm(tokens):
    """Qwen2RMSNorm in eager PyTorch: to fp32, pow, mean, rsqrt(+eps), mul, to bf16, mul by the weight."""
    size = tokens * HIDDEN
    return [(COPY, stream_ns(6 * size), {}), (POW, stream_ns(8 * size), {}), (MEAN, stream_ns(4 * size), {}),
            (RSQRT, KERNEL_FLOOR_NS, {}), (MUL, stream_ns(8 * size), {}), (COPY, stream_ns(6 * size), {}),
            (MUL, stream_ns(6 * size), {})]  # fmt: skip


def gemm(m, n, k):
    name = GEMM_SMALL if m < 64 else (GEMM_WIDE if n >= 4 * HIDDEN else GEMM_LARGE)
    moved = 2 * (m * k + n * k) * (1.0 if m < 64 else 1.35)  # large tiles re-read operands from HBM
    return (name, gemm_ns(m, n, k), {"flops": 2 * m * n * k, "read": moved, "write": 2 * m * n, "lds": 0.012})


def layer(tokens, context):
    kv = KV_HEADS * HEAD_DIM
    rope = [(MUL, KERNEL_FLOOR_NS, {}), (CAT, KERNEL_FLOOR_NS, {}), (NEG, KERNEL_FLOOR_NS, {}),
            (MUL, KERNEL_FLOOR_NS, {}), (ADD, KERNEL_FLOOR_NS, {})] * 2  # fmt: skip
    attn_flops = 4 * tokens * context * HEADS * HEAD_DIM // (2 if tokens > 1 else 1)
    attn_bytes = 2 * 2 * context * kv + 4 * tokens * HIDDEN
    attention = (ATTN_PREFILL if tokens > 1 else ATTN_DECODE,
                 max(gemm_ns(1, 1, 1), attn_flops / (PEAK_BF16_FLOPS * 0.35) * 1e9, stream_ns(attn_bytes)),
                 {"flops": attn_flops, "read": attn_bytes, "write": 2 * tokens * HIDDEN, "lds": 0.41})  # fmt: skip
    size = tokens * INTER
    return (rmsnorm(tokens) + [gemm(tokens, HIDDEN, HIDDEN), gemm(tokens, kv, HIDDEN), gemm(tokens, kv, HIDDEN)]
            + rope + [(CAT, stream_ns(4 * tokens * kv), {}), (CAT, stream_ns(4 * tokens * kv), {}), attention,
                      gemm(tokens, HIDDEN, HIDDEN), (ADD, stream_ns(6 * tokens * HIDDEN), {})]
            + rmsnorm(tokens) + [gemm(tokens, INTER, HIDDEN), gemm(tokens, INTER, HIDDEN),
                                 (SILU, stream_ns(4 * size), {}), (MUL, stream_ns(6 * size), {}),
                                 gemm(tokens, HIDDEN, INTER), (ADD, stream_ns(6 * tokens * HIDDEN), {})])  # fmt: skip


def forward(tokens, context):
    kernels = [k for _ in range(LAYERS) for k in layer(tokens, context)]
    return kernels + rmsnorm(tokens) + [gemm(tokens, VOCAB, HIDDEN), (ARGMAX, stream_ns(2 * tokens * VOCAB), {})]


def schedule(kernels, gap_ns, seed, t0):
    """(name, start_ns, end_ns, extra) per kernel: the device starts each kernel when the host has
    launched it (gap after the previous launch) and the previous kernel has finished."""
    rng = random.Random(seed)
    rows, launch, free = [], t0, t0
    for name, duration, extra in kernels:
        launch += round(gap_ns * rng.uniform(0.7, 1.4))
        start = max(launch, free) + rng.randint(200, 600)
        end = start + round(duration * rng.uniform(0.95, 1.08))
        rows.append((name, start, end, extra))
        free = end
    return rows


def csv_text(header, rows, quoted):
    """CSV as rocprofv3 writes it: every header name and every string field in double quotes."""
    lines = [",".join(f'"{h}"' for h in header)]
    lines += [",".join(f'"{v}"' if i in quoted else str(v) for i, v in enumerate(row)) for row in rows]
    return "\n".join(lines) + "\n"


def kernel_ids(rows):
    ids = {}
    for name, *_ in rows:
        ids.setdefault(name, 10 + len(ids))
    return ids


def trace_csv(rows, pid):
    ids, out = kernel_ids(rows), []
    for i, (name, start, end, _extra) in enumerate(rows, 1):
        lds, vgpr, agpr, sgpr, wg = RESOURCES.get(name, (0, 16, 0, 24, 256))
        grid = wg * max(1, round((end - start) / 40))
        out.append(["KERNEL_DISPATCH", "Agent 2", 1, 0, pid, i, ids[name], name, i, start, end, lds, 0, vgpr, agpr,
                    sgpr, wg, 1, 1, grid, 1, 1])  # fmt: skip
    return csv_text(TRACE_HEADER, out, quoted={0, 1, 7})


def stats_csv(rows):
    durations = {}
    for name, start, end, _ in rows:
        durations.setdefault(name, []).append(end - start)
    total = sum(sum(v) for v in durations.values())
    out = []
    for name, values in sorted(durations.items(), key=lambda item: -sum(item[1])):
        out.append([name, len(values), sum(values), f"{statistics.fmean(values):.6f}",
                    f"{100 * sum(values) / total:.4f}", min(values), max(values),
                    f"{statistics.pstdev(values):.6e}"])  # fmt: skip
    return csv_text(STATS_HEADER, out, quoted={0})


def counter_rows(rows, pid, counters, seed, iterations=2):
    """rocprofv3 --pmc rows for the first `iterations` dispatches of each kernel (kernel_iteration_range)."""
    rng, ids, seen, out = random.Random(seed), kernel_ids(rows), {}, []
    for i, (name, start, end, extra) in enumerate(rows, 1):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > iterations:
            continue
        duration = end - start
        lds_active = round(duration * 2.1 * 8) if extra.get("lds") else 0  # LDS-busy cycles, summed over SEs
        conflicts = round(lds_active * extra["lds"] / (1 + extra["lds"])) if lds_active else 0
        values = {"FETCH_SIZE": extra.get("read", 0) / 1024 or rng.uniform(40, 60) * duration / 1000,
                  "WRITE_SIZE": extra.get("write", 0) / 1024 or rng.uniform(30, 45) * duration / 1000,
                  "SQ_INSTS_VALU_MFMA_MOPS_BF16": round(extra.get("flops", 0) / 512),
                  "SQ_LDS_IDX_ACTIVE": lds_active, "SQ_LDS_BANK_CONFLICT": conflicts}  # fmt: skip
        lds, vgpr, agpr, sgpr, wg = RESOURCES.get(name, (0, 16, 0, 24, 256))
        grid = wg * max(1, round(duration / 40))
        for counter in counters:
            out.append([i, i, "Agent 2", 1, pid, pid, grid, ids[name], name, wg, lds, 0, vgpr, agpr, sgpr, counter,
                        f"{values[counter] * rng.uniform(0.995, 1.005):.6f}", start, end])  # fmt: skip
    return csv_text(COUNTER_HEADER, out, quoted={2, 8, 15})


def speed_of_light(rows, kernel, counters_csv):
    """rocprof-compute's System Speed-of-Light rows (gfx942 formulas) for one kernel, averaged over its
    profiled dispatches, from the counter files written above."""
    per_dispatch = {}
    for text in counters_csv:
        for row in csv.DictReader(io.StringIO(text)):
            if row["Kernel_Name"] == kernel:
                entry = per_dispatch.setdefault(row["Dispatch_Id"], {})
                entry["ns"] = int(row["End_Timestamp"]) - int(row["Start_Timestamp"])
                entry[row["Counter_Name"]] = float(row["Counter_Value"])
    d = list(per_dispatch.values())
    peak_mfma = 2100 * 304 * 2048 / 1000  # $max_sclk MHz * CUs * 2048 -> GFLOP/s (1307.4 TFLOPS)
    mfma = statistics.fmean(x["SQ_INSTS_VALU_MFMA_MOPS_BF16"] * 512 / x["ns"] for x in d)
    read = statistics.fmean(x["FETCH_SIZE"] * 1024 / x["ns"] for x in d)
    write = statistics.fmean(x["WRITE_SIZE"] * 1024 / x["ns"] for x in d)
    lds = statistics.fmean(x["SQ_LDS_BANK_CONFLICT"] / (x["SQ_LDS_IDX_ACTIVE"] - x["SQ_LDS_BANK_CONFLICT"]) for x in d)
    table = [("MFMA FLOPs (BF16)", mfma, "GFLOP/s", peak_mfma),
             ("LDS Bank Conflicts/Access", lds, "Conflicts/access", 32),
             ("L2-Fabric Read BW", read, "GB/s", 5300.0),
             ("L2-Fabric Write BW", write, "GB/s", 5300.0)]  # fmt: skip
    out = [[metric, f"{avg:.4f}", unit, f"{peak:.2f}", f"{100 * avg / peak:.2f}"] for metric, avg, unit, peak in table]
    return csv_text(["Metric", "Avg", "Unit", "Peak", "Pct of Peak"], out, quoted={0, 2})


def tunableop_csv():
    validators = [("PT_VERSION", "2.9.1"), ("ROCM_VERSION", "7.2.0.0-43-9c4e5bb"),
                  ("GCN_ARCH_NAME", "gfx942:sramecc+:xnack-"), ("ROCBLAS_VERSION", "5.2.0-5d8b3d4b"),
                  ("HIPBLASLT_VERSION", "1.2.0-0cf1a7fa")]  # fmt: skip
    lines = [f"Validator,{key},{value}" for key, value in validators]
    rng = random.Random(9)
    shapes = [(HIDDEN, HIDDEN), (KV_HEADS * HEAD_DIM, HIDDEN), (INTER, HIDDEN), (HIDDEN, INTER), (VOCAB, HIDDEN)]
    for tokens in (1, 4096):
        for n_out, k in shapes:
            seconds = gemm_ns(tokens, n_out, k) * rng.uniform(0.93, 0.99) / 1e9
            library = rng.choice(("Hipblaslt", "Hipblaslt", "Rocblas")) if tokens > 1 else "Hipblaslt"
            solution = f"Gemm_Hipblaslt_TN_{rng.randint(1000, 90000)}" if library == "Hipblaslt" else \
                f"Gemm_Rocblas_{rng.randint(1000, 90000)}"  # fmt: skip
            if tokens == 1 and n_out == KV_HEADS * HEAD_DIM:
                solution = "Default"
            lines.append(f"GemmTunableOp_BFloat16_TN,tn_{n_out}_{tokens}_{k}_ld_{k}_{k}_{n_out},{solution},"
                         f"{seconds * 1e3:.6f}")  # fmt: skip
    return "\n".join(lines) + "\n"


def recordings():
    """{relative path: file text} for every illustrative recording."""
    t0 = 3_200_098_838_431_081
    decode = forward(1, 300)
    eager = schedule(decode, EAGER_GAP_NS, seed=1, t0=t0)
    graph = schedule(decode, GRAPH_GAP_NS, seed=2, t0=t0 + 10**9)
    prefill = schedule(forward(4096, 512), EAGER_GAP_NS, seed=3, t0=t0 + 2 * 10**9)
    pass_1 = counter_rows(prefill, 4244, ("FETCH_SIZE", "WRITE_SIZE", "SQ_INSTS_VALU_MFMA_MOPS_BF16"), seed=4)
    pass_2 = counter_rows(prefill, 4244, ("SQ_LDS_IDX_ACTIVE", "SQ_LDS_BANK_CONFLICT"), seed=5)
    return {
        "rocprofv3/decode_eager/4242_kernel_trace.csv": trace_csv(eager, 4242),
        "rocprofv3/decode_eager/4242_kernel_stats.csv": stats_csv(eager),
        "rocprofv3/decode_graph/4243_kernel_trace.csv": trace_csv(graph, 4243),
        "rocprofv3/prefill/4244_kernel_trace.csv": trace_csv(prefill, 4244),
        "rocprofv3/prefill/pass_1/4244_counter_collection.csv": pass_1,
        "rocprofv3/prefill/pass_2/4244_counter_collection.csv": pass_2,
        "rocprof-compute/prefill_gemm_speed_of_light.csv": speed_of_light(prefill, GEMM_WIDE, [pass_1, pass_2]),
        "tunableop/tunableop_results0.csv": tunableop_csv(),
    }


def main(argv):
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent / "data"
    for relative, text in recordings().items():
        path = out / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"{path} ({len(text.encode()):,} bytes)")
    assert math.isclose(2100 * 304 * 2048 / 1e6, PEAK_BF16_FLOPS / 1e12, rel_tol=1e-4)


if __name__ == "__main__":
    main(sys.argv)
