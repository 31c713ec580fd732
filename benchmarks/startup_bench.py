"""Start-up cost: ``crashscope analyze`` on a 10-file job end to end, and the import time.

Each measurement is a fresh process (what a user pays per run), repeated ``--repeat`` times;
the minimum and the median are printed, in wall seconds and in CPU seconds (user + system
of the child, from ``getrusage``: on a shared machine the load inflates wall times, CPU
much less). Rows:

* ``--help``: ``crashscope --help``;
* ``import``: CPU seconds of ``import crashscope.cli, crashscope.pipeline, crashscope.ingest``
  measured inside the child (``time.process_time``), i.e. the imports an analyze pays for
  before it reads a file;
* ``analyze``: ``crashscope analyze JOB -f json -o FILE`` on the small job that
  ``file_cost_bench.make_job`` makes for ``--files 10``: one node's 8 rank logs and its 4
  node files (12 files), from a simulated job;
* ``python``: ``python -c pass``, the interpreter's own start-up (in every row above).

Then where an analyze's CPU time goes: ``benchmarks/startup_breakdown.py`` runs the same
analyze ``--repeat`` times with timers on the imports, the regex compiles, the catalog and
rule loading, each pipeline stage and typer's option parsing (exclusive buckets; its
docstring says what each one holds); the median of each bucket is printed, largest first
(``--no-breakdown`` skips it). The catalogs and the shipped rules come from the user's
cache (``crashscope.datacache``) after the warm-up run; ``CRASHSCOPE_CACHE_DIR=off`` in the
environment measures the uncached cost.

Usage:
    python benchmarks/startup_bench.py --repeat 5 --out /tmp/cs-bench-startup

Run the same command before and after a change. Byte-compiled modules must be current
(``python -m compileall crashscope`` or one warm run without PYTHONDONTWRITEBYTECODE),
else every run recompiles the modules it imports, as no installed copy does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

IMPORTS = (
    "import time; t = time.process_time(); "
    "import crashscope.cli, crashscope.pipeline, crashscope.ingest; "
    "print(time.process_time() - t)"
)


def _child(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, stdout) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1, 2, 3):  # analyze exits non-zero when it names a cause
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("/tmp/cs-bench-startup"))
    ap.add_argument("--files", type=int, default=10, help="files in the job (default 10)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--root", type=Path, help="import crashscope from this folder instead (e.g. `git archive` of an older commit, for a before/after)")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the per-bucket breakdown of an analyze")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from file_cost_bench import make_job  # noqa: E402 - the same generator as the per-file bench

    args.out.mkdir(parents=True, exist_ok=True)
    job = make_job(args.out, args.files, reuse=True)
    exe = [sys.executable, "-m", "crashscope"]
    report = args.out / "report.json"
    # Children run outside the repository (so --root, on PYTHONPATH, wins over the editable
    # install) and may write .pyc files (the warm-up run brings them up to date).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.root:
        env["PYTHONPATH"] = str(args.root.resolve())

    def child(cmd: list[str]) -> tuple[float, float, str]:
        return _child(cmd, env, args.out)

    runs: dict[str, list[tuple[float, float]]] = {"--help": [], "import": [], "analyze": [], "python": []}
    child([*exe, "analyze", str(job), "-f", "json", "-o", str(report)])  # warm the page cache, the .pyc files and the data cache
    for _ in range(args.repeat):
        runs["--help"].append(child([*exe, "--help"])[:2])
        wall, _cpu, out = child([sys.executable, "-c", IMPORTS])
        runs["import"].append((wall, float(out.strip().splitlines()[-1])))
        runs["analyze"].append(child([*exe, "analyze", str(job), "-f", "json", "-o", str(report)])[:2])
        runs["python"].append(child([sys.executable, "-c", "pass"])[:2])
    breakdown: list[dict[str, Any]] = []
    if not args.no_breakdown:
        for _ in range(args.repeat):
            proc = subprocess.run([sys.executable, str(HERE / "startup_breakdown.py"), str(job), "-f", "json", "-o", str(report)],
                                  capture_output=True, text=True, env=env, cwd=args.out)
            breakdown.append(json.loads(proc.stderr.strip().splitlines()[-1]))
    files = sum(1 for p in job.rglob("*") if p.is_file())
    import_from = args.root or "the installed crashscope"
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.repeat} runs each; job {job} ({files} files); {import_from}")
    print(f"{'':>10} {'wall min':>9} {'wall med':>9} {'CPU min':>9} {'CPU med':>9}")
    rows: dict[str, Any] = {}
    for name, rs in runs.items():
        walls, cpus = [r[0] for r in rs], [r[1] for r in rs]
        rows[name] = {"wall_min": min(walls), "wall_median": statistics.median(walls), "cpu_min": min(cpus), "cpu_median": statistics.median(cpus)}
        r = rows[name]
        print(f"{name:>10} {r['wall_min']:>9.3f} {r['wall_median']:>9.3f} {r['cpu_min']:>9.3f} {r['cpu_median']:>9.3f}")
    print("(import: wall is the whole child process, CPU is the imports alone)")
    if breakdown:
        names = sorted({k for b in breakdown for k in b["buckets"]})
        med = {k: statistics.median(b["buckets"].get(k, 0.0) for b in breakdown) for k in names}
        total = statistics.median(b["total"] for b in breakdown)
        print(f"\nanalyze CPU by bucket (median of {len(breakdown)} runs; total {total:.3f} s after the interpreter's start-up):")
        shown = 0.0
        for k, v in sorted(med.items(), key=lambda kv: -kv[1]):
            if v >= 0.003:
                print(f"  {v:7.3f}  {k}")
                shown += v
        print(f"  {total - shown:7.3f}  (buckets under 3 ms, and the medians' rounding)")
        rows["breakdown"] = {"total": total, "buckets": med}
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
