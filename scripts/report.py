#!/usr/bin/env python3
"""Renders an opfuse-bench run (Google Benchmark JSON) into reports: REPORT.md and PNG charts.

Usage: report.py BENCH_JSON OUT_DIR        (writes OUT_DIR/REPORT.md and OUT_DIR/*.png)
       report.py BENCH_JSON OUT.md         (the same, charts next to OUT.md)
       options: --no-charts

Whole models: when OUT_DIR/models/*.json exist (one `opfuse run --json` each, written by
scripts/bench.sh), a "Whole models" section tabulates them.

Every number comes from the JSON: the benchmarks' times and counters, and the context that
opfuse-bench writes (machine, compiler, the measured roofline under roofline.*, and every
benchmarked kernel's registry summary under kernel.<name>.*). Nothing is typed in.
Benchmark names are <op>/<impl>/<case>/t<threads>. With --benchmark_repetitions the median
aggregate is reported, otherwise the single run.

Charts need matplotlib (Debian: python3-matplotlib); without it the Markdown report is still
written and says the charts were skipped.
"""
import json
import math
import os
import sys
from collections import OrderedDict

IMPL_ORDER = ["naive", "simd", "fused", "cuda", "onednn", "eigen"]
STAGES = ["naive", "simd", "fused", "cuda"]
PEERS = {"onednn": "oneDNN", "eigen": "Eigen"}
ISA_ORDER = ["avx512", "avx2", "sse2", "scalar"]
ISA_LABEL = {"avx512": "AVX-512", "avx2": "AVX2", "sse2": "SSE2", "scalar": "scalar"}
IMPL_COLOR = {"naive": "#9e9e9e", "simd": "#1f77b4", "fused": "#2ca02c", "cuda": "#17becf",
              "onednn": "#d62728", "eigen": "#ff7f0e"}
IMPL_MARKER = {"naive": "o", "simd": "s", "fused": "D", "cuda": "v", "onednn": "^", "eigen": "P"}


# ---- reading the run -------------------------------------------------------------------------

def to_ns(value, unit):
    return value * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[unit]


def impl_rank(impl):
    return IMPL_ORDER.index(impl) if impl in IMPL_ORDER else len(IMPL_ORDER)


class Run:
    """One opfuse-bench run: context, roofline and results keyed by (op, case, threads, impl)."""

    def __init__(self, path):
        with open(path) as f:
            data = json.load(f)
        self.path = path
        self.ctx = data.get("context", {})
        benchmarks = data.get("benchmarks", [])
        self.has_median = any(b.get("aggregate_name") == "median" for b in benchmarks)
        self.results = OrderedDict()
        self.errors = []
        for b in benchmarks:
            if self.has_median and b.get("aggregate_name") != "median":
                continue
            if not self.has_median and b.get("run_type") == "aggregate":
                continue
            parts = b.get("run_name", b["name"]).split("/")
            if len(parts) < 4 or not parts[3].startswith("t"):
                continue
            if b.get("error_occurred"):
                self.errors.append((b.get("run_name", b["name"]), b.get("error_message", "")))
                continue
            op, impl, case, threads = parts[0], parts[1], parts[2], int(parts[3][1:])
            # opfuse's own per-call wall time (with --cold-cache, real_time also holds the
            # timer pauses around the flushes); Google Benchmark's real_time for older runs.
            time_ns = b.get("wall_ns") or to_ns(b["real_time"], b.get("time_unit", "ns"))
            self.results[(op, case, threads, impl)] = {
                "time_ns": time_ns,
                "gflops": b.get("GFLOP/s"),
                "gbs": b.get("GB/s"),
                "flops": b.get("flops"),
                "bytes": b.get("bytes"),
                "ai": b.get("AI"),
                "roof": b.get("roof_GFLOP/s"),
                "pct": b.get("roofline_pct"),
                "saved": b.get("traffic_saved_pct"),
                "bytes_fused": b.get("bytes_fused"),
                "bytes_unfused": b.get("bytes_unfused"),
                "kernel": b.get("label", ""),
            }
        self.threads_all = int(self.ctx.get("roofline.threads", self.ctx.get("opfuse_threads", 1)))

    # The measured roofline (context keys roofline.*); None where the run has none.
    def peak(self, isa, threads):
        v = self.ctx.get(f"roofline.peak.{isa}.t{threads}")
        return float(v) if v else None

    def bandwidth(self, threads, kind="triad"):
        v = self.ctx.get(f"roofline.{kind}.t{threads}")
        return float(v) if v else None

    def has_roofline(self):
        return self.bandwidth(1) is not None

    def ridge(self, isa, threads):
        p, bw = self.peak(isa, threads), self.bandwidth(threads)
        return p / bw if p and bw else None

    def kernel_info(self, kernel, field):
        return self.ctx.get(f"kernel.{kernel}.{field}", "")

    def ops(self):
        """{op: {case: {threads: {impl: result}}}} in run order."""
        ops = OrderedDict()
        for (op, case, threads, impl), r in self.results.items():
            ops.setdefault(op, OrderedDict()).setdefault(case, OrderedDict()).setdefault(threads, {})[impl] = r
        return ops

    def llc_bytes(self):
        sizes = [c["size"] for c in self.ctx.get("caches", []) if c.get("type") != "Instruction"]
        return max(sizes) if sizes else None


# ---- formatting ------------------------------------------------------------------------------

def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_num(v, digits=3):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def fmt_bytes(b):
    if b is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def ratio(t_impl, t_ref):
    """t_ref / t_impl formatted: how many times faster impl is than ref."""
    return f"{t_ref / t_impl:.2f}x" if t_impl and t_ref else "-"


def isa_label(isa):
    return ISA_LABEL.get(isa, isa or "?")


# ---- the report ------------------------------------------------------------------------------

