#!/usr/bin/env python3
"""Renders reports/HARDENING.md from the JSON the hardening runs write into reports/hardening/.

  scripts/hardening_report.py [REPORTS_DIR]     (default: reports)

Inputs, each written by the run that measured it (nothing here is typed in by hand):
  hardening/sanitize-<mode>-<isa>.json  scripts/sanitize.sh --quick / --full
  hardening/fuzz.json                   scripts/fuzz.sh
  hardening/concurrency.json            the Concurrency* tests' GoogleTest JSON (scripts/hardening.sh)
  hardening/limits.json                 the Limits* tests' GoogleTest JSON (scripts/hardening.sh)
  hardening/denormals.json              `opfuse denormals --json` (scripts/hardening.sh)
A section whose file is missing says so and names the command that makes it.
"""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gtest_rows(doc):
    """(suite.test, status, seconds) of a GoogleTest JSON report."""
    rows = []
    for suite in (doc or {}).get("testsuites", []):
        for t in suite.get("testsuite", []):
            ok = not t.get("failures") and t.get("status") == "RUN"
            secs = float(str(t.get("time", "0")).rstrip("s") or 0)
            rows.append((f"{suite['name']}.{t['name']}", "pass" if ok else ("skipped" if t.get("result") == "SKIPPED" else "FAIL"), secs))
    return rows


def section_fuzz(d, out):
    out.append("## Fuzzing\n")
    doc = load(os.path.join(d, "hardening", "fuzz.json"))
    if not doc:
        out.append("Not run yet: `scripts/fuzz.sh [SECONDS]` writes `hardening/fuzz.json`.\n")
        return
    out.append(f"libFuzzer under ASan + UBSan + LeakSanitizer ({doc.get('compiler', 'clang-14')}; kernels: "
               f"{doc.get('stages', '?')}: the importer, graph passes, planner, executor, host ops and validation are "
               f"all there, and every input runs the reference kernels), {doc['total_seconds']} s in all, {doc['date']}. "
               "Seeds: the built-in models' graphs, ONNX's conformance models and inputs, one valid sample per op and "
               "stage (`fuzz/make_seeds.cpp`).\n")
    out.append("| target | what it feeds | seconds | executions | exec/s | coverage (edges) | corpus (inputs) | findings | exit |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    what = {"model": "ONNX bytes -> import, compile, one run", "tensor": "a TensorProto input file",
            "ops": "single-op API: hostile descs, post-ops, aliasing"}
    for t in doc["targets"]:
        rate = t["executions"] / t["seconds"] if t["seconds"] else 0
        out.append(f"| {t['target']} | {what.get(t['target'], '')} | {t['seconds']} | {t['executions']} | {rate:.0f} | "
                   f"{t['coverage_edges']} | {t['corpus_inputs']} | {t['findings']} | {t['exit']} |")
    reg = doc.get("regressions", {})
    out.append("")
    out.append(f"Findings fixed and kept as regression inputs (`fuzz/regressions/`, replayed by ctest "
               f"`fuzz.replay.*` in every build): model {reg.get('model', 0)}, tensor {reg.get('tensor', 0)}, "
               f"ops {reg.get('ops', 0)}. The list of what they were is in `fuzz/regressions/README.md`.\n")


def section_sanitizers(d, out):
    out.append("## Sanitizer runs\n")
    files = sorted(glob.glob(os.path.join(d, "hardening", "sanitize-*.json")))
    if not files:
        out.append("Not run yet: `scripts/sanitize.sh --quick`, `--full` and `--tsan` write `hardening/sanitize-*.json`.\n")
        return
    out.append("| mode | compiler, flags | kernels built | date | CPU | build s | tests s | gtest passed / failed | "
               "ctest tests / failed | result |")
    out.append("|---|---|---|---|---|---:|---:|---|---|---|")
    docs = [s for s in (load(f) for f in files) if s]
    for s in docs:
        ok = s["gtest_rc"] == 0 and s["ctest_rc"] == 0
        found = s.get("sanitizer_reports")
        result = ("clean" if ok else "tests failed, no sanitizer report") if not found else f"{found} sanitizer reports"
        kernels = "naive only" if s["isa"] == "none" else f"naive + simd/fused for {s['isa']}"
        gtest = "-" if s["mode"] == "full" else f"{s['gtest_passed']} / {s['gtest_failed']}"
        ctest = "-" if s.get("ctest_total") is None else f"{s['ctest_total']} / {s['ctest_failed']}"
        out.append(f"| `--{s['mode']}` | {s.get('compiler', 'g++')} `{s['flags']}` | {kernels} | {s['date']} | "
                   f"{s['cpu']} ({s['cores']} cores) | {s['build_seconds']} | {s['test_seconds']} | {gtest} | {ctest} | "
                   f"{result} |")
    out.append("")
    out.append("What each run covered (the filters are the runs' own, from their JSON):\n")
    for s in docs:
        what = {
            "quick": "every CI run: the suites over untrusted input (ONNX import, tensor files, graph IR and passes, "
                     "planner, executor and host ops, every op's validation and error paths, the C API, resource limits, "
                     "ONNX's conformance models) plus the CLI tests and the fuzz replays, built in the fuzzers' folder "
                     "(one ASan build of the library serves both). Whole-model tests that take minutes at the naive "
                     "stage under ASan are left to `--full`.",
            "full": "the whole ctest suite - every kernel of the built ISA at every stage against naive, the whole "
                    "models at every fusion level, the CLI, the C API - under ASan + UBSan + LeakSanitizer. One ISA's "
                    "simd/fused kernels per build (three ASan copies of every kernel family made the whole-tree build "
                    "take over an hour on 2 cores); the other ISAs are the same templates at another vector width and "
                    "run in the normal suite, natively and under qemu.",
            "tsan": "ThreadSanitizer over the concurrency tests - several caller threads on one Plan, each plan at one "
                    "OpenMP thread - which check the runtime's own synchronization (specialization cache, arena pool, "
                    "the queries). The kernels' OpenMP regions are not run under TSan: Debian's libgomp is not built "
                    "with TSan, so its barriers look like unsynchronized accesses and every parallel region would be a "
                    "false report; LLVM's libomp with its Archer tool would annotate them, but the kernels use C++20 "
                    "constructs Debian 12's clang-14 lacks (structured bindings captured by lambdas).",
        }.get(s["mode"], "")
        sel = []
        if s.get("gtest_filter"):
            sel.append(f"gtest filter `{s['gtest_filter']}`")
        if s.get("ctest_regex") and s["ctest_regex"] != "^$":
            sel.append(f"ctest `-R {s['ctest_regex']}`" + (f" `-E {s['ctest_exclude']}`" if s.get("ctest_exclude") else ""))
        out.append(f"- `--{s['mode']}`: {what}" + (f" Selection: {'; '.join(sel)}." if sel else ""))
    out.append("")
    out.append("LeakSanitizer checks every ASan process at exit; the first report of any sanitizer stops the run.\n")


