"""Shard-merge vs direct analysis on a job from the ingest benchmark (per-rank layout:
``logs/rank<r>.log``, ``nodes/<node>/``, ``slurm/``, ``slurm-<id>.out``).

Each node's shard = its ``nodes/<node>/`` files + its rank logs (rank r on the node r //
ranks-per-node, in node order) + its launcher log (``torchrun.<node>.log``); the job shard =
the job's stdout + ``slurm/``. Shards are built ``--jobs`` at a time here (on a cluster each
node writes its own, in parallel); then the merge = ``analyze(<spool>)`` versus
``analyze(<job dir>)`` (``--no-direct`` skips the direct one).

Usage (jobs from benchmarks/ingest_bench.py, kept in its --out folder):
    python benchmarks/ingest_bench.py --sizes 2 --out /tmp/cs-bench
    python benchmarks/shard_bench.py /tmp/cs-bench/job_2GB /tmp/cs-shard-bench --ranks 1024
    python benchmarks/ingest_bench.py --sizes 8 --nodes 2048 --out /tmp/cs-bench16k
    python benchmarks/shard_bench.py /tmp/cs-bench16k/job_8GB_16384r /tmp/cs-shard16k --ranks 16384 --jobs 2
    # the same 699,188 events without the NCCL INFO chatter (225 MB, made in a few minutes):
    python benchmarks/shard_bench.py /tmp/cs-job16k /tmp/cs-shard16k --ranks 16384 --jobs 2 --no-direct --simulate

Prints JSON: shard build seconds per node (p50, max, sum), spool bytes, merge seconds (wall
and CPU) and stages, the CPU seconds of each step of the merge (reading the spool, the rest
of the ingest, the timeline, the findings, the classifier, the report) and of what the
epilog's merge does after ``analyze`` (the secret filter, the JSON/Markdown/HTML views), its
peak RSS growth, whether the spool read in one pass equals its shards read one by one
(``read_shard``; ``--no-check`` skips it), direct seconds, and whether both name the same
cause and nodes. On a shared machine the CPU seconds are the comparable numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from crashscope.shards import SUFFIX

JOB_ID = "1621911"


def build_shard(args: tuple[str, str, str]) -> float:
    """Ingest one node's (or the job's) hard-linked files and write its shard: seconds."""
    from crashscope.ingest import ingest
    from crashscope.shards import file_records, write_shard

    src, spool, name = args
    t0 = time.perf_counter()
    res = ingest(src, workers=1)
    ev = res.events if name == "_job" else res.events.with_columns(pl.col("host").fill_null(name))
    write_shard(Path(spool), name, ev, node=None if name == "_job" else name, job_id=JOB_ID,
                files=file_records(res.files), warnings=res.warnings, seconds=0)
    return time.perf_counter() - t0


def _time_steps(steps: dict[str, list[float]]):  # type: ignore[no-untyped-def]
    """Wrap the merge's steps to add their (wall, CPU) seconds to ``steps``; gives the undo.
    Reading the spool is inside the ingest: "ingest" is the rest of it."""
    import crashscope.ingest
    import crashscope.pipeline
    import crashscope.report.build
    import crashscope.shards
    import crashscope.verdict

    where = [(crashscope.shards, "read_spool", "read_spool"), (crashscope.pipeline, "ingest", "ingest"),
             (crashscope.pipeline, "build_timeline", "timeline"), (crashscope.pipeline, "find", "findings"),
             (crashscope.verdict, "_classifier", "classifier"), (crashscope.report.build, "build_report", "report")]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in where]

    def timed(fn, label):  # type: ignore[no-untyped-def]
        def run(*a, **kw):  # type: ignore[no-untyped-def]
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                acc = steps.setdefault(label, [0.0, 0.0])
                acc[0] += time.perf_counter() - w
                acc[1] += time.process_time() - c
        return run

    for (mod, name, label), (_, _, fn) in zip(where, saved):
        setattr(mod, name, timed(fn, label))

    def undo() -> None:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        if "read_spool" in steps and "ingest" in steps:
            steps["ingest"] = [a - b for a, b in zip(steps["ingest"], steps["read_spool"])]
    return undo


def _epilog_after(report) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """CPU seconds of what the epilog's merge does with the report after analyze."""
    from crashscope.epilog.merge import render_all
    from crashscope.epilog.secrets import scrub_report

    c = time.process_time()
    scrubbed = scrub_report(report)
    c1 = time.process_time()
    render_all(scrubbed)
    return {"secret_filter": round(c1 - c, 2), "views": round(time.process_time() - c1, 2)}


def _same_as_shards_alone(spool: Path) -> bool:
    """The spool read in one pass gives what its shards read one by one give."""
    from dataclasses import astuple

    from crashscope.shards import read_shard, read_spool, shard_dirs

    sp = read_spool(spool)
    alone = [read_shard(d) for d in shard_dirs(spool)]
    want = pl.concat([e for e, _, _ in alone if e.height]) if any(e.height for e, _, _ in alone) else None
    files = [f["file"] for _, m, _ in alone for f in (m.get("coverage") or {}).get("files") or [] if isinstance(f, dict)]
    return (sp is not None and want is not None and sp.events.equals(want) and sp.warnings == [w for _, _, ws in alone for w in ws]
            and [astuple(f)[0] for f in sp.files] == files)