def headline_case(cases):
    """The case an op's teaching ladder walks through: the largest (by flops, then bytes)
    among those with a single-thread naive run."""
    best, best_key = None, None
    for case, by_threads in cases.items():
        t1 = by_threads.get(1, {})
        any_r = next(iter(t1.values()), None)
        if any_r is None:
            continue
        key = ("naive" in t1, any_r.get("flops") or 0, any_r.get("bytes") or 0)
        if best_key is None or key > best_key:
            best, best_key = case, key
    return best


def bound_phrase(run, r, threads):
    """Why a kernel runs at the speed it does, from the roofline: compute- or memory-bound."""
    kernel = r["kernel"]
    isa = run.kernel_info(kernel, "roof_isa")
    ai, peak, bw = r.get("ai"), run.peak(isa, threads), run.bandwidth(threads)
    if ai is None or not peak or not bw:
        return ""
    ridge = peak / bw
    if ai >= ridge:
        text = (f"compute-bound: AI {fmt_num(ai)} flop/B is above the {isa_label(isa)} ridge of "
                f"{fmt_num(ridge)} flop/B, so the roof is the {fmt_num(peak)} GFLOP/s multiply-add peak")
    else:
        text = (f"memory-bound: AI {fmt_num(ai)} flop/B is below the {isa_label(isa)} ridge of "
                f"{fmt_num(ridge)} flop/B, so the roof is {fmt_num(bw)} GB/s x AI = {fmt_num(ai * bw)} GFLOP/s")
    pct = r.get("pct")
    llc = run.llc_bytes()
    if pct is not None and pct < 25:
        text += f"; at {fmt_num(pct)}% of it, the code, not the machine, is the limit"
    elif pct is not None and 70 <= pct <= 100:
        text += f"; at {fmt_num(pct)}% of it, little is left to gain on this roof"
    if pct is not None and pct > 100:
        fits = f" ({fmt_bytes(r.get('bytes'))} fits in the {fmt_bytes(llc)} last-level cache)" if llc and (
            r.get("bytes") or 0) <= llc else ""
        text += f"; it beats the DRAM roof because its working set stays in cache between iterations{fits}"
    return text


def ladder_lines(run, op, case, by_threads):
    """The teaching ladder of one op: one line per stage at 1 thread, then threads and peers."""
    lines = []
    t1 = by_threads.get(1, {})
    prev_impl, prev = None, None
    step = 0
    for impl in STAGES:
        r = t1.get(impl)
        if not r:
            continue
        step += 1
        kernel = r["kernel"]
        isa = run.kernel_info(kernel, "isa")
        roof_isa = run.kernel_info(kernel, "roof_isa")
        summary = run.kernel_info(kernel, "summary") or "(no summary in the run's context)"
        head = f"{step}. **{impl}** - `{kernel}`"
        if isa and isa != "scalar":
            head += f" ({isa_label(isa)})"
        head += f": {summary}. "
        perf = f"{fmt_time(r['time_ns'])}, {fmt_num(r.get('gflops'))} GFLOP/s, {fmt_num(r.get('gbs'))} GB/s"
        if r.get("pct") is not None:
            perf += f", {fmt_num(r['pct'])}% of the {isa_label(roof_isa)} roofline"
        if prev is None:
            body = f"{perf}."
        else:
            speedup = prev["time_ns"] / r["time_ns"]
            change = f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
            body = f"**{change} than {prev_impl}**: {perf}."
            prev_isa = run.kernel_info(prev["kernel"], "roof_isa")
            p_prev, p_now = run.peak(prev_isa, 1), run.peak(roof_isa, 1)
            bw = run.bandwidth(1)
            compute_bound = bw and p_now and (r.get("ai") or 0) >= p_now / bw
            if prev_isa != roof_isa and p_prev and p_now and compute_bound:
                body += (f" The compute roof rose {p_now / p_prev:.1f}x "
                         f"({isa_label(prev_isa)} to {isa_label(roof_isa)}).")
            if r.get("saved") is not None and r.get("bytes_unfused"):
                body += (f" Fusion removes {fmt_num(r['saved'])}% of the modeled memory traffic "
                         f"({fmt_bytes(r['bytes_unfused'])} unfused, {fmt_bytes(r['bytes_fused'])} fused).")
        why = bound_phrase(run, r, 1)
        if why:
            body += f" Why: {why}."
        lines.append(head + body)
        prev_impl, prev = impl, r
    # Threads: each impl's scaling from 1 to all cores.
    n = run.threads_all
    tn = by_threads.get(n, {}) if n > 1 else {}
    scaling = []
    for impl in sorted(tn, key=impl_rank):
        if impl in t1:
            scaling.append(f"{impl} {t1[impl]['time_ns'] / tn[impl]['time_ns']:.2f}x")
    if scaling:
        lines.append(f"- With {n} threads (ideal {n}x): " + ", ".join(scaling) + ".")
    # Peers: where the best opfuse stage stands.
    best_stage = min((impl for impl in STAGES if impl in t1), key=lambda i: t1[i]["time_ns"], default=None)
    peers = []
    for peer, label in PEERS.items():
        if peer in t1 and best_stage:
            peers.append(f"{label} {fmt_time(t1[peer]['time_ns'])} "
                         f"({best_stage} is {t1[peer]['time_ns'] / t1[best_stage]['time_ns']:.2f}x its speed)")
    if peers:
        lines.append("- Peers at 1 thread: " + "; ".join(peers) + ".")
    return lines