def section_tests(d, name, title, cmd, out):
    doc = load(os.path.join(d, "hardening", f"{name}.json"))
    out.append(f"## {title}\n")
    if not doc:
        out.append(f"Not run yet: {cmd}.\n")
        return
    rows = gtest_rows(doc)
    passed = sum(1 for r in rows if r[1] == "pass")
    out.append(f"{passed} of {len(rows)} tests passed ({doc.get('timestamp', '')}).\n")
    out.append("| test | result | seconds |")
    out.append("|---|---|---:|")
    for n, st, secs in rows:
        out.append(f"| `{n}` | {st} | {secs:.2f} |")
    out.append("")


def section_denormals(d, out):
    out.append("## Denormals\n")
    doc = load(os.path.join(d, "hardening", "denormals.json"))
    if not doc:
        out.append("Not run yet: `opfuse denormals --threads 1 --json reports/hardening/denormals.json`.\n")
        return
    rows = doc.get("kernels", [])
    out.append(f"`opfuse denormals`: every kernel on normal inputs and on inputs that are (and produce) denormals, "
               f"median of {doc.get('repeats')} interleaved samples, {doc.get('threads')} thread(s), CPU ISA "
               f"{doc.get('cpu_isa')}; once with IEEE denormals, once under the library's policy "
               f"({doc.get('policy', 'FTZ + DAZ')}). Ratio = the median, over the back-to-back pairs of samples, of "
               "denormal / normal (a drift of the shared machine between samples moves both alike).\n")
    if rows:
        worst_ieee = max(rows, key=lambda r: r["ieee"]["ratio"])
        worst_ftz = max(rows, key=lambda r: r["ftz"]["ratio"])
        over = [r["kernel"] for r in rows if r["ftz"]["ratio"] > 2.0]
        out.append(f"{len(rows)} kernel cases. Worst with IEEE denormals: `{worst_ieee['kernel']}` "
                   f"{worst_ieee['ieee']['ratio']:.2f}x; worst under the policy: `{worst_ftz['kernel']}` "
                   f"{worst_ftz['ftz']['ratio']:.2f}x; above 2x under the policy: {', '.join(over) if over else 'none'}.\n")
        out.append("| kernel | case | IEEE normal ms | IEEE denormal ms | IEEE ratio | policy normal ms | policy denormal ms | policy ratio |")
        out.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in sorted(rows, key=lambda r: -r["ieee"]["ratio"]):
            ie, fz = r["ieee"], r["ftz"]
            out.append(f"| `{r['kernel']}` | {r.get('case', '')} | {ie['normal_ms']:.4f} | {ie['denormal_ms']:.4f} | "
                       f"{ie['ratio']:.2f} | {fz['normal_ms']:.4f} | {fz['denormal_ms']:.4f} | {fz['ratio']:.2f} |")
        out.append("")


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "reports"
    out = ["# Hardening", "",
           "Generated by `scripts/hardening_report.py` from the runs' own output in `reports/hardening/` "
           "(`scripts/hardening.sh` makes them all). A model file from a stranger must never crash, corrupt or "
           "hang the program that links opfuse: this is the evidence, run by run.", ""]
    section_fuzz(d, out)
    section_sanitizers(d, out)
    section_tests(d, "concurrency", "Concurrency",
                  "`opfuse_tests --gtest_filter='Concurrency*' --gtest_output=json:reports/hardening/concurrency.json`", out)
    section_tests(d, "limits", "Resource limits",
                  "`opfuse_tests --gtest_filter='Limits*' --gtest_output=json:reports/hardening/limits.json`", out)
    section_denormals(d, out)
    path = os.path.join(d, "HARDENING.md")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"hardening_report: wrote {path}")


if __name__ == "__main__":
    main()
