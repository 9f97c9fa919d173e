#!/usr/bin/env python3
"""merge_rounds.py DIR - pools the rounds of the whole-model runs into one record per row.

scripts/bench.sh runs scripts/bench-models.sh and scripts/bench-peers.sh in interleaved rounds
(files NAME.rK.json), so that a machine that drifts 10-40% over minutes slows every row of the
fusion table alike instead of whichever ran last. Each NAME.json gets round 1's record (its
profile, memory, nodes) with the times of all rounds pooled: median and min over every timed run,
"rounds" and "times_ms" (all of them). A row that failed or was skipped in any round keeps that
round's record. The .rK files are removed.
"""
import glob
import json
import os
import re
import sys


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    d = argv[1]
    groups = {}
    for path in glob.glob(os.path.join(d, "*.r*.json")):
        m = re.match(r"^(.*)\.r(\d+)\.json$", os.path.basename(path))
        if m:
            groups.setdefault(m.group(1), []).append((int(m.group(2)), path))
    for name, files in sorted(groups.items()):
        files.sort()
        recs = []
        for _, path in files:
            try:
                with open(path) as f:
                    recs.append(json.load(f))
            except (OSError, ValueError) as e:
                recs.append({"failed": f"unreadable {os.path.basename(path)}: {e}"})
        bad = next((r for r in recs if "skipped" in r or "failed" in r or not r.get("times_ms")), None)
        out = dict(bad if bad is not None else recs[0])
        if bad is None:
            times = [t for r in recs for t in r["times_ms"]]
            key, kmin = ("median_ms", "min_ms") if "peer" in out else ("latency_ms", "latency_min_ms")
            out[key] = median(times)
            out[kmin] = min(times)
            out["times_ms"] = times
            out["rounds"] = len(recs)
            if "repeat" in out:
                out["repeat"] = len(times)
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(out, f, indent=1)
        for _, path in files:
            os.remove(path)
    print(f"merge_rounds: {len(groups)} rows pooled in {d}")


if __name__ == "__main__":
    main(sys.argv)