def machine_section(run):
    c = run.ctx
    out = ["## Machine\n", "| | |", "|---|---|"]
    cpu = c.get("opfuse_cpu_model", "unknown")
    out.append(f"| CPU | {cpu}, {c.get('num_cpus', '?')} cores at {c.get('mhz_per_cpu', '?')} MHz |")
    caches = c.get("caches", [])
    if caches:
        desc = ", ".join(f"L{x['level']} {x['type'][0].lower()} {x['size'] // 1024} KiB" for x in caches)
        out.append(f"| caches | {desc} |")
    out.append(f"| ISA | {c.get('opfuse_isa', '?')}; the simd and fused stages use {c.get('opfuse_simd_isa', '?')} |")
    out.append(f"| compiler | {c.get('opfuse_compiler', '?')}, {c.get('opfuse_build_type', '?')} build |")
    if "opfuse_peers" in c:
        out.append(f"| peers | {c['opfuse_peers']} |")
    if "onednn_isa" in c:
        cap = c.get("opfuse_isa_cap")
        out.append(f"| ISA level of the run | {'capped with `--isa ' + cap + '`' if cap else 'the best the CPU runs'}: "
                   f"oneDNN's JIT at {c['onednn_isa']}, Eigen's {isa_label(c.get('eigen_isa', '?'))} copy |")
    run_desc = f"{c.get('date', '?')}, {c.get('opfuse_suite', '?')} suite, {len(run.results)} benchmarks"
    run_desc += f", min_time {c.get('opfuse_min_time', '?')} s, cold cache {c.get('opfuse_cold_cache', '?')}"
    if "load_avg" in c:
        run_desc += ", load average at start " + " ".join(f"{x:.2f}" for x in c["load_avg"])
    out.append(f"| run | {run_desc} |")
    out.append("")
    return out


def roofline_section(run):
    if not run.has_roofline():
        return ["## Measured roofline\n", "This run carries no roofline (an older opfuse-bench).", ""]
    n = run.threads_all
    c = run.ctx
    out = ["## Measured roofline\n",
           f"Measured by opfuse-bench's probe at the start of the run ({c.get('roofline.probe_seconds', '?')} s): "
           "fp32 multiply-add peak from independent chains in registers, one loop per ISA compiled with only that "
           f"ISA's flags; STREAM copy and triad over {c.get('roofline.array_mib', '?')} MiB arrays. "
           "The ridge point is peak / triad bandwidth: kernels with a lower arithmetic intensity (AI, flop/byte) "
           "are memory-bound.\n"]
    cols = [1] + ([n] if n > 1 else [])
    out.append("| fp32 peak | " + " | ".join(f"{t} thread{'s' if t > 1 else ''} GFLOP/s" for t in cols) + " | " +
               " | ".join(f"ridge at {t}t (flop/B)" for t in cols) + " |")
    out.append("|---|" + "---|" * (2 * len(cols)))
    for isa in ISA_ORDER:
        if run.peak(isa, 1) is None:
            continue
        out.append(f"| {isa_label(isa)} | " + " | ".join(fmt_num(run.peak(isa, t)) for t in cols) + " | " +
                   " | ".join(fmt_num(run.ridge(isa, t)) for t in cols) + " |")
    out.append("")
    out.append("| bandwidth | " + " | ".join(f"{t} thread{'s' if t > 1 else ''} GB/s" for t in cols) + " |")
    out.append("|---|" + "---|" * len(cols))
    for kind in ("triad", "copy"):
        out.append(f"| stream {kind} | " + " | ".join(fmt_num(run.bandwidth(t, kind)) for t in cols) + " |")
    out.append("")
    naive_isa = c.get("roofline.naive_isa", "sse2")
    peer_isa = c.get("roofline.peer_isa", "?")
    out.append(
        "`% of roofline` = achieved GFLOP/s / min(peak, AI x triad bandwidth), with the peak and the bandwidth "
        "of the benchmark's thread count and the peak of the kernel's ISA: simd and fused kernels their own, "
        f"oneDNN and Eigen the best level they were allowed ({isa_label(peer_isa)}), and naive the {isa_label(naive_isa)} "
        "roof - the instruction set this build lets the compiler auto-vectorize plain C++ for (the scalar peak "
        "is listed for comparison). The memory roof is DRAM bandwidth, so a kernel whose working set fits in "
        "a cache can exceed 100%.\n")
    # A compute-bound kernel above its roof means the probe read the peak low (clocks, a short
    # probe), or the kernel's FLOP count is off: either way its % of roofline flatters it.
    above = []
    for (op, case, threads, impl), r in run.results.items():
        ai, roof, gf = r.get("ai"), r.get("roof"), r.get("gflops")
        isa = run.kernel_info(r["kernel"], "roof_isa")
        ridge = run.ridge(isa, threads) if isa else None
        if ai and roof and gf and ridge and ai >= ridge and gf > roof * 1.02:
            above.append(f"`{op}/{impl}/{case}/t{threads}` {fmt_num(gf)} GFLOP/s over a {fmt_num(roof)} roof")
    if above:
        out.append(f"**Above the roof** ({len(above)} compute-bound benchmark{'s' if len(above) > 1 else ''} faster "
                   "than the measured peak of their ISA: either the probe read the peak low, and % of roofline "
                   "flatters every kernel of this run, or the FLOP count credits work the kernel skips, such as "
                   "the masked half of causal attention): " + "; ".join(above[:8]) + (" ..." if len(above) > 8 else "") + "\n")
    return out


def column_notes(run):
    n = run.threads_all
    return [
        "Times are " + ("medians over repetitions" if run.has_median else "single-run means") +
        " of wall-clock time per call. `vs naive` is the single-thread naive time / this time; "
        "`vs oneDNN` and `vs Eigen` are the peer's time at the same thread count / this time (above 1: "
        "faster than the peer). GB/s counts the minimal bytes the op must move (op_cost), so fused and "
        "unfused kernels are rated on the same work; `traffic saved` is the fusion model's share of memory "
        f"traffic the fused kernel avoids. Thread counts: 1 and {n}.\n"]


