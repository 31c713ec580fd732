"""Attribution accuracy on simulated jobs with seeds never used in training.

For every cause label (and healthy runs), simulate jobs with confounders at the given
rate, analyze them end to end, and compare with the simulator's truth: top-1 cause and
exact culprit node set. Prints a table per cause, the misses, and the totals.

Usage:
    python benchmarks/accuracy.py --per-cause 12 --seed-base 50000 --out /tmp/cs-acc
Training uses seeds below 20000 (crashscope/classify/train.py); keep --seed-base above.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from crashscope.analyze import analyze
from crashscope.schema import CAUSES
from crashscope.simulate import simulate

SIZES = [(2, 2), (2, 4), (4, 2), (4, 4), (4, 8), (8, 4), (8, 8)]


def _same_first(got: dict | None, want: dict | None, planted: list[dict]) -> bool:
    """The reported first failure is the truth's, or one of the planted root-cause lines
    (several lines happen within the same second), or both are absent (healthy runs)."""
    if not want:
        return got is None or not planted
    if not got:
        return False
    places = {(want.get("file"), want.get("line"))} | {(e.get("file"), e.get("line")) for e in planted}
    return (got.get("file"), got.get("line")) in places


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-cause", type=int, default=12)
    ap.add_argument("--seed-base", type=int, default=50000)
    ap.add_argument("--confounder-rate", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=Path("/tmp/crashscope-accuracy"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    labels = [c for c in CAUSES if c != "unknown"]
    rng = random.Random(args.seed_base)
    rows = []
    t0 = time.perf_counter()
    for ci, cause in enumerate(labels):
        for i in range(args.per_cause):
            seed = args.seed_base + ci * 1000 + i
            nodes, gpn = rng.choice(SIZES)
            out = args.out / f"{cause}_{seed}"
            if out.exists():
                shutil.rmtree(out)
            truth = simulate(out, cause=cause, nodes=nodes, gpus_per_node=gpn, seed=seed, confounder_rate=args.confounder_rate)
            report, _, _ = analyze(out)
            want_nodes = sorted(truth["implicated"]["nodes"])
            got_nodes = sorted(report.implicated["nodes"])
            rows.append(
                {
                    "cause": cause,
                    "seed": seed,
                    "size": f"{nodes}x{gpn}",
                    "got": report.cause,
                    "confidence": report.confidence,
                    "cause_ok": report.cause == cause,
                    "nodes_ok": got_nodes == want_nodes,
                    "first_ok": _same_first(report.first_failure, truth.get("first_failure"), truth.get("evidence", [])),
                    "want_nodes": want_nodes,
                    "got_nodes": got_nodes,
                    "confounders": truth.get("confounders", []),
                }
            )
            shutil.rmtree(out)
    elapsed = time.perf_counter() - t0
    per = defaultdict(Counter)
    for r in rows:
        per[r["cause"]]["n"] += 1
        per[r["cause"]]["cause_ok"] += r["cause_ok"]
        per[r["cause"]]["nodes_ok"] += r["nodes_ok"]
        per[r["cause"]]["first_ok"] += r["first_ok"]
    print(f"{'cause':16} {'n':>3} {'top-1':>7} {'culprit node':>13} {'first failure':>14}")
    for c in labels:
        p = per[c]
        print(f"{c:16} {p['n']:>3} {p['cause_ok'] / p['n']:>7.1%} {p['nodes_ok'] / p['n']:>13.1%} {p['first_ok'] / p['n']:>14.1%}")
    n = len(rows)
    top1 = sum(r["cause_ok"] for r in rows) / n
    nodes = sum(r["nodes_ok"] for r in rows) / n
    first = sum(r["first_ok"] for r in rows) / n
    print(f"{'ALL':16} {n:>3} {top1:>7.1%} {nodes:>13.1%} {first:>14.1%}   ({elapsed:.0f} s)")
    misses = [r for r in rows if not (r["cause_ok"] and r["nodes_ok"])]
    if misses:
        print("\nmisses:")
        for r in misses:
            print(f"  {r['cause']:15} seed {r['seed']} {r['size']:5} got {r['got']:15} {r['confidence']:.2f} nodes {r['got_nodes']} want {r['want_nodes']} confounders {r['confounders']}")
    if args.json:
        args.json.write_text(json.dumps({"top1": top1, "culprit_node": nodes, "n": n, "rows": rows}, indent=2))
    sys.exit(0)


if __name__ == "__main__":
    main()
