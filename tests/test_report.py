#!/usr/bin/env python3
"""CTest bench.quick_report: runs `opfuse-bench --quick`, renders its report, checks the structure.

Usage: test_report.py --bench PATH/opfuse-bench --report scripts/report.py --workdir DIR
       test_report.py --check BENCH_JSON REPORT_DIR      (only the checks, on an existing run)

Checks structure, never timings: the JSON has benchmarks named <op>/<impl>/<case>/t<threads>,
each with the roofline counters, no errors, a naive and a simd row for every op, and the context
opfuse-bench promises (machine, measured roofline, every kernel's summary); REPORT.md has the
machine and roofline sections and, per op, a teaching ladder and a stage-ladder table with one
row per benchmark; the charts exist when matplotlib is importable (otherwise the report must say
they were skipped). `opfuse-bench --compare` of the run with itself must report no regression.
Standard library only: CI's python may lack matplotlib.
"""
import json
import os
import re
import subprocess
import sys
import time

NAME = re.compile(r"^[a-z0-9_]+/(naive|simd|fused|cuda|onednn|eigen)/[^/\s]+/t[0-9]+$")
COUNTERS = ["wall_ns", "GFLOP/s", "GB/s", "flops", "bytes", "AI", "roof_GFLOP/s", "roofline_pct"]
FUSED_COUNTERS = ["bytes_fused", "bytes_unfused", "traffic_saved_pct"]
CONTEXT = ["opfuse_cpu_model", "opfuse_compiler", "opfuse_isa", "opfuse_threads", "roofline.threads",
           "roofline.copy.t1", "roofline.triad.t1", "roofline.naive_isa"]


class Checker:
    def __init__(self):
        self.failures = []

    def expect(self, ok, message):
        if not ok:
            self.failures.append(message)
        return ok


