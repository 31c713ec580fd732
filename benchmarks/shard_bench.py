"""Shard-merge vs direct analysis on the ingest benchmark's 1,024-rank job (128 nodes x 8 ranks).
Each node's shard = its nodes/<node>/ files + its 8 rank logs (rank r on node r//8+1), built one
node after another here (on a cluster they run in parallel, one per node); the job shard = the
job's stdout + slurm/; then the merge = analyze(<spool>) versus analyze(<job dir>).

Usage (the job from benchmarks/ingest_bench.py, kept in its --out folder):
    python benchmarks/ingest_bench.py --sizes 2 --out /tmp/cs-bench
    python benchmarks/shard_bench.py /tmp/cs-bench/job_2GB /tmp/cs-shard-bench
"""
import os, shutil, statistics, sys, time, json
from pathlib import Path
import polars as pl
from crashscope.ingest import ingest
from crashscope.shards import write_shard, file_records
from crashscope.analyze import analyze

def main():
    job = Path(sys.argv[1]); work = Path(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    per, spool = work / "pernode", work / "spool" / "1621911"
    nodes = sorted(os.listdir(job / "nodes"))
    for i, n in enumerate(nodes):
        d = per / n
        (d / "nodes" / n).mkdir(parents=True); (d / "logs").mkdir()
        for f in os.listdir(job / "nodes" / n):
            os.link(job / "nodes" / n / f, d / "nodes" / n / f)
        for r in range(i * 8, i * 8 + 8):
            os.link(job / "logs" / f"rank{r}.log", d / "logs" / f"rank{r}.log")
        for f in os.listdir(job / "logs"):  # the node's launcher log (torchrun.<node>.log)
            if f".{n}." in f:
                os.link(job / "logs" / f, d / "logs" / f)
    jd = per / "_job"; (jd / "slurm").mkdir(parents=True)
    for f in os.listdir(job / "slurm"):
        os.link(job / "slurm" / f, jd / "slurm" / f)
    for f in os.listdir(job):
        if f.startswith("slurm-"):
            os.link(job / f, jd / f)
    times = []
    for name in nodes + ["_job"]:
        t0 = time.perf_counter()
        res = ingest(per / name, workers=1)
        ev = res.events if name == "_job" else res.events.with_columns(pl.col("host").fill_null(name))
        write_shard(spool, name, ev, node=None if name == "_job" else name, job_id="1621911", files=file_records(res.files), warnings=res.warnings, seconds=0)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); merged, _, mres = analyze(spool); t_merge = time.perf_counter() - t0
    t0 = time.perf_counter(); direct, _, dres = analyze(job); t_direct = time.perf_counter() - t0
    out = {"nodes": len(nodes), "shard_s": {"p50": round(statistics.median(times[:-1]), 2), "max": round(max(times[:-1]), 2), "sum": round(sum(times), 1), "job_shard": round(times[-1], 2)},
           "spool_bytes": sum(f.stat().st_size for f in spool.rglob("*") if f.is_file()),
           "merge_s": round(t_merge, 2), "merge_stages": merged.analysis["stage_seconds"], "direct_s": round(t_direct, 2), "direct_stages": direct.analysis["stage_seconds"],
           "cause": [merged.cause, direct.cause], "confidence": [merged.confidence, direct.confidence], "events": [mres.events.height, dres.events.height],
           "implicated_equal": merged.implicated == direct.implicated}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