def glance_section(run, ops):
    n = run.threads_all
    out = ["## At a glance\n",
           "Each op's headline case (its largest): single-thread naive time, each stage's speedup over it, and "
           f"the fastest opfuse stage against the peers at {n} thread{'s' if n > 1 else ''}.\n",
           f"| op | case | naive | simd | fused | best stage vs oneDNN ({n}t) | best stage vs Eigen ({n}t) "
           f"| best stage % of roof ({n}t) |",
           "|---|---|---|---|---|---|---|---|"]
    for op, cases in ops.items():
        case = headline_case(cases)
        if case is None:
            continue
        t1 = cases[case].get(1, {})
        tn = cases[case].get(n, {})
        naive = t1.get("naive")
        cells = [op, f"`{case}`", fmt_time(naive["time_ns"]) if naive else "-"]
        for stage in ("simd", "fused"):
            r = t1.get(stage)
            cells.append(ratio(r["time_ns"], naive["time_ns"]) if r and naive else "-")
        stages_tn = [i for i in STAGES if i in tn and i != "naive"] or [i for i in STAGES if i in tn]
        best = min(stages_tn, key=lambda i: tn[i]["time_ns"], default=None)
        for peer in ("onednn", "eigen"):
            cells.append(ratio(tn[best]["time_ns"], tn[peer]["time_ns"]) if best and peer in tn else "-")
        cells.append(f"{fmt_num(tn[best].get('pct'))}% ({best})" if best else "-")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return out


def op_section(run, op, cases, charts):
    out = [f"## {op}\n"]
    case = headline_case(cases)
    if case is not None:
        out.append(f"**The ladder** on `{case}`, 1 thread:\n")
        out.extend(ladder_lines(run, op, case, cases[case]))
        out.append("")
    if charts.get(op):
        out.append(f"![{op}: stage ladder]({charts[op]})\n")
    has_saved = any(r.get("saved") is not None for by_t in cases.values() for imp in by_t.values()
                    for r in imp.values())
    header = ["case", "threads", "impl", "kernel", "time", "vs naive", "GFLOP/s", "GB/s", "AI", "% of roof",
              "vs oneDNN", "vs Eigen"]
    if has_saved:
        header.append("traffic saved")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for case, by_threads in cases.items():
        naive = by_threads.get(1, {}).get("naive")
        for threads in sorted(by_threads):
            impls = by_threads[threads]
            for impl in sorted(impls, key=impl_rank):
                r = impls[impl]
                t = r["time_ns"]
                row = [f"`{case}`", str(threads), impl, f"`{r['kernel']}`", fmt_time(t),
                       ratio(t, naive["time_ns"]) if naive else "-",
                       fmt_num(r.get("gflops")), fmt_num(r.get("gbs")), fmt_num(r.get("ai")),
                       f"{fmt_num(r['pct'])}%" if r.get("pct") is not None else "-"]
                for peer in ("onednn", "eigen"):
                    p = impls.get(peer)
                    row.append(ratio(t, p["time_ns"]) if p and impl != peer else "-")
                if has_saved:
                    row.append(f"{fmt_num(r['saved'])}%" if r.get("saved") is not None else "-")
                out.append("| " + " | ".join(row) + " |")
    out.append("")
    return out


# The speed targets of the stage issues (the tracker's simd and fused stage issues), checked
# against this run. Only the specs live here - op, impls, case, threads and the threshold; every
# measured value comes from the JSON. "ratio": the reference's time / the subject's time;
# "bandwidth": the subject's GB/s as a share of this run's measured single-thread STREAM triad;
# "traffic": the fusion model's share of memory traffic removed (the traffic_saved_pct counter),
# a target only where the pattern is memory-bound (the op's AI below the AVX-512 ridge point).
TARGETS = [
    ("simd", "ratio", "gemm", "simd", "onednn", "1024x1024x1024", 1, 1, 0.9),
    ("simd", "ratio", "gemm", "simd", "eigen", "1024x1024x1024", 1, 1, 1.0),
    ("simd", "ratio", "conv2d", "simd", "onednn", "n1_c64_h56_w56_k64_r3_s1_p1", 1, 1, 0.8),
    ("simd", "ratio", "gemm", "simd", "simd", "1024x1024x1024", 2, 1, 1.8),
    ("simd", "ratio", "conv2d", "simd", "simd", "n1_c64_h56_w56_k64_r3_s1_p1", 2, 1, 1.8),
    ("simd", "bandwidth", "relu", "simd", None, "n16777216", 1, None, 0.8),
    ("simd", "bandwidth", "add", "simd", None, "n16777216", 1, None, 0.8),
    ("simd", "bandwidth", "batchnorm", "simd", None, "n1_c64_h512_w512", 1, None, 0.8),
    ("simd", "bandwidth", "softmax", "simd", None, "n4096_c4096", 1, None, 0.8),
    ("simd", "bandwidth", "layernorm", "simd", None, "n4096_c4096", 1, None, 0.8),
    ("simd", "bandwidth", "rmsnorm", "simd", None, "n4096_c4096", 1, None, 0.8),
    ("fused", "ratio", "layernorm", "fused", "simd", "n4096_c768+add", 1, 1, 1.5),
    ("fused", "ratio", "gemm", "fused", "simd", "128x3072x768+bias+gelu", 1, 1, 1.03),
    ("fused", "ratio", "gemm", "fused", "onednn", "128x3072x768+bias+gelu", 1, 1, 1.0),
    ("fused", "ratio", "conv2d", "fused", "simd", "n1_c256_h56_w56_k64_r1_s1_p0+bn+add+relu", 1, 1, 1.15),
    ("fused", "ratio", "conv2d", "fused", "onednn", "n1_c256_h56_w56_k64_r1_s1_p0+bn+add+relu", 1, 1, 1.0),
    ("fused", "ratio", "attention", "fused", "simd", "b1_h12_s2048_d64", 1, 1, 1.3),
    ("fused", "ratio", "inverted_residual", "fused", "simd", "n1_c24_h56_w56_t6+res", 1, 1, 1.5),
    ("fused", "ratio", "eltwise_chain", "fused", "simd", "n16777216_add_gelu_mul_relu", 1, 1, 2.5),
    ("fused", "traffic", "layernorm", "fused", None, "n4096_c768+add", 1, None, 60),
    ("fused", "traffic", "eltwise_chain", "fused", None, "n16777216_add_gelu_mul_relu", 1, None, 60),
    ("fused", "traffic", "attention", "fused", None, "b1_h12_s2048_d64", 1, None, 60),
    ("fused", "traffic", "inverted_residual", "fused", None, "n1_c24_h56_w56_t6+res", 1, None, 60),
    ("fused", "traffic", "conv2d", "fused", None, "n1_c256_h56_w56_k64_r1_s1_p0+bn+add+relu", 1, None, 60),
    ("fused", "traffic", "conv2d", "fused", None, "n1_c3_h224_w224_k64_r7_s2_p3+bn+relu+maxpool3s2p1", 1, None, 60),
    ("fused", "traffic", "gemm", "fused", None, "128x3072x768+bias+gelu", 1, None, 60),
]


