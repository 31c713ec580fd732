"""Cost per file: time and peak memory of many small files, so the fixed costs show.

For each file count (default 1,000, 10,000 and 40,000) a job of that many small rank logs
(plus one node's files per 8 ranks, like a real per-rank layout) is made from a simulated
job's own files, then, each count in a fresh process (peak RSS is per process):

* the stages of the ingest, one after another in one process: the directory walk
  (``scan``), opening each file (``open_ref``: the safe open, no read), reading it whole,
  and the whole ingest (``ingest(workers=1)``) with where its time went inside (the bulk
  scan, sniffing and parsing, building the events frame);
* ``analyze()`` end to end with its stage seconds;
* peak RSS of that process.

Usage:
    python benchmarks/file_cost_bench.py --counts 1000 10000 40000 --out /tmp/cs-bench-files

Prints one row per count: microseconds per file for each stage and the peak RSS. The
generated jobs stay in --out (``--reuse``); they are never inside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

NODE_FILES = ("dmesg.txt", "nvidia-smi-q.txt", "gpu-telemetry.csv", "pip-freeze.txt", "proc-driver-nvidia-version.txt")


def make_job(out: Path, count: int, reuse: bool) -> Path:
    """``count`` files: rank logs and, per 8 ranks, a node directory with NODE_FILES."""
    from crashscope.simulate import simulate

    job = out / f"files_{count}"
    done = out / f"files_{count}.done"
    if reuse and done.exists():
        return job
    if job.exists():
        shutil.rmtree(job)
    tmpl = out / "template"
    if not tmpl.exists():
        simulate(tmpl, cause="fabric_timeout", nodes=2, gpus_per_node=8, seed=3, nccl_info_volume=8, layout="per_rank")
    ranks = [p.read_bytes() for p in sorted((tmpl / "logs").glob("rank*.log"))]
    node = {f: (tmpl / "nodes" / "node001" / f).read_bytes() for f in NODE_FILES if (tmpl / "nodes" / "node001" / f).exists()}
    per_node = 8 + len(node)
    nodes = max(1, count // per_node)
    (job / "logs").mkdir(parents=True)
    made = 0
    for n in range(nodes):
        d = job / "nodes" / f"node{n + 1:05d}"
        d.mkdir(parents=True)
        for f, data in node.items():
            (d / f).write_bytes(data)
            made += 1
        for r in range(n * 8, n * 8 + 8):
            (job / "logs" / f"rank{r}.log").write_bytes(ranks[r % len(ranks)])
            made += 1
    r = nodes * 8
    while made < count:  # the remainder as rank logs
        (job / "logs" / f"rank{r}.log").write_bytes(ranks[r % len(ranks)])
        r += 1
        made += 1
    done.write_text(str(made))
    return job


def measure(job: Path) -> dict:
    """The stages on ``job`` in this process (run it fresh for a clean peak RSS), in CPU
    seconds of this process (``time.process_time``: a shared machine's load inflates wall
    times, CPU much less); ingest and analyze also in wall seconds."""
    import crashscope.ingest as ing
    from crashscope.pipeline import analyze
    from crashscope.bundle import Skipped, open_ref, scan

    out: dict = {}
    clock = time.process_time
    t = clock()
    refs = [r for r in scan(job) if not isinstance(r, Skipped)]
    out["walk_s"] = clock() - t
    out["files"] = len(refs)
    out["bytes"] = sum(r.size for r in refs)
    t = clock()
    for ref in refs:
        for _e in open_ref(ref):
            pass
    out["open_s"] = clock() - t
    t = clock()
    mv = memoryview(bytearray(max((r.size for r in refs), default=0) + 1))
    for ref in refs:
        for e in open_ref(ref):
            if not isinstance(e, Skipped) and e.size is not None:
                ing._read_into(e.stream, mv, 0, e.size)
    out["open_read_s"] = clock() - t

    spent: dict[str, float] = {}

    def timed(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*a, **k):  # type: ignore[no-untyped-def]
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + clock() - t0

        return wrapper

    saved = {n: getattr(ing, n) for n in ("_bulk_hits", "_read_entry", "frame_from_rows", "_read_whole", "_parse_deferred", "_scan_lines")}
    ing._bulk_hits = timed("bulk_scan_s", saved["_bulk_hits"])
    ing._read_entry = timed("sniff_and_parse_s", saved["_read_entry"])  # includes _read_whole, _scan_lines, unbatched parse_file
    # whole files: reading them, and the batched parse_files of the batchable sources (after each batch)
    ing._read_whole = timed("whole_file_sources_s", saved["_read_whole"])
    ing._parse_deferred = timed("whole_file_sources_s", saved["_parse_deferred"])
    ing._scan_lines = timed("line_sources_s", saved["_scan_lines"])
    ing.frame_from_rows = timed("events_frame_s", saved["frame_from_rows"])
    try:
        t, w = clock(), time.perf_counter()
        res = ing.ingest(job, workers=1)
        out["ingest_s"], out["ingest_wall_s"] = clock() - t, time.perf_counter() - w
    finally:
        for n, f in saved.items():
            setattr(ing, n, f)
    out.update(spent)
    out["events"] = res.events.height
    t, w = clock(), time.perf_counter()
    report, _, _ = analyze(job)
    out["analyze_s"], out["analyze_wall_s"] = clock() - t, time.perf_counter() - w
    out["analyze_stages"] = report.analysis.get("stage_seconds")
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["cause"] = report.cause
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", nargs="+", type=int, default=[1000, 10000, 40000])
    ap.add_argument("--out", type=Path, default=Path("/tmp/cs-bench-files"))
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.counts:
        job = make_job(args.out, n, args.reuse)
        os.sync()
        proc = subprocess.run([sys.executable, __file__, "--measure", str(job)], capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"measuring {job} failed:\n{proc.stderr[-4000:]}")
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["count"] = n
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    stages = ("walk_s", "open_s", "open_read_s", "bulk_scan_s", "sniff_and_parse_s", "line_sources_s", "whole_file_sources_s", "events_frame_s", "ingest_s", "analyze_s", "ingest_wall_s", "analyze_wall_s")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; CPU microseconds per file (open_read includes open; sniff_and_parse includes both sources columns)")
    print(f"{'files':>7} {'MB':>7} " + " ".join(f"{s[:-2]:>12}" for s in stages) + f" {'peak RSS MB':>12} {'KB/file':>8}")
    for r in rows:
        cells = " ".join(f"{1e6 * r.get(s, 0.0) / r['files']:>12.0f}" for s in stages)
        print(f"{r['files']:>7} {r['bytes'] / 1e6:>7.1f} {cells} {r['peak_rss_mb']:>12.0f} {1024 * r['peak_rss_mb'] / r['files']:>8.1f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
