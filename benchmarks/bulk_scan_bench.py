"""The bulk scan of small files against the plain per-file scan, same job, one process.

Usage:
    python benchmarks/ingest_bench.py --sizes 0.3 --out /tmp/cs-bench-small   # makes the job
    python benchmarks/bulk_scan_bench.py /tmp/cs-bench-small/job_0.3GB

Prints wall and CPU seconds of ``ingest(workers=1)`` for each path (plain first, then bulk,
twice each) and checks both give the same number of events.
"""

from __future__ import annotations

import sys
import time

import crashscope.ingest as ingest_mod
from crashscope.sources.base import ParseOptions


def run(job: str, plain: bool) -> tuple[float, float, int]:
    saved = ingest_mod.SMALL_FILE_BYTES
    ingest_mod.SMALL_FILE_BYTES = 0 if plain else saved
    try:
        t, c = time.perf_counter(), time.process_time()
        r = ingest_mod.ingest(job, ParseOptions(), workers=1)
        return time.perf_counter() - t, time.process_time() - c, r.events.height
    finally:
        ingest_mod.SMALL_FILE_BYTES = saved


def main() -> None:
    job = sys.argv[1]
    counts = set()
    for _ in range(2):
        for plain in (True, False):
            wall, cpu, n = run(job, plain)
            counts.add(n)
            print(f"{'plain' if plain else 'bulk ':5}  wall {wall:6.2f} s  cpu {cpu:6.2f} s  events {n}")
    if len(counts) != 1:
        sys.exit("the two paths gave different event counts")


if __name__ == "__main__":
    main()