def targets_section(run):
    out = ["## Targets\n",
           "The speed targets of the simd and fused stage issues, measured in this run (ratios of wall times "
           "inside the run; bandwidth against this run's single-thread STREAM triad). A target whose "
           "benchmarks this run did not include (a filtered or `--quick` run) says so.\n",
           "| stage | target | measured | verdict |", "|---|---|---|---|"]
    triad = run.bandwidth(1)
    for stage, kind, op, impl, ref, case, threads, ref_threads, thr in TARGETS:
        r = run.results.get((op, case, threads, impl))
        if kind == "ratio":
            b = run.results.get((op, case, ref_threads, ref))
            if ref == impl:
                what = f"`{op}/{impl}/{case}`: t{threads} >= {thr}x t{ref_threads}"
            else:
                what = f"`{op}/{impl}/{case}/t{threads}` >= {thr}x `{ref}`"
            if r is None or b is None:
                out.append(f"| {stage} | {what} | not in this run | - |")
                continue
            v = b["time_ns"] / r["time_ns"]
            out.append(f"| {stage} | {what} | {v:.3f}x ({fmt_time(r['time_ns'])} vs {fmt_time(b['time_ns'])}) | "
                       f"{'met' if v >= thr else '**missed**'} |")
        elif kind == "traffic":
            what = f"`{op}/{impl}/{case}`: modeled traffic removed >= {thr}% where memory-bound"
            if r is None or r.get("saved") is None:
                out.append(f"| {stage} | {what} | not in this run | - |")
                continue
            ridge = run.ridge("avx512", 1) or run.ridge("avx2", 1)
            ai = r.get("ai")
            bound = "memory-bound" if ai is not None and ridge and ai < ridge else "compute-bound"
            verdict = "met" if r["saved"] >= thr else "**missed**"
            if bound == "compute-bound":
                verdict = "n/a (compute-bound)"
            out.append(f"| {stage} | {what} | {fmt_num(r['saved'])}% removed; AI {fmt_num(ai)} vs ridge "
                       f"{fmt_num(ridge)}: {bound} | {verdict} |")
        else:
            what = f"`{op}/{impl}/{case}/t{threads}` >= {thr:.0%} of STREAM triad"
            if r is None or r.get("gbs") is None or not triad:
                out.append(f"| {stage} | {what} | not in this run | - |")
                continue
            v = r["gbs"] / triad
            out.append(f"| {stage} | {what} | {fmt_num(r['gbs'])} GB/s = {v:.0%} of {fmt_num(triad)} | "
                       f"{'met' if v >= thr else '**missed**'} |")
    out.append("")
    return out


PARITY_OPS = ("gemm", "conv2d", "inverted_residual")


def parity_section(run):
    """opfuse's best stage against oneDNN on every GEMM, convolution and inverted-residual case of
    the run, per thread count: how many fall below 0.9x and 1.0x, the geometric mean, the worst.
    At a capped ISA level (--isa) this is the AVX2 (or SSE2) parity of the ISA-tier issue."""
    rows = {}
    for (op, case, threads, impl), r in run.results.items():
        if op not in PARITY_OPS or impl not in ("simd", "fused", "onednn"):
            continue
        rows.setdefault((op, case, threads), {})[impl] = r["time_ns"]
    ratios = {}
    for (op, case, threads), v in rows.items():
        best = min((v[i] for i in ("simd", "fused") if i in v), default=None)
        if best and "onednn" in v:
            ratios.setdefault(threads, []).append((v["onednn"] / best, op, case))
    if not ratios:
        return []
    cap = run.ctx.get("opfuse_isa_cap")
    level = isa_label(cap) if cap else isa_label(run.ctx.get("opfuse_simd_isa", "?"))
    out = ["## Parity with oneDNN\n",
           f"Every {', '.join(PARITY_OPS)} case of this run with a oneDNN row, at {level}: oneDNN's time over the "
           "faster of opfuse's simd and fused stages (above 1 is opfuse ahead).\n",
           "| threads | cases | below 0.9x | below 1.0x | geometric mean | worst |", "|---|---|---|---|---|---|"]
    for threads in sorted(ratios):
        rs = sorted(ratios[threads])
        gm = math.exp(sum(math.log(r) for r, _, _ in rs) / len(rs))
        worst = "; ".join(f"{op} {case} {r:.2f}x" for r, op, case in rs[:3])
        out.append(f"| {threads} | {len(rs)} | {sum(r < 0.9 for r, _, _ in rs)} | {sum(r < 1.0 for r, _, _ in rs)} | "
                   f"{gm:.3f}x | {worst} |")
    out.append("")
    out += scaling_table(rows)
    return out


