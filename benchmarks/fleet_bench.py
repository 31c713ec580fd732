"""Fleet history speed with a large history: the time to record one report (with its history
lookup) and to list the repeat offenders.

    python benchmarks/fleet_bench.py                       # SQLite in a temporary directory
    python benchmarks/fleet_bench.py --db postgresql://crashscope@127.0.0.1:5433/bench

The history is filled with --jobs reports (default 10,000): the fixture jobs' analyses
(tests/golden/reports/*.json) with their node names moved to random nodes of a --nodes
cluster and end times spread over --days, inserted in one transaction through the same row
builders as :func:`crashscope.fleet.record`. Then, --repeat times each:

* record (open): ``crashscope.fleet.record(report, db=...)``: engine, transaction, history
  lookup, upsert; what the epilog pays per job once Python and crashscope are imported;
* record (open db): ``FleetDB.record`` on an open database;
* offenders: ``FleetDB.offenders(min_jobs=3, days=7)`` and ``(min_jobs=2, days=30)``;

and once, a fresh process: ``crashscope fleet add one.json`` (imports included).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crashscope import fleet  # noqa: E402
from crashscope.report.model import Report  # noqa: E402


def base_reports() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "tests" / "golden" / "reports").glob("*.json"))]


def mutated(base: dict, job_id: str, end: datetime, rng: random.Random, nodes: int) -> Report:
    text = json.dumps(base)
    for old in ("node001", "node002", "node003", "node004"):
        text = text.replace(old, f"n{rng.randrange(nodes):05d}")
    d = json.loads(text)
    d["job"] = dict(d["job"], id=job_id, end_time=end.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Report.from_dict(d)


def fill(url: str, n: int, nodes: int, days: float, rng: random.Random) -> float:
    from sqlalchemy import insert

    bases = base_reports()
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    jobs_rows, imp_rows = [], []
    for i in range(n):
        r = mutated(rng.choice(bases), f"h{i}", now - timedelta(days=rng.uniform(0, days)), rng, nodes)
        row = fleet.job_row(r, report_path="", now=now)
        jobs_rows.append(row)
        imp_rows += [{"cluster": "", "job_id": row["job_id"], "kind": c.kind, "key": c.key, "label": c.label, "node": c.node,
                      "cause": row["cause"], "xid": c.xid, "end_time": row["end_time"]} for c in fleet.culprits_of(r)]
    _, _, jobs, imp = fleet.schema()
    t = time.perf_counter()
    with fleet.FleetDB(url) as db, db._write() as conn:
        conn.execute(insert(jobs), jobs_rows)
        conn.execute(insert(imp), imp_rows)
    return time.perf_counter() - t


def ms(xs: list[float], cpu: list[float] | None = None) -> str:
    xs = sorted(xs)
    text = f"median {statistics.median(xs) * 1000:.1f} ms, p95 {xs[int(0.95 * (len(xs) - 1))] * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms"
    if cpu:  # this process's CPU time: what the numbers are without other load on the machine
        text += f" (client CPU median {statistics.median(cpu) * 1000:.1f} ms)"
    return text


class Timer:
    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def __enter__(self) -> Timer:
        self.t, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall.append(time.perf_counter() - self.t)
        self.cpu.append(time.process_time() - self.c)

    def __str__(self) -> str:
        return ms(self.wall, self.cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", help="a SQLite path or postgresql:// URL (default: a new SQLite file in a temporary directory)")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--days", type=float, default=90.0)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="fleet-bench-")
    url = fleet.fleet_url(db=a.db or str(Path(tmp) / "fleet.sqlite"))
    rng = random.Random(a.seed)
    fill_s = fill(url, a.jobs, a.nodes, a.days, rng)
    with fleet.FleetDB(url) as db:
        counts = db.counts()
    print(f"history: {counts['jobs']} jobs, {counts['implicated']} culprit rows ({fleet.shown_url(url)}); bulk insert {fill_s:.2f} s")

    bases = [b for b in base_reports() if b["cause"] in fleet.INFRA_CAUSES]
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    cold, warm, off7, off30 = Timer(), Timer(), Timer(), Timer()
    hist_lens = []
    for i in range(a.repeat):
        r = mutated(rng.choice(bases), f"new{i}", now, rng, a.nodes)
        with cold:
            h = fleet.record(r, db=url, report_path="")
        hist_lens.append(sum(len(x["jobs"]) for x in h))
    with fleet.FleetDB(url) as db:
        for i in range(a.repeat):
            r = mutated(rng.choice(bases), f"warm{i}", now, rng, a.nodes)
            with warm:
                db.record(r, report_path="")
        for _ in range(a.repeat):
            with off7:
                o7 = db.offenders(min_jobs=3, days=7)
            with off30:
                o30 = db.offenders(min_jobs=2, days=30)
    print(f"record (open + record + close), {a.repeat} reports: {cold}; earlier jobs found per report: median {statistics.median(hist_lens):.0f}")
    print(f"record (database open), {a.repeat} reports: {warm}")
    print(f"offenders --min-jobs 3 --days 7 ({len(o7)} rows): {off7}")
    print(f"offenders --min-jobs 2 --days 30 ({len(o30)} rows): {off30}")
    one = Path(tmp) / "one.json"
    one.write_text(json.dumps(mutated(rng.choice(bases), "proc", now, rng, a.nodes).to_dict()))
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "crashscope", "fleet", "add", str(one), "--db", a.db or url.removeprefix("sqlite:///")],
                   check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    print(f"fresh process `crashscope fleet add one.json`: {wall:.2f} s (CPU {cpu:.2f} s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
