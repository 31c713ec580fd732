"""The analysis stages alone (everything after the ingest), at 1k, 4k and 16k ranks.

``crashscope analyze`` is ingest + timeline + attribution. The ingest of a 16,384-rank job
takes minutes; the stages after it grow with the rank count and the events too, and are
what this benchmark times: each job is ingested once (the ingest result is pickled next to
the job, ``--reingest`` redoes it), then every stage runs ``--repeat`` times in this
process and the minimum is printed, in CPU seconds (``time.process_time``: the machine is
shared, wall times there mostly measure the neighbours) with wall seconds beside them.

Rows: ``timeline`` (``build_timeline``: identity, clocks, symptom groups), ``rules`` (the
rule engine over the events), one row per cross-rank analysis (``a:<name>``),
``features`` (the classifier's feature extraction), ``predict``, ``decide``, ``report``
(``build_report``) and ``json`` (the JSON view). ``total`` is their sum: what an analyze
spends after the ingest.

The jobs are simulated (``crashscope simulate --layout per_rank --nccl-info-volume 0``,
8 GPUs per node, one GPU failing): per-rank logs, per-node kernel, nvidia-smi, GPU CSV
telemetry and version files, and a Slurm output; about 60 events per rank. ``--job DIR``
adds an existing job directory (e.g. the ingest benchmark's 1,024-rank job).

Usage:
    python benchmarks/analysis_bench.py --ranks 1024,4096,16384 --out /tmp/cs-analysis-bench --repeat 3
    python benchmarks/analysis_bench.py --ranks 1024 --job /tmp/cs-bench/job_2GB --json /tmp/a.json

Generating and ingesting the 16k job once takes several minutes (the ingest result is
then reused). Compare before/after with the same ``--out`` (same cached inputs).
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

SEED = 1


def make_job(out: Path, ranks: int) -> Path:
    """A simulated job of ``ranks`` ranks (8 per node) under ``out``, made once."""
    job = out / f"job_{ranks}"
    if (job / "truth.json").is_file():
        return job
    if ranks % 8:
        sys.exit(f"--ranks {ranks}: a multiple of 8 (8 GPUs per node)")
    cmd = [
        sys.executable, "-m", "crashscope", "simulate", str(job), "--nodes", str(ranks // 8), "--gpus-per-node", "8",
        "--seed", str(SEED), "--layout", "per_rank", "--nccl-info-volume", "0", "--cause", "gpu_hardware", "--force",
    ]
    print(f"simulating {ranks} ranks into {job} ...", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return job


def load(job: Path, cache: Path, reingest: bool) -> Any:
    """The job's ``Loaded`` ingest (pickled at ``cache``) with a fresh timeline stage left to time."""
    from crashscope.pipeline import load_timeline

    if cache.is_file() and not reingest:
        with cache.open("rb") as fh:
            return pickle.load(fh)
    print(f"ingesting {job} (once; cached in {cache}) ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    loaded = load_timeline(job)
    print(f"  {time.perf_counter() - t:.1f} s, {loaded.result.events.height} events", file=sys.stderr, flush=True)
    with cache.open("wb") as fh:
        pickle.dump(loaded.result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return loaded.result


def stages(result: Any, root: Path) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """The stages after the ingest, in order; each reads and writes a shared state dict."""
    from crashscope.analyses import ANALYSES
    from crashscope.classify.features import extract
    from crashscope.classify.model import default_model
    from crashscope.engine.evaluate import evaluate
    from crashscope.report.build import build_report, missing_data
    from crashscope.timeline import build_timeline
    from crashscope.verdict import _this_job, decide

    def timeline(s: dict[str, Any]) -> None:
        s["tl"] = build_timeline(result)
        s["ev"] = _this_job(s["tl"].events, s["tl"].job_id)
        s["found"] = {}

    def rules(s: dict[str, Any]) -> None:
        s["rules"] = evaluate(s["ev"], expected_ranks=s["tl"].world_size)

    out: dict[str, Callable[[dict[str, Any]], Any]] = {"timeline": timeline, "rules": rules}
    for name, fn in ANALYSES.items():
        def run(s: dict[str, Any], fn: Any = fn, name: str = name) -> None:
            s["found"][name] = fn(s["ev"], s["tl"].world_size)
        out[f"a:{name}"] = run

    def findings(s: dict[str, Any]) -> list[Any]:
        return s["rules"] + [f for name in ANALYSES for f in s["found"][name]]

    def features(s: dict[str, Any]) -> None:
        s["features"] = extract(s["tl"], findings(s))

    def predict(s: dict[str, Any]) -> None:
        from crashscope.schema import CAUSES

        model = default_model()
        probs = model.predict_proba(s["features"])
        probs = {c: round(float(p), 4) for c, p in probs.items() if c in CAUSES}
        s["clf"] = {"model": model.version, "probabilities": dict(sorted(probs.items(), key=lambda kv: -kv[1]))}

    def verdict(s: dict[str, Any]) -> None:
        s["verdict"] = decide(findings(s), s["tl"], classifier=s["clf"], missing=missing_data(s["tl"]))

    def report(s: dict[str, Any]) -> None:
        s["report"] = build_report(result, s["tl"], s["verdict"], findings(s), events=s["ev"], root=root, warnings=[], finding_warnings=[])

    def as_json(s: dict[str, Any]) -> None:
        s["json"] = json.dumps(s["report"].to_dict())

    out.update(features=features, predict=predict, decide=verdict, report=report, json=as_json)
    return out


def bench(name: str, job: Path, result: Any, repeat: int) -> dict[str, Any]:
    from crashscope.classify.model import default_model
    from crashscope.engine.evaluate import default_rules

    default_rules(), default_model()  # loaded once per process: not an analysis cost
    steps = stages(result, job)
    cpu: dict[str, list[float]] = {k: [] for k in steps}
    wall: dict[str, list[float]] = {k: [] for k in steps}
    verdicts = set()
    import crashscope.timeline as timeline_module

    for _ in range(repeat):
        # decoded attrs are reused within one analysis, not across runs of the benchmark
        getattr(timeline_module, "_DECODED", []).clear()
        state: dict[str, Any] = {}
        for k, fn in steps.items():
            c, w = time.process_time(), time.perf_counter()
            fn(state)
            cpu[k].append(time.process_time() - c)
            wall[k].append(time.perf_counter() - w)
        d = state["report"].to_dict()
        verdicts.add(json.dumps([d.get("cause"), d.get("confidence"), d.get("culprit")], sort_keys=True, default=str))
    tl = state["tl"]
    row = {
        "job": str(job), "events": int(result.events.height), "timeline_events": int(tl.events.height),
        "world_size": tl.world_size, "hosts": len(tl.hosts),
        "cpu": {k: min(v) for k, v in cpu.items()}, "wall": {k: min(v) for k, v in wall.items()},
        "report": json.loads(next(iter(verdicts))), "same_report_every_run": len(verdicts) == 1,
    }
    row["cpu"]["total"] = sum(row["cpu"].values())
    row["wall"]["total"] = sum(row["wall"].values())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1024,4096,16384", help="comma-separated rank counts (multiples of 8)")
    ap.add_argument("--job", type=Path, action="append", default=[], help="also an existing job directory (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/cs-analysis-bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reingest", action="store_true", help="ingest again instead of reusing the pickled ingest results")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    jobs: list[tuple[str, Path, Path]] = []
    for n in [int(x) for x in args.ranks.split(",") if x.strip()]:
        job = make_job(args.out, n)
        jobs.append((f"{n} ranks", job, args.out / f"job_{n}.ingest.pkl"))
    for j in args.job:
        jobs.append((j.name, j, args.out / f"{j.resolve().name}.ingest.pkl"))

    rows = {}
    for name, job, cache in jobs:
        result = load(job, cache, args.reingest)
        rows[name] = bench(name, job, result, args.repeat)

    import os

    names = list(rows)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; min of {args.repeat} runs; CPU seconds (wall in brackets)")
    print(f"{'':<26}" + "".join(f"{n:>22}" for n in names))
    print(f"{'events (timeline)':<26}" + "".join(f"{rows[n]['events']:>12} ({rows[n]['timeline_events']:>7})" for n in names))
    for k in rows[names[0]]["cpu"]:
        print(f"{k:<26}" + "".join(f"{rows[n]['cpu'][k]:>12.3f} ({rows[n]['wall'][k]:>7.3f})" for n in names))
    for n in names:
        r = rows[n]
        print(f"{n}: cause {r['report'][0]} confidence {r['report'][1]}; same report every run: {r['same_report_every_run']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