def check_json(c, path):
    with open(path) as f:
        data = json.load(f)
    ctx = data.get("context", {})
    for key in CONTEXT:
        c.expect(key in ctx, f"context lacks {key}")
    threads = ctx.get("roofline.threads", "1")
    c.expect(f"roofline.triad.t{threads}" in ctx, f"context lacks roofline.triad.t{threads}")
    c.expect(any(k.startswith("roofline.peak.") and k.endswith(".t1") for k in ctx),
             "context has no roofline.peak.<isa>.t1")
    benchmarks = [b for b in data.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    c.expect(len(benchmarks) > 0, "no benchmarks in the JSON")
    impls_by_op = {}
    for b in benchmarks:
        name = b.get("run_name", b.get("name", ""))
        if not c.expect(NAME.match(name), f"benchmark name {name!r} is not <op>/<impl>/<case>/t<threads>"):
            continue
        c.expect(not b.get("error_occurred"), f"{name}: error {b.get('error_message')}")
        op, impl = name.split("/")[:2]
        impls_by_op.setdefault(op, set()).add(impl)
        for counter in COUNTERS + (FUSED_COUNTERS if impl == "fused" else []):
            c.expect(isinstance(b.get(counter), (int, float)), f"{name}: counter {counter} missing")
        if impl == "naive":
            c.expect(name.endswith("/t1"), f"{name}: naive runs at 1 thread only")
        label = b.get("label", "")
        c.expect(label.startswith(op + "__"), f"{name}: label {label!r} is not the kernel's registry name")
        for field in ("summary", "isa", "roof_isa"):
            c.expect(f"kernel.{label}.{field}" in ctx, f"context lacks kernel.{label}.{field}")
    for op, impls in impls_by_op.items():
        c.expect({"naive", "simd"} <= impls, f"op {op} lacks a naive or simd benchmark (has {sorted(impls)})")
    # Repetitions share a run_name: the report has one row per benchmark, not per repetition.
    return data, impls_by_op, len({b.get("run_name", b.get("name", "")) for b in benchmarks})


def check_report(c, report_dir, impls_by_op, n_benchmarks):
    md_path = os.path.join(report_dir, "REPORT.md")
    if not c.expect(os.path.exists(md_path), f"{md_path} was not written"):
        return
    with open(md_path) as f:
        md = f.read()
    for heading in ("## Machine", "## Measured roofline", "## At a glance", "## Targets"):
        c.expect(heading in md, f"REPORT.md lacks the section {heading!r}")
    c.expect("| CPU |" in md and "| compiler |" in md, "REPORT.md machine table lacks CPU or compiler")
    c.expect("| stream triad |" in md, "REPORT.md lacks the measured bandwidth")
    sections = re.split(r"^## ", md, flags=re.M)
    by_title = {s.split("\n", 1)[0].strip(): s for s in sections}
    # Every stage-issue target gets a row: a verdict from this run, or "not in this run".
    targets = re.findall(r"^\| (simd|fused) \| .* \| (met|\*\*missed\*\*|n/a \(compute-bound\)|-) \|$",
                         by_title.get("Targets", ""), flags=re.M)
    c.expect(len(targets) >= 20, f"REPORT.md Targets table has {len(targets)} rows, expected >= 20")
    # Parity with oneDNN: one row per thread count, when the run has gemm or conv2d next to oneDNN.
    if any(op in impls_by_op and "onednn" in impls_by_op[op] for op in ("gemm", "conv2d")):
        parity = re.findall(r"^\| \d+ \| (\d+) \| (\d+) \| (\d+) \| [0-9.]+x \| .+ \|$",
                            by_title.get("Parity with oneDNN", ""), flags=re.M)
        c.expect(parity and all(int(b1) <= int(b2) <= int(n) for n, b1, b2 in parity),
                 f"REPORT.md parity table: {parity}")
        # With two thread counts, the scaling table: its summary counts its rows.
        m = re.search(r"; (\d+) of (\d+) below [0-9.]+x\.\n\n\| case \| opfuse \| oneDNN \|\n\|---\|---\|---\|\n"
                      r"((?:\| .+ \|\n)+)", by_title.get("Parity with oneDNN", ""))
        if len(parity) > 1:
            c.expect(m and int(m.group(2)) == m.group(3).count("\n") and
                     int(m.group(1)) == m.group(3).count("(below)"), "REPORT.md thread-scaling table")
    # Where the run measured the gemm + gelu target (a full run), the report says what bounds it.
    if re.search(r"^\| fused \| `gemm/fused/128x3072x768\+bias\+gelu/t1` >= 1\.03x `simd` \| [0-9.]+x",
                 by_title.get("Targets", ""), flags=re.M):
        c.expect(re.search(r"^- `gemm/\*/128x3072x768\+bias\+gelu`: .* = [0-9.]+% of the simd stage's .*"
                           r"Even a free gelu pass would give [0-9.]+x", md, flags=re.M) is not None,
                 "REPORT.md measures the gemm+gelu target but does not say what bounds it")
    rows = 0
    for op in impls_by_op:
        s = by_title.get(op)
        if not c.expect(s is not None, f"REPORT.md has no section for {op}"):
            continue
        c.expect("**The ladder**" in s, f"REPORT.md section {op} lacks the teaching ladder")
        c.expect("1. **naive**" in s, f"REPORT.md section {op}: the ladder does not start at naive")
        c.expect(re.search(r"^2\. \*\*simd\*\* .*x (faster|slower) than naive", s, flags=re.M) is not None,
                 f"REPORT.md section {op}: the ladder has no simd step with its speedup")
        c.expect("| case | threads | impl | kernel | time | vs naive |" in s,
                 f"REPORT.md section {op} lacks the stage-ladder table")
        rows += len(re.findall(r"^\| `[^`]+` \| [0-9]+ \| ", s, flags=re.M))
    c.expect(rows == n_benchmarks, f"REPORT.md tables have {rows} rows for {n_benchmarks} benchmarks")
    try:
        import matplotlib  # noqa: F401
        have_matplotlib = True
    except ImportError:
        have_matplotlib = False
    if have_matplotlib:
        pngs = ["roofline.png", "scaling.png"] + [f"ladder_{op}.png" for op in impls_by_op]
        for png in pngs:
            path = os.path.join(report_dir, png)
            ok = os.path.exists(path)
            if ok:
                with open(path, "rb") as f:
                    ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
            c.expect(ok, f"chart {png} missing or not a PNG")
            c.expect(f"]({png})" in md, f"REPORT.md does not show {png}")
    else:
        c.expect("Charts were skipped" in md, "no matplotlib, but REPORT.md does not say charts were skipped")


FUSION_ROWS = ["naive", "simd + none", "fused + none", "fused + basic", "fused + advanced", "fused + full",
               "PyTorch eager", "PyTorch frozen", "ONNX Runtime disabled", "ONNX Runtime basic",
               "ONNX Runtime extended", "ONNX Runtime all"]


def check_fusion_table(c, report_dir, model):
    """The fusion table of one model: every row, with numbers or (peers only) a skipped/failed reason."""
    with open(os.path.join(report_dir, "REPORT.md")) as f:
        md = f.read()
    c.expect("## Whole models: the fusion table" in md, "REPORT.md has no fusion table")
    c.expect("### Fusion targets" in md, "REPORT.md has no fusion targets")
    # A missed fusion target carries its arithmetic (or says why it cannot, without profiles).
    if re.search(rf"^\| {model} \| fused \+ full >= [\d.]+x simd \+ none \| \d+ \| [\d.]+x \| no \|", md, flags=re.M):
        c.expect(re.search(rf"^- \*\*{model}\*\* misses a target.*\n  (The arithmetic of the fusion target: "
                           r"simd \+ none spends [\d.]+ of its [\d.]+ ms|The simd \+ none run has no profile)", md,
                           flags=re.M),
                 f"{model} misses its fusion target without the arithmetic")
    m = re.search(rf"^### {model}, 1 thread\n(.*?)(?=^### |\Z)", md, flags=re.M | re.S)
    if not c.expect(m, f"no fusion table for {model} at 1 thread"):
        return
    rows = {}
    for line in m.group(1).splitlines():
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in FUSION_ROWS:
            rows[cells[0]] = cells
    for name in FUSION_ROWS:
        if not c.expect(name in rows, f"{model} fusion table lacks the row {name!r}"):
            continue
        cells = rows[name]
        peer = name.startswith(("PyTorch", "ONNX"))
        if peer and cells[1] == "-":
            c.expect(cells[7].startswith(("skipped", "failed")), f"{model} {name}: no time and no reason")
        else:
            c.expect(cells[1].endswith(" ms") and (cells[5].isdigit() or peer), f"{model} {name}: cells {cells[:6]}")
            c.expect(len(cells[7]) > 20, f"{model} {name}: no sentence")


def run(cmd, timeout):
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    print(f"  exit {p.returncode} after {time.monotonic() - t0:.1f} s", flush=True)
    return p


def main(argv):
    c = Checker()
    if len(argv) == 4 and argv[1] == "--check":
        _, impls_by_op, n = check_json(c, argv[2])
        check_report(c, argv[3], impls_by_op, n)
    else:
        args = dict(zip(argv[1::2], argv[2::2]))
        bench, report, workdir = args.get("--bench"), args.get("--report"), args.get("--workdir")
        if not (bench and report and workdir):
            sys.exit(__doc__)
        os.makedirs(workdir, exist_ok=True)
        json_path = os.path.join(workdir, "bench.json")
        report_dir = os.path.join(workdir, "report")
        if os.path.exists(json_path):
            os.remove(json_path)
        p = run([bench, "--quick", "--json", json_path], timeout=240)
        tail = p.stderr.strip().splitlines()[-3:]
        print("  " + "\n  ".join(tail))
        if not c.expect(p.returncode == 0 and os.path.exists(json_path), "opfuse-bench --quick failed"):
            print(p.stderr[-4000:])
        else:
            _, impls_by_op, n = check_json(c, json_path)
            progress = re.findall(r"^\[(\d+)/(\d+)\] ", p.stderr, flags=re.M)
            c.expect(len(progress) == n and all(t == str(n) for _, t in progress),
                     f"progress lines: {len(progress)} for {n} benchmarks")
            # One model's fusion table with its peers, quick: the rows and the sentences, not the times.
            scripts = os.path.dirname(os.path.abspath(report))
            build = os.path.dirname(os.path.abspath(bench))
            env = dict(os.environ, OPFUSE_QUICK="1", OPFUSE_MODELS="mobilenet_v2")
            models_dir = os.path.join(report_dir, "models")
            for script in ("bench-models.sh", "bench-peers.sh"):
                print(f"+ {script} {build} {models_dir}", flush=True)
                m = subprocess.run([os.path.join(scripts, script), build, models_dir], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
                c.expect(m.returncode == 0, f"{script} failed:\n{m.stderr[-3000:]}")
            r = run([sys.executable, report, json_path, report_dir], timeout=240)
            print("  " + r.stdout.strip())
            if c.expect(r.returncode == 0, f"report.py failed:\n{r.stderr[-4000:]}"):
                check_report(c, report_dir, impls_by_op, n)
                check_fusion_table(c, report_dir, "mobilenet_v2")
            cmp = run([bench, "--compare", json_path, json_path], timeout=60)
            c.expect(cmp.returncode == 0 and re.search(r"^\d+ compared: 0 slower", cmp.stdout, flags=re.M),
                     f"--compare of a run with itself:\n{cmp.stdout[-2000:]}{cmp.stderr[-2000:]}")
    for f in c.failures[:50]:
        print("FAIL: " + f)
    if c.failures:
        print(f"{len(c.failures)} failures")
        return 1
    print("report structure OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
