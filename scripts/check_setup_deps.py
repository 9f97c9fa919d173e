#!/usr/bin/env python3
"""Fails when the configure step uses a Debian package that scripts/setup.sh does not install.

A green CI on a machine that happens to have a package hides a missing install step (oneDNN's
CMake package needs OpenCL, which Debian only recommends). The full proof is
scripts/fresh-check.sh on a bare Debian 12 root; this is the cheap guard CI runs every time:

1. configure the project into a scratch folder with `cmake --trace-format=json-v1`, collecting
   every CMake file the configure step read (find modules, package configs) and every absolute
   path it cached (libraries, headers, programs it found);
2. map each path to the Debian package that ships it (`dpkg -S`);
3. allow the packages setup.sh lists (`setup.sh --list`), everything their Depends / Pre-Depends
   pull in (recursively, over what is installed), and the base system (Essential or Priority
   required, and apt, which a bare Debian root has);
4. print every other package with a file that came from it, and exit 1 if there is one.

Paths no package owns (a Python under /root/.pyenv, /usr/local) are listed as notes: a fresh
machine finds Debian's own instead, which the rule above covers.

With --minimal it checks the library-only build (-DOPFUSE_BUILD_TOOLS=OFF -DOPFUSE_BUILD_TESTS=OFF
-DOPFUSE_BUILD_BENCH=OFF) against `setup.sh --list --minimal`.

usage: check_setup_deps.py [--minimal] [--source DIR] [--keep] [-- CMAKE_ARGS...]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    return subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)


def installed_packages():
    """{name: (essential, priority, depends-string)} for every installed package."""
    out = run(["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Essential}\t${Priority}\t${Pre-Depends}, ${Depends}\n"])
    pkgs = {}
    for line in out.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) != 5 or not parts[1].endswith("installed") or "not-installed" in parts[1]:
            continue
        pkgs[parts[0]] = (parts[2] == "yes", parts[3], parts[4])
    return pkgs


def dep_names(depends):
    """Every package named in a Depends field, all alternatives of `a | b` included."""
    names = []
    for clause in depends.split(","):
        for alt in clause.split("|"):
            alt = alt.strip()
            if not alt:
                continue
            names.append(re.split(r"[\s:(]", alt, maxsplit=1)[0])
    return names


def provides_map():
    """virtual package -> real installed packages that provide it."""
    out = run(["dpkg-query", "-W", "-f", "${Package}\t${Provides}\n"])
    prov = {}
    for line in out.stdout.splitlines():
        name, _, provides = line.partition("\t")
        for v in dep_names(provides):
            prov.setdefault(v, set()).add(name)
    return prov


def closure(roots, pkgs, prov):
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for real in prov.get(p, ()):
            todo.append(real)
        if p in pkgs:
            todo.extend(dep_names(pkgs[p][2]))
    return seen


def owners(paths):
    """{path: set of packages} for the paths dpkg knows (tries the path, its realpath, and the
    pre-merged-/usr spelling, in that order). One `dpkg -S` for all of them: each call reads the
    whole package database, and one call per path took most of this check's time."""
    cands = {}
    for path in sorted(paths):
        c = [path, os.path.realpath(path)]
        for x in list(c):
            if x.startswith("/usr/lib/") or x.startswith("/usr/bin/") or x.startswith("/usr/sbin/"):
                c.append(x[len("/usr"):])
        # dpkg reads *, ?, [ and backslash in a pattern as wildcards: such a spelling is not asked.
        cands[path] = [x for x in dict.fromkeys(c) if not re.search(r"[*?\[\\]", x)]
    found = {}
    asked = sorted({x for c in cands.values() for x in c})
    for i in range(0, len(asked), 500):
        # Exit status 1 when some pattern matched nothing; the matches are still printed.
        out = run(["dpkg", "-S", *asked[i:i + 500]])
        for line in out.stdout.splitlines():
            if ": " not in line or line.startswith("diversion"):
                continue
            names, file = line.split(": ", 1)
            pk = {name.strip().split(":")[0] for name in names.split(",")}
            found.setdefault(file.strip(), set()).update(pk)
    result = {}
    for path, c in cands.items():
        for x in c:
            if found.get(x):
                result[path] = found[x]
                break
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--keep", action="store_true", help="keep the scratch build folder")
    ap.add_argument("--minimal", action="store_true", help="the library-only build and setup.sh's minimal list")
    ap.add_argument("cmake_args", nargs="*")
    a = ap.parse_args()
    src = os.path.realpath(a.source)
    minimal = ["--minimal"] if a.minimal else []
    listed = run([os.path.join(src, "scripts", "setup.sh"), "--list", *minimal]).stdout.split()
    if a.minimal:
        a.cmake_args = ["-DOPFUSE_BUILD_TOOLS=OFF", "-DOPFUSE_BUILD_TESTS=OFF", "-DOPFUSE_BUILD_BENCH=OFF", "-DOPFUSE_BUILD_PYTHON=OFF",
                        *a.cmake_args]
    if not listed:
        print("check_setup_deps: scripts/setup.sh --list printed nothing", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="opfuse-deps-")
    try:
        build = os.path.join(work, "build")
        trace = os.path.join(work, "trace.json")
        cfg = run(["cmake", "-S", src, "-B", build, "-G", "Ninja", "--trace-format=json-v1",
                   "--trace-redirect=" + trace, *a.cmake_args])
        if cfg.returncode != 0:
            print(cfg.stdout[-4000:] + cfg.stderr[-4000:], file=sys.stderr)
            print("check_setup_deps: the configure step failed (a package is missing on this machine: "
                  "is it in scripts/setup.sh?)", file=sys.stderr)
            return 1
        paths = set()
        with open(trace) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                p = rec.get("file")
                if p:
                    paths.add(p)
        cache_line = re.compile(r"^[^#/][^:=]*:(FILEPATH|PATH|STRING|INTERNAL|UNINITIALIZED)=(.*)$")
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = cache_line.match(line.strip())
                if not m:
                    continue
                for v in m.group(2).split(";"):
                    if v.startswith("/") and os.path.exists(v):
                        paths.add(v)
        paths = {os.path.normpath(p) for p in paths
                 if not os.path.realpath(p).startswith((src + "/", work + "/")) and os.path.realpath(p) != src}
        pkgs = installed_packages()
        prov = provides_map()
        base = [p for p, (ess, prio, _) in pkgs.items() if ess or prio == "required"] + ["apt"]
        allowed = closure(listed, pkgs, prov) | closure(base, pkgs, prov)
        own = owners(paths)
        bad = {}
        for path, pk in own.items():
            if os.path.isdir(path):
                ok = bool(pk & allowed)  # a directory is shared; one allowed owner is enough
            else:
                ok = pk <= allowed
            if not ok:
                for p in pk - allowed:
                    bad.setdefault(p, []).append(path)
        unowned = sorted(p for p in paths if p not in own and not p.startswith(("/tmp/", "/proc/")))
        print(f"check_setup_deps: {len(paths)} paths used by the configure step, {len(own)} from Debian packages; "
              f"{len(listed)} packages listed in setup.sh, {len(allowed)} allowed with their Depends and the base system")
        for p in unowned[:10]:
            print(f"  note: {p} is in no Debian package (a fresh machine uses Debian's own)")
        if bad:
            for p, files in sorted(bad.items()):
                print(f"check_setup_deps: package {p} is used by the configure step but not installed by "
                      f"scripts/setup.sh (nor a Depends of a package it lists): {files[0]}"
                      + (f" (+{len(files) - 1} more)" if len(files) > 1 else ""), file=sys.stderr)
            return 1
        print("check_setup_deps: every package the configure step uses is installed by scripts/setup.sh"
              + (" --minimal" if a.minimal else ""))
        return 0
    finally:
        if a.keep:
            print(f"check_setup_deps: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
