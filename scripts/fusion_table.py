"""The fusion table of the report: whole models at each stage and fusion level, next to PyTorch and
ONNX Runtime on the same ONNX file, from one main-job run (scripts/bench-models.sh writes
<model>_<stage>_<fusion>_t<T>.json with `opfuse run --json`; scripts/bench-peers.sh writes
peer_<model>_<peer>_<config>_t<T>.json). Every number and every sentence comes from those files.
"""
import glob
import json
import os

MODELS = ["resnet50", "mobilenet_v2", "bert_layer"]
OPFUSE_ROWS = [("naive", "none"), ("simd", "none"), ("fused", "none"), ("fused", "basic"), ("fused", "advanced"),
               ("fused", "full")]
PEER_ROWS = [("pytorch", "eager"), ("pytorch", "frozen"), ("onnxruntime", "disabled"), ("onnxruntime", "basic"),
             ("onnxruntime", "extended"), ("onnxruntime", "all")]
# The fusion issue's targets: fused + full over simd + none.
FUSION_TARGET = {"resnet50": 1.15, "mobilenet_v2": 1.5, "bert_layer": 1.1}


def load(models_dir):
    """{(model, kind, config, threads): record}; kind is a stage ("naive", ...) or a peer name."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(models_dir, "*.json"))):
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError):
            continue
        if "peer" in r:
            runs[(r.get("model"), r["peer"], r.get("config"), int(r.get("threads", 0)))] = r
        elif "stage" in r:
            runs[(r.get("model"), r["stage"], r.get("fusion", "none"), int(r.get("threads", 0)))] = r
    return runs


def thread_counts(runs):
    ts = sorted({k[3] for k in runs if k[3] > 0})
    return ts or [1]


def mb(b):
    return f"{b / 1e6:.1f} MB" if b else "-"


def label(kind, config):
    if kind in ("naive", "simd", "fused"):
        return "naive" if kind == "naive" else f"{kind} + {config}"
    return f"{'PyTorch' if kind == 'pytorch' else 'ONNX Runtime'} {config}"


def fusions_added(now, before):
    """The fusions that grouped more at this level than at the one before, with their counts."""
    out = []
    for name, n in (now.get("fused") or {}).items():
        m = n - (before.get("fused") or {}).get(name, 0)
        if m > 0:
            out.append(f"{name} x{m}")
    return out


def sentence(model, kind, config, r, prev, simd_none):
    """One generated sentence: what this row changed against the row before it, and what it bought."""
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    if "failed" in r:
        return "failed: " + r["failed"].strip().splitlines()[-1][:160]
    if kind == "naive":
        return (f"The reference: scalar kernels in NCHW on the graph as imported, {r.get('kernels', r['nodes'])} "
                "kernels per inference.")
    if kind == "simd":
        conv = r.get("layout_conversions", 0)
        return (f"xsimd + OpenMP kernels with activations kept NHWC ({conv} layout conversion"
                f"{'s' if conv != 1 else ''}), same graph: {prev['latency_ms'] / r['latency_ms']:.2f}x over the row "
                "before.")
    if kind == "fused" and config == "none":
        return (f"Fused-stage kernels on the unfused graph: {simd_none['latency_ms'] / r['latency_ms']:.2f}x over "
                "simd + none; with nothing fused into them, they run the same nodes.")
    if kind == "fused":
        added = fusions_added(r, prev)
        if not added:
            return (f"No fusion of this level matched: the same plan as the row before, so {prev['latency_ms']:.2f} "
                    f"-> {r['latency_ms']:.2f} ms is run-to-run variation.")
        saved = prev.get("modeled_bytes", 0) - r.get("modeled_bytes", 0)
        return (f"{', '.join(added)}: {prev.get('kernels', prev['nodes'])} -> {r.get('kernels', r['nodes'])} "
                f"kernels, {saved / 1e6:.1f} MB fewer bytes moved per inference "
                f"({prev.get('modeled_bytes', 0) / 1e6:.1f} -> {r.get('modeled_bytes', 0) / 1e6:.1f} MB), peak "
                f"{mb(prev.get('peak_bytes'))} -> {mb(r.get('peak_bytes'))}; {prev['latency_ms']:.2f} -> "
                f"{r['latency_ms']:.2f} ms ({prev['latency_ms'] / r['latency_ms']:.2f}x).")
    version = r.get("version", "?")
    if kind == "pytorch":
        what = "aten ops dispatched" if config == "eager" else "nodes in the frozen, optimized TorchScript graph"
        return f"PyTorch {version} {config}: {r.get('nodes', '?')} {what}; peak RSS of its process."
    return (f"ONNX Runtime {version} at graph optimization level {config}: {r.get('nodes', '?')} kernels per "
            "inference (from its profiler); peak RSS of its process.")


def row_cells(r):
    if "median_ms" in r:  # a peer
        return (f"{r['median_ms']:.2f} ms", f"{r['min_ms']:.2f} ms", mb(r.get("peak_rss_bytes")) + " RSS",
                str(r.get("nodes") if r.get("nodes") is not None else "-"), "-")
    return (f"{r['latency_ms']:.2f} ms", f"{r['latency_min_ms']:.2f} ms",
            f"{mb(r['peak_bytes'])} (RSS {mb(r.get('max_rss_bytes'))})", str(r.get("kernels", r["nodes"])),
            mb(r.get("modeled_bytes")))


def latency(r):
    if not r or "skipped" in r or "failed" in r:
        return None
    return r.get("latency_ms", r.get("median_ms"))


def model_rows(runs, model, t):
    """[(label, kind, config, record)] in table order; naive is the single-thread run."""
    rows = []
    for kind, config in OPFUSE_ROWS:
        r = runs.get((model, kind, config, 1 if kind == "naive" else t))
        if r:
            rows.append((label(kind, config) + (" (1 thread)" if kind == "naive" and t != 1 else ""), kind, config, r))
    for kind, config in PEER_ROWS:
        r = runs.get((model, kind, config, t))
        rows.append((label(kind, config), kind, config, r or {"skipped": "no record in this run"}))
    return rows


def profile_bound(r, top=3):
    """What bounds a fused + full run, from its own profile: the hottest nodes."""
    prof = r.get("profile") or []
    if not prof:
        return "no profile in this run (a --quick run)"
    total = r.get("profile_in_plan_sum_ms") or sum(p["in_plan_median_ms"] for p in prof)
    hot = sorted(prof, key=lambda p: -p["in_plan_median_ms"])[:top]
    parts = [f"`{p['node']}` ({p['kernel']}) {p['in_plan_median_ms']:.2f} ms, {100 * p['in_plan_median_ms'] / total:.0f}% "
             f"of the plan at {p.get('roofline_pct', 0):.0f}% of its roof" for p in hot]
    conv = sum(p["in_plan_median_ms"] for p in prof if p["op"] in ("conv2d", "inverted_residual"))
    gemm = sum(p["in_plan_median_ms"] for p in prof if p["op"] in ("gemm", "matmul"))
    alone = r.get("profile_sum_ms", 0)
    return ("; ".join(parts) + f". Convolutions take {100 * conv / total:.0f}% of the in-plan time and GEMMs "
            f"{100 * gemm / total:.0f}%; the nodes run on their own sum to {alone:.2f} ms against "
            f"{r['latency_ms']:.2f} ms in the plan (cold weights).")


# The ops that carry a model's arithmetic: fusion merges the rest into them (layout conversions
# are the layout planner's, at every fusion level).
COMPUTE_OPS = ("conv2d", "gemm", "matmul", "attention", "inverted_residual", "layout_convert")


def fusion_bound(simd, full, want):
    """The arithmetic of a missed fusion target, from the simd + none run's own profile: the time its
    plan spends outside the compute ops is all that folding ops into epilogues can take away."""
    prof = simd.get("profile") or []
    if not prof:
        return "The simd + none run has no profile here (a --quick run), so the bound is not computed."
    total = simd.get("profile_in_plan_sum_ms") or sum(p["in_plan_median_ms"] for p in prof)
    rest = sum(p["in_plan_median_ms"] for p in prof if p["op"] not in COMPUTE_OPS)
    ops = {}
    for p in prof:
        if p["op"] not in COMPUTE_OPS:
            ops[p["op"]] = ops.get(p["op"], 0) + p["in_plan_median_ms"]
    top = ", ".join(f"{op} {ms:.2f} ms" for op, ms in sorted(ops.items(), key=lambda kv: -kv[1])[:4])
    limit = total / (total - rest) if total > rest else float("inf")
    got = simd["latency_ms"] / full["latency_ms"]
    ir = any(p["op"] == "inverted_residual" for p in full.get("profile") or [])
    return (f"The arithmetic of the fusion target: simd + none spends {rest:.2f} of its {total:.2f} ms in-plan "
            f"outside the convolutions, GEMMs and layout conversions ({top}). Folding all of that into the compute kernels at no "
            f"cost gives at most {total:.2f} / {total - rest:.2f} = {limit:.2f}x with the same compute kernels"
            + (f"; this run's {got:.2f}x is past that because the fused compute kernels are faster than the simd "
               "ones too" + (" (the inverted-residual kernel keeps a block's intermediates in cache)" if ir else "")
               + ", and the rest of the gap is in them (the hottest nodes above)." if got > limit else
               f", so {want}x is out of reach by this arithmetic unless fusion also makes the compute kernels "
               "faster." if limit < want else
               f", which allows {want}x: the fused kernels' epilogues cost more than the passes they replace."))


def targets(runs):
    out = ["### Fusion targets\n",
           "Ratios of medians inside this run. *Faster peer* is the faster of PyTorch frozen and ONNX Runtime at "
           "level all at the same thread count; memory compares the plan's weights + arena + workspace.\n",
           "| model | target | threads | measured | met |", "|---|---|---|---|---|"]
    missed, fusion_missed = {}, {}
    for model in MODELS:
        for t in thread_counts(runs):
            simd = runs.get((model, "simd", "none", t))
            full = runs.get((model, "fused", "full", t))
            if not simd or not full:
                continue
            want = FUSION_TARGET[model]
            got = simd["latency_ms"] / full["latency_ms"]
            ok = got >= want
            out.append(f"| {model} | fused + full >= {want}x simd + none | {t} | {got:.2f}x | {'yes' if ok else 'no'} |")
            if not ok:
                missed[model] = full
                fusion_missed[model] = (simd, full, want)
            peers = [latency(runs.get((model, "pytorch", "frozen", t))), latency(runs.get((model, "onnxruntime", "all", t)))]
            peers = [p for p in peers if p]
            if peers:
                best = min(peers)
                ok = best / full["latency_ms"] >= 1.0
                out.append(f"| {model} | fused + full >= 1.0x the faster peer ({best:.2f} ms) | {t} | "
                           f"{best / full['latency_ms']:.2f}x | {'yes' if ok else 'no'} |")
                if not ok:
                    missed[model] = full
            else:
                out.append(f"| {model} | fused + full >= 1.0x the faster peer | {t} | peers skipped | - |")
            ok = full["peak_bytes"] < simd["peak_bytes"]
            out.append(f"| {model} | peak memory below simd + none | {t} | {mb(full['peak_bytes'])} vs "
                       f"{mb(simd['peak_bytes'])} | {'yes' if ok else 'no'} |")
    out.append("")
    for model, full in missed.items():
        out.append(f"- **{model}** misses a target. What bounds fused + full at {full['threads']} thread(s), from its "
                   f"profile: {profile_bound(full)}")
        if model in fusion_missed:
            out.append("  " + fusion_bound(*fusion_missed[model]))
    if missed:
        out.append("")
    return out


def section(runs, chart=None):
    """The report's fusion table from load()'s records."""
    if not runs:
        return []
    rounds = max((r.get("rounds", 1) for r in runs.values()), default=1)
    out = ["## Whole models: the fusion table\n",
           "Each built-in model from naive to fused + full (`opfuse run MODEL --stage S --fusion F --threads T "
           "--json`), then PyTorch and ONNX Runtime on the same ONNX file in the same run "
           "(`scripts/bench-peers.sh`; a peer that is not installed is listed as skipped). Latency: median and "
           "min over the runs" + (f", pooled over {rounds} interleaved rounds (each row's runs are spread over the "
                                   "whole job, so drift of the machine slows every row alike)" if rounds > 1 else "") +
           ". Peak memory: opfuse's plan (weights + activation arena + shared kernel workspace) "
           "with the process's max RSS beside it; the peers' process peak RSS (it includes their runtime). "
           "Kernels: launched per inference (views do not count). Bytes moved: the modeled traffic of one "
           "inference, every tensor each kernel reads and writes once. Speed-up: the naive row's median over "
           "this row's.\n"]
    if chart:
        out.append(f"![fusion table: latency per row, per model and thread count]({chart})\n")
    for model in MODELS:
        for t in thread_counts(runs):
            rows = model_rows(runs, model, t)
            if not any(k in ("simd", "fused") for _, k, _, _ in rows):
                continue
            out += [f"### {model}, {t} thread{'s' if t > 1 else ''}\n",
                    "| row | median | min | speed-up | peak memory | kernels | bytes moved | what it changed |",
                    "|---|---|---|---|---|---|---|---|"]
            base = latency(rows[0][3]) if rows else None
            prev = None
            simd_none = next((r for _, k, c, r in rows if k == "simd"), None)
            for name, kind, config, r in rows:
                lat = latency(r)
                if lat is None:
                    out.append(f"| {name} | - | - | - | - | - | - | {sentence(model, kind, config, r, prev, simd_none)} |")
                    continue
                cells = row_cells(r)
                speed = f"{base / lat:.1f}x" if base else "-"
                text = sentence(model, kind, config, r, prev, simd_none)
                out.append(f"| {name} | {cells[0]} | {cells[1]} | {speed} | {cells[2]} | {cells[3]} | {cells[4]} | "
                           f"{text} |")
                if kind in ("naive", "simd", "fused"):
                    prev = r
            out.append("")
    out += targets(runs)
    return out


def draw(runs, out_dir, plt):
    """fusion_table.png (from load()'s records): one panel per model, latency per row at each thread
    count (log scale)."""
    models = [m for m in MODELS if any(k[0] == m for k in runs)]
    if not models:
        return None
    ts = thread_counts(runs)
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.6), squeeze=False)
    for ax, model in zip(axes[0], models):
        names = None
        width = 0.8 / len(ts)
        for k, t in enumerate(ts):
            rows = [(n, latency(r)) for n, kind, _, r in model_rows(runs, model, t) if kind != "naive"]
            names = [n for n, _ in rows]
            ys = [v if v else float("nan") for _, v in rows]
            xs = [i + (k - (len(ts) - 1) / 2) * width for i in range(len(rows))]
            ax.barh(xs, ys, width, label=f"{t} thread{'s' if t > 1 else ''}", edgecolor="black", linewidth=0.3)
        ax.set_yticks(range(len(names or [])))
        ax.set_yticklabels(names or [], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("median latency, ms (log; no bar: skipped)", fontsize=8)
        ax.set_xscale("log")
        ax.set_title(model, fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    name = "fusion_table.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name