def link_per_node(job: Path, per: Path, per_node: int) -> list[str]:
    nodes = sorted(os.listdir(job / "nodes"))
    launchers = [f for f in os.listdir(job / "logs") if not f.startswith("rank")]
    for i, n in enumerate(nodes):
        d = per / n
        (d / "nodes" / n).mkdir(parents=True)
        (d / "logs").mkdir()
        for f in os.listdir(job / "nodes" / n):
            os.link(job / "nodes" / n / f, d / "nodes" / n / f)
        for r in range(i * per_node, i * per_node + per_node):
            if (job / "logs" / f"rank{r}.log").exists():
                os.link(job / "logs" / f"rank{r}.log", d / "logs" / f"rank{r}.log")
        for f in launchers:  # the node's launcher log (torchrun.<node>.log)
            if f".{n}." in f:
                os.link(job / "logs" / f, d / "logs" / f)
    jd = per / "_job"
    (jd / "slurm").mkdir(parents=True)
    for f in os.listdir(job / "slurm"):
        os.link(job / "slurm" / f, jd / "slurm" / f)
    for f in os.listdir(job):
        if f.startswith("slurm-"):
            os.link(job / f, jd / f)
    return nodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", type=Path)
    ap.add_argument("work", type=Path, help="scratch folder (emptied first): per-node links and the spool")
    ap.add_argument("--ranks", type=int, help="ranks of the job (default: its logs/rank*.log files)")
    ap.add_argument("--jobs", type=int, default=1, help="shards built at a time")
    ap.add_argument("--no-direct", action="store_true", help="skip analyze(<job dir>)")
    ap.add_argument("--resume", action="store_true", help="keep the shards already in <work> (an interrupted run)")
    ap.add_argument("--no-check", action="store_true", help="skip comparing the spool read with its shards read one by one")
    ap.add_argument("--simulate", action="store_true", help="make <job> first where it does not exist: the simulator's fabric_timeout job, "
                    "--ranks / 8 nodes, no NCCL INFO chatter (the events of ingest_bench's job of that size)")
    args = ap.parse_args()
    from crashscope.pipeline import analyze

    job, work = args.job, args.work
    if args.simulate and not job.exists():
        from crashscope.simulate import simulate

        if not args.ranks or args.ranks % 8:
            raise SystemExit("--simulate needs --ranks, a multiple of 8")
        simulate(job, cause="fabric_timeout", nodes=args.ranks // 8, gpus_per_node=8, seed=7, nccl_info_volume=0, layout="per_rank")
    per, spool = work / "pernode", work / "spool" / JOB_ID
    resume = args.resume and per.exists()
    if not resume:
        shutil.rmtree(work, ignore_errors=True)
    ranks = args.ranks or sum(1 for f in os.listdir(job / "logs") if f.startswith("rank"))
    n_nodes = len(os.listdir(job / "nodes"))
    if ranks % n_nodes:
        raise SystemExit(f"{ranks} ranks do not spread evenly over {n_nodes} nodes")
    nodes = sorted(os.listdir(job / "nodes")) if resume else link_per_node(job, per, ranks // n_nodes)
    names = nodes + ["_job"]
    tasks = [(str(per / n), str(spool), n) for n in names if not (resume and (spool / f"{n}{SUFFIX}").exists())]
    t0 = time.perf_counter()
    if args.jobs > 1:
        import multiprocessing

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            times = list(pool.map(build_shard, tasks, chunksize=16))
    else:
        times = [build_shard(t) for t in tasks]
    build_wall = time.perf_counter() - t0
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steps: dict[str, list[float]] = {}
    undo = _time_steps(steps)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        merged, _, mres = analyze(spool)
    finally:
        undo()
    t_merge, c_merge = time.perf_counter() - t0, time.process_time() - c0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    after = _epilog_after(merged)
    out = {
        "ranks": ranks, "nodes": len(nodes), "load_avg_1m": os.getloadavg()[0],
        "shard_s": {"p50": round(statistics.median(times[:-1]), 3), "max": round(max(times[:-1]), 2), "sum": round(sum(times), 1),
                    "job_shard": round(times[-1], 2), "wall_all": round(build_wall, 1), "jobs": args.jobs, "built_here": len(times)}
        if len(times) > 1 else {"built_here": len(times)},
        "spool_bytes": sum(f.stat().st_size for f in spool.rglob("*") if f.is_file()),
        "merge_s": round(t_merge, 2), "merge_cpu_s": round(c_merge, 2), "merge_peak_rss_mb": round(rss1 / 1024, 1),
        "merge_rss_growth_mb": round((rss1 - rss0) / 1024, 1), "merge_stages": merged.analysis["stage_seconds"],
        "merge_steps_cpu_s": {k: round(v[1], 2) for k, v in steps.items()}, "epilog_after_analyze_cpu_s": after,
        "events": [mres.events.height],
    }
    if not args.no_check:
        out["spool_equals_shards_alone"] = _same_as_shards_alone(spool)
    if not args.no_direct:
        t0 = time.perf_counter()
        direct, _, dres = analyze(job)
        out.update({
            "direct_s": round(time.perf_counter() - t0, 2), "direct_stages": direct.analysis["stage_seconds"],
            "cause": [merged.cause, direct.cause], "confidence": [merged.confidence, direct.confidence],
            "events": [mres.events.height, dres.events.height], "implicated_equal": merged.implicated == direct.implicated,
        })
    else:
        out["cause"] = [merged.cause]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