def scaling_table(rows):
    """Thread scaling of every gemm and dense 3x3 conv2d case: the faster opfuse stage's time at 1
    thread over the faster one at the most threads of the run, next to oneDNN's (ideal: the thread
    count; the ISA-tier issue asks for 0.9 of it)."""
    counts = sorted({t for (_, _, t) in rows})
    if len(counts) < 2:
        return []
    n = counts[-1]
    lines = []
    below = total = 0
    for (op, case, threads), v in sorted(rows.items()):
        if threads != 1 or not (op == "gemm" or (op == "conv2d" and "_r3_" in case and "_dw" not in case)):
            continue
        vn = rows.get((op, case, n), {})
        b1 = min((v[i] for i in ("simd", "fused") if i in v), default=None)
        bn = min((vn[i] for i in ("simd", "fused") if i in vn), default=None)
        if not b1 or not bn:
            continue
        s = b1 / bn
        d = f"{v['onednn'] / vn['onednn']:.2f}x" if "onednn" in v and "onednn" in vn else "-"
        total += 1
        below += s < 0.9 * n
        lines.append(f"| {op} `{case}` | {s:.2f}x{'' if s >= 0.9 * n else ' (below)'} | {d} |")
    if not lines:
        return []
    return [f"### Thread scaling, 1 to {n} threads\n",
            f"Every gemm and dense 3x3 conv2d case: the faster opfuse stage's time at 1 thread over its time at "
            f"{n} (ideal {n}x); {below} of {total} below {0.9 * n:.1f}x.\n",
            "| case | opfuse | oneDNN |", "|---|---|---|"] + lines + [""]


def target_ceilings(run):
    """What bounds the fused targets that sit near or under their thresholds, from this run's
    own figures (no typed-in numbers): the share of time fusion can act on, or the roof."""
    R = run.results
    lines = []
    gcase = "128x3072x768+bias+gelu"
    gs, gf = R.get(("gemm", gcase, 1, "simd")), R.get(("gemm", gcase, 1, "fused"))
    gelu = R.get(("gelu", "n128_c3072", 1, "simd"))
    ridge = run.ridge("avx512", 1) or run.ridge("avx2", 1)
    if gs and gf and gelu:
        share = gelu["time_ns"] / gs["time_ns"]
        lines.append(
            f"- `gemm/*/{gcase}`: the GEMM is compute-bound (AI {fmt_num(gs.get('ai'))} vs ridge "
            f"{fmt_num(ridge)}). The gelu over its 128x3072 output, run on its own "
            f"(`gelu/simd/n128_c3072/t1`), takes {fmt_time(gelu['time_ns'])} = {share:.1%} of the simd "
            f"stage's {fmt_time(gs['time_ns'])}. Both stages compute that gelu; fusion removes only the "
            f"post-op passes' loads and stores of C. Even a free gelu pass would give "
            f"{1 / (1 - share):.3f}x; fused/simd is {gs['time_ns'] / gf['time_ns']:.3f}x here.")
    acase = "b1_h12_s2048_d64"
    a_s, a_f = R.get(("attention", acase, 1, "simd")), R.get(("attention", acase, 1, "fused"))
    if a_s and a_f and a_s.get("pct") and a_f.get("pct"):
        lines.append(
            f"- `attention/*/{acase}`: compute-bound (AI {fmt_num(a_f.get('ai'))}). The fused kernel runs at "
            f"{fmt_num(a_f['pct'])}% of the FMA roof, the simd stage at {fmt_num(a_s['pct'])}%, so fused/simd "
            f"cannot exceed {100 / a_s['pct']:.2f}x even at 100% of the roof; it is "
            f"{a_s['time_ns'] / a_f['time_ns']:.3f}x here.")
    ccase = "n16777216_add_gelu_mul_relu"
    c_s, c_f = R.get(("eltwise_chain", ccase, 1, "simd")), R.get(("eltwise_chain", ccase, 1, "fused"))
    gelu_big = R.get(("gelu", "n512_c3072", 1, "simd"))
    triad = run.bandwidth(1)
    if c_s and c_f and gelu_big and triad and c_f.get("bytes_fused"):
        gelu_ns = gelu_big["time_ns"] * 16777216 / (512 * 3072)
        mem_ns = c_f["bytes_fused"] / triad  # bytes / (GB/s) = ns
        floor = max(gelu_ns, mem_ns)
        lines.append(
            f"- `eltwise_chain/*/{ccase}`: the fused pass moves {fmt_bytes(c_f['bytes_fused'])}, "
            f"{fmt_time(mem_ns)} at this run's triad, and its gelu alone costs about {fmt_time(gelu_ns)} "
            f"(`gelu/simd/n512_c3072/t1`, in cache, scaled to 16M elements). Even with the two perfectly "
            f"overlapped, fused/simd could reach {c_s['time_ns'] / floor:.2f}x; it is "
            f"{c_s['time_ns'] / c_f['time_ns']:.3f}x here.")
    lcase = "n4096_c768+add"
    l_f = R.get(("layernorm", lcase, 1, "fused"))
    if l_f and l_f.get("bytes_unfused") and l_f.get("bytes_fused"):
        lines.append(
            f"- `layernorm/fused/{lcase}` traffic: unfused, the residual add writes s and the norm reads it back "
            f"({fmt_bytes(l_f['bytes_unfused'])}); fused reads x and the residual and writes y once "
            f"({fmt_bytes(l_f['bytes_fused'])}). Those reads and that write are the op's own, so "
            f"{100 * (1 - l_f['bytes_fused'] / l_f['bytes_unfused']):.0f}% is all any fusion of the pair can remove.")
    if not lines:
        return []
    return ["### What bounds the fused targets\n", "Computed from this run's own figures.\n", *lines, ""]


