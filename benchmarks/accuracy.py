"""Attribution accuracy on three corpora, side by side: simulated jobs with seeds never
used in training, recorded incidents (real Slurm + torch.distributed + injected faults,
``fixtures/recorded/``) and real public incident logs (``tests/data/real/``).

For every cause label (and healthy runs), simulate jobs with confounders at the given
rate, analyze them end to end, and compare with the simulator's truth: top-1 cause and
exact culprit node set. Prints a table per cause, the misses, and the totals.

Usage:
    python benchmarks/accuracy.py --per-cause 12 --seed-base 50000 --out /tmp/cs-acc
    python benchmarks/accuracy.py --corpora recorded,real      # the real-world numbers only
Training uses seeds below 20000 (crashscope/classify/train.py); keep --seed-base above.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import random
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from crashscope.pipeline import analyze
from crashscope.evaluation import analyze_case, load_cases, score, summarize
from crashscope.schema import CAUSES
from crashscope.simulate import simulate

SIZES = [(2, 2), (2, 4), (4, 2), (4, 4), (4, 8), (8, 4), (8, 8)]


def _same_first(got: dict | None, want: dict | None, planted: list[dict]) -> bool:
    """The reported first failure (``got``: the report JSON's ``first_failure``, a dict or
    None) is the truth's, or one of the planted root-cause lines (several lines happen
    within the same second), or both are absent (healthy runs)."""
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
    ap.add_argument("--corpora", default="simulated,recorded,recorded_fr,real", help="comma-separated: simulated, recorded, recorded_fr, real")
    ap.add_argument("--ids", default="", help="comma-separated case ids or fnmatch patterns (a held-out part: 'hvd-*,ray-25866'); corpora cases only")
    args = ap.parse_args()
    corpora = [c.strip() for c in args.corpora.split(",") if c.strip()]
    results: dict = {}
    if "simulated" in corpora:
        results["simulated"] = _simulated(args)
    for name in ("recorded", "recorded_fr", "real"):
        if name in corpora:
            results[name] = _corpus(name, [p for p in args.ids.split(",") if p.strip()])
    _side_by_side(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    sys.exit(0)


REPO = Path(__file__).resolve().parent.parent
CORPUS_DIRS = {"recorded": REPO / "fixtures" / "recorded", "recorded_fr": REPO / "fixtures" / "recorded_fr", "real": REPO / "tests" / "data" / "real"}


def _corpus(name: str, ids: list[str]) -> dict:
    cases = load_cases(CORPUS_DIRS[name], name)
    if ids:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p.strip()) for p in ids)]
    scores = []
    t0 = time.perf_counter()
    for case in cases:
        scores.append(score(case, analyze_case(case)))
    summary = summarize(scores)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    per = defaultdict(Counter)
    for s_ in scores:
        per[s_.case.cause]["n"] += 1
        per[s_.case.cause]["ok"] += s_.cause_ok
    print(f"\n{name}: {len(cases)} cases")
    print(f"{'cause':16} {'n':>3} {'right':>6}")
    for c in sorted(per):
        print(f"{c:16} {per[c]['n']:>3} {per[c]['ok'] / per[c]['n']:>6.0%}")
    wrong = [s_ for s_ in scores if not s_.cause_ok or s_.node_ok is False or s_.rank_ok is False]
    if wrong:
        print("misses:")
        for s_ in wrong:
            flags = "".join(k for k, v in (("C", s_.cause_ok), ("N", s_.node_ok), ("R", s_.rank_ok), ("F", s_.first_ok)) if v is False)
            print(f"  {s_.case.id:28} want {s_.case.cause:15} got {s_.cause:15} {s_.confidence:.2f}  wrong:{flags}{'  CONFIDENT-WRONG' if s_.confident_wrong else ''}")
    summary["misses"] = [{"id": s_.case.id, "want": s_.case.cause, "got": s_.cause, "confidence": s_.confidence} for s_ in wrong]
    return summary


def _side_by_side(results: dict) -> None:
    def pct(d: dict) -> str:
        return f"{d['right'] / d['of']:.0%} ({d['right']}/{d['of']})" if d.get("of") else "-"

    print(f"\n{'corpus':10} {'cases':>5} {'cause':>14} {'culprit node':>14} {'culprit rank':>14} {'first failure':>14} {'conf-wrong':>10}")
    for name, r in results.items():
        print(f"{name:10} {r['cases']:>5} {pct(r['cause']):>14} {pct(r['node']):>14} {pct(r['rank']):>14} {pct(r['first_failure']):>14} {r['confident_wrong']:>10}")


def _simulated(args) -> dict:  # type: ignore[no-untyped-def]
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
            # Scored from the report's JSON form (the contract), as the corpora are.
            got = report.to_dict()
            want_nodes = sorted(truth["implicated"]["nodes"])
            got_nodes = sorted(got["implicated"]["nodes"])
            rows.append(
                {
                    "cause": cause,
                    "seed": seed,
                    "size": f"{nodes}x{gpn}",
                    "got": got["cause"],
                    "confidence": got["confidence"],
                    "cause_ok": got["cause"] == cause,
                    "nodes_ok": got_nodes == want_nodes,
                    "first_ok": _same_first(got.get("first_failure"), truth.get("first_failure"), truth.get("evidence", [])),
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
    wrong_conf = sum(1 for r in rows if not r["cause_ok"] and r["confidence"] >= 0.8)
    return {
        "cases": n,
        "cause": {"right": sum(r["cause_ok"] for r in rows), "of": n},
        "node": {"right": sum(r["nodes_ok"] for r in rows), "of": n},
        "rank": {"right": 0, "of": 0},
        "first_failure": {"right": sum(r["first_ok"] for r in rows), "of": n},
        "confident_wrong": wrong_conf,
        "top1": top1, "culprit_node": nodes, "seconds": round(elapsed, 1),
    }


if __name__ == "__main__":
    main()