def models_section(models_dir, chart=None):
    """The main job's whole-model runs: the fusion table (fusion_table.py), then the graph overhead."""
    import fusion_table
    loaded = fusion_table.load(models_dir)
    out = fusion_table.section(loaded, chart)
    runs = [r for r in loaded.values() if "peer" not in r]
    order = {"naive": 0, "simd": 1, "fused": 2, "cuda": 3}
    runs.sort(key=lambda r: (str(r.get("model")), order.get(r.get("stage"), 9), r.get("threads", 0)))
    prof = [r for r in runs if "profile_sum_ms" in r and "latency_ms" in r]
    if prof:
        out += ["### Graph overhead\n",
                "Each node timed three ways: on its own, run repeatedly like a kernel benchmark (its weights "
                "and inputs stay in cache); on its own with the caches flushed first by a write pass as large "
                "as the plan's memory (weights + arena), which evicts its weights as a run of the plan does, "
                "and its inputs too, which the plan leaves warm; and where it stands in whole runs of the "
                "plan. *Plan over in-plan sum* is what the executor itself adds (input copies, dispatch). "
                "The sums alone bracket the plan: warm below it, flushed near or above it.\n",
                "| model | stage | threads | plan | sum in plan | sum alone | sum alone, caches flushed | "
                "plan over in-plan sum | plan over sum alone |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in prof:
            alone, inplan, lat = r["profile_sum_ms"], r.get("profile_in_plan_sum_ms", 0), r["latency_ms"]
            cold = r.get("profile_cold_sum_ms")
            cold_s = f"{cold:.2f} ms" if cold else "-"
            out.append(f"| {r['model']} | {r['stage']} + {r.get('fusion', 'none')} | {r['threads']} | {lat:.2f} ms | {inplan:.2f} ms | "
                       f"{alone:.2f} ms | {cold_s} | {100 * (lat - inplan) / inplan:+.1f}% | "
                       f"{100 * (lat - alone) / alone:+.1f}% |")
        out.append("")
    return out


def render_markdown(run, charts, chart_note, models_dir=None):
    ops = run.ops()
    out = ["# opfuse stage-comparison report\n",
           f"Generated by `scripts/report.py` from `{os.path.basename(run.path)}` (one `opfuse-bench` run); "
           "every number comes from that run. Do not edit by hand: rerun `./scripts/bench.sh`.\n"]
    cap = run.ctx.get("opfuse_isa_cap")
    if cap:
        # The CPU's own top level (opfuse_isa lists its features): a cap at that level is the
        # CPU's native tier, not a lower one emulated by capping.
        feats = run.ctx.get("opfuse_isa", "").split()
        top = "avx512" if "avx512" in feats else "avx2" if "avx2" in feats else "sse2"
        order = ["sse2", "avx2", "avx512"]
        where = ("on a CPU that runs more" if cap not in order or order.index(cap) < order.index(top) else
                 f"which is this CPU's own top level (a real {isa_label(top)} CPU, not a capped one)")
        out.append(f"**ISA level {isa_label(cap)}** (`--isa {cap}`): opfuse's simd and fused kernels, oneDNN "
                   f"({run.ctx.get('onednn_isa', '?')}) and Eigen ({isa_label(run.ctx.get('eigen_isa', '?'))}) were "
                   f"all capped to it, {where}; every ratio compares kernels at that level, and "
                   "% of roofline uses that level's peak. The whole models are in the native report only (their "
                   "peers, PyTorch and ONNX Runtime, have no such cap).\n")
    out += machine_section(run)
    out += roofline_section(run)
    if charts.get("_roofline"):
        out.append(f"![roofline: every benchmark against the measured roofs]({charts['_roofline']})\n")
    if charts.get("_scaling"):
        out.append(f"![thread scaling per op and impl]({charts['_scaling']})\n")
    if chart_note:
        out.append(chart_note + "\n")
    out += glance_section(run, ops)
    if models_dir:
        out += models_section(models_dir, charts.get("_fusion"))
    out += targets_section(run)
    out += parity_section(run)
    out += target_ceilings(run)
    out += column_notes(run)
    if run.errors:
        out.append("Benchmarks that reported an error (not in the tables):\n")
        out += [f"- `{name}`: {msg}" for name, msg in run.errors]
        out.append("")
    for op, cases in ops.items():
        out += op_section(run, op, cases, charts)
    return "\n".join(out) + "\n"


# ---- charts ----------------------------------------------------------------------------------

def draw_charts(run, out_dir):
    """Writes the PNGs; returns {op or _roofline/_scaling: file name}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts = {}
    ops = run.ops()
    n = run.threads_all
    thread_counts = [1] + ([n] if n > 1 else [])

    # Stage ladder per op: speedup over single-thread naive, one bar per impl, per case.
    for op, cases in ops.items():
        names = list(cases)
        impls = sorted({i for by_t in cases.values() for imp in by_t.values() for i in imp}, key=impl_rank)
        # One panel per thread count, stacked; the case names label the bottom one.
        fig, axes = plt.subplots(len(thread_counts), 1, figsize=(max(7.0, 0.9 * len(names) + 3), 2.6 * len(
            thread_counts) + 1.6), squeeze=False, sharex=True, sharey=True)
        axes = [ax for row in axes for ax in row]
        any_bar = False
        for ax, threads in zip(axes, thread_counts):
            width = 0.8 / max(1, len(impls))
            for k, impl in enumerate(impls):
                xs, ys = [], []
                for x, case in enumerate(names):
                    naive = cases[case].get(1, {}).get("naive")
                    r = cases[case].get(threads, {}).get(impl)
                    if naive and r:
                        xs.append(x + (k - (len(impls) - 1) / 2) * width)
                        ys.append(naive["time_ns"] / r["time_ns"])
                if xs:
                    ax.bar(xs, ys, width, label=impl, color=IMPL_COLOR.get(impl), edgecolor="black", linewidth=0.3)
                    any_bar = True
            ax.set_yscale("log")
            ax.axhline(1.0, color="black", linewidth=0.5)
            ax.set_title(f"{op}, {threads} thread{'s' if threads > 1 else ''}", fontsize=10)
            ax.set_ylabel("speedup over naive\n(1 thread), log", fontsize=8)
            ax.grid(axis="y", which="both", alpha=0.3)
        axes[-1].set_xticks(range(len(names)))
        axes[-1].set_xticklabels(names, rotation=25, ha="right", fontsize=7)
        if any_bar:
            axes[0].legend(fontsize=7, ncol=len(impls))
            fig.tight_layout()
            name = f"ladder_{op}.png"
            fig.savefig(os.path.join(out_dir, name), dpi=90)
            charts[op] = name
        plt.close(fig)

    # Roofline: every benchmark as a point, the measured roofs per ISA as lines.
    if run.has_roofline():
        fig, axes = plt.subplots(1, len(thread_counts), figsize=(7 * len(thread_counts), 5.5), squeeze=False)
        ais = [r["ai"] for r in run.results.values() if r.get("ai")]
        lo = 10 ** math.floor(math.log10(max(1e-3, min(ais)))) if ais else 1e-2
        hi = 10 ** math.ceil(math.log10(max(ais))) if ais else 1e3
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        for ax, threads in zip(axes[0], thread_counts):
            bw = run.bandwidth(threads)
            for isa, style in zip(ISA_ORDER, ("-", "--", "-.", ":")):
                peak = run.peak(isa, threads)
                if peak and bw:
                    ax.plot(xs, [min(peak, x * bw) for x in xs], style, color="black", linewidth=1,
                            label=f"{isa_label(isa)} {fmt_num(peak)} GFLOP/s")
            for impl in IMPL_ORDER:
                pts = [(r["ai"], r["gflops"]) for (op, case, t, i), r in run.results.items()
                       if i == impl and t == threads and r.get("ai") and r.get("gflops")]
                if pts:
                    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, alpha=0.8, label=impl,
                               color=IMPL_COLOR.get(impl), marker=IMPL_MARKER.get(impl, "o"), edgecolors="black",
                               linewidths=0.3)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("arithmetic intensity (flop/byte)")
            ax.set_ylabel("GFLOP/s")
            ax.set_title(f"roofline, {threads} thread{'s' if threads > 1 else ''} "
                         f"(triad {fmt_num(bw)} GB/s)")
            ax.grid(which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "roofline.png"), dpi=90)
        plt.close(fig)
        charts["_roofline"] = "roofline.png"

    # Thread scaling: median t1 / tN time per op and impl.
    if n > 1:
        rows = []
        for op, cases in ops.items():
            per_impl = {}
            for case, by_t in cases.items():
                for impl, r in by_t.get(n, {}).items():
                    r1 = by_t.get(1, {}).get(impl)
                    if r1:
                        per_impl.setdefault(impl, []).append(r1["time_ns"] / r["time_ns"])
            if per_impl:
                rows.append((op, {i: sorted(v)[len(v) // 2] for i, v in per_impl.items()}))
        if rows:
            impls = sorted({i for _, d in rows for i in d}, key=impl_rank)
            fig, ax = plt.subplots(figsize=(8, 0.1 * len(rows) * len(impls) + 1.5))
            height = 0.8 / len(impls)
            for k, impl in enumerate(impls):
                ys = [y + (k - (len(impls) - 1) / 2) * height for y, (_, d) in enumerate(rows) if impl in d]
                vs = [d[impl] for _, d in rows if impl in d]
                ax.barh(ys, vs, height, label=impl, color=IMPL_COLOR.get(impl), edgecolor="black", linewidth=0.3)
            ax.axvline(n, color="black", linestyle="--", linewidth=1, label=f"ideal ({n}x)")
            ax.axvline(1, color="black", linewidth=0.5)
            ax.set_yticks(range(len(rows)))
            ax.set_yticklabels([op for op, _ in rows], fontsize=8)
            ax.invert_yaxis()
            ax.set_xlabel(f"speedup from 1 to {n} threads (median over the op's cases)")
            ax.set_title("thread scaling")
            ax.grid(axis="x", alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(os.path.join(out_dir, "scaling.png"), dpi=90)
            plt.close(fig)
            charts["_scaling"] = "scaling.png"
    return charts


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    no_charts = "--no-charts" in argv[1:]
    if len(args) != 2:
        sys.exit(__doc__)
    json_path, out = args
    if out.endswith(".md"):
        out_dir, md_name = os.path.dirname(out) or ".", os.path.basename(out)
    else:
        out_dir, md_name = out, "REPORT.md"
    os.makedirs(out_dir, exist_ok=True)
    run = Run(json_path)

    charts, note = {}, ""
    if no_charts:
        note = "Charts were skipped (--no-charts)."
    else:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            note = (f"Charts were skipped: matplotlib is not installed for {sys.executable} "
                    "(Debian: apt-get install python3-matplotlib).")
        else:
            charts = draw_charts(run, out_dir)
            import matplotlib.pyplot as plt
            import fusion_table
            fusion_chart = fusion_table.draw(fusion_table.load(os.path.join(out_dir, "models")), out_dir, plt)
            if fusion_chart:
                charts["_fusion"] = fusion_chart
    md_path = os.path.join(out_dir, md_name)
    with open(md_path, "w") as f:
        f.write(render_markdown(run, charts, note, os.path.join(out_dir, "models")))
    print(f"report: wrote {md_path}" + (f" and {len(charts)} charts" if charts else f" ({note})"))


if __name__ == "__main__":
    main(sys.argv)
