"""The bulk scan of small files against the plain per-file scan, same job, one process.

Usage:
    python benchmarks/ingest_bench.py --sizes 0.3 --out /tmp/cs-bench-small   # makes the job
    python benchmarks/bulk_scan_bench.py /tmp/cs-bench-small/job_0.3GB

Prints wall and CPU seconds of ``ingest(workers=1)`` for each path (plain first, then bulk,
twice each) and checks both give the same number of events.

    python benchmarks/bulk_scan_bench.py --passes /tmp/cs-bench/job_2GB --files 128 --pass-mib 16,32

times ``_bulk_hits`` alone (one polars thread, CPU seconds, min of 5) over the job's
``logs/*.log`` files cut into passes of each size, with the same hits per file checked
across sizes: the number behind PASS_BYTES.

    python benchmarks/bulk_scan_bench.py --literals

prints, for each top-level branch of each line source's prefilter, a set of literals one
of which every match contains (from the pattern's parse tree), and flags the branches for
which a literal pre-scan over whole blocks (Aho-Corasick / the regex crate's literal
prefilter) would gain nothing: no literal at all, or a literal that NCCL's INFO chatter
(``crashscope.ingest.CHATTER``) itself contains, so every chatter line is a candidate.
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


_MAX_SET = 64  # literal sets larger than this are not expanded


def _exact(items: list) -> set[str] | None:  # type: ignore[type-arg]
    """The finite set of strings a parsed subpattern matches, or None."""
    import re._constants as C  # type: ignore[import-not-found]

    acc = {""}
    for op, av in items:
        if op is C.LITERAL:
            alts: set[str] | None = {chr(av)}
        elif op is C.IN:
            chars: set[str] = set()
            for iop, iav in av:
                if iop is C.LITERAL:
                    chars.add(chr(iav))
                elif iop is C.RANGE and iav[1] - iav[0] <= 10:
                    chars.update(chr(c) for c in range(iav[0], iav[1] + 1))
                else:
                    return None
            alts = chars
        elif op is C.SUBPATTERN:
            alts = _exact(list(av[3]))
        elif op is C.BRANCH:
            alts = set()
            for b in av[1]:
                e = _exact(list(b))
                if e is None:
                    return None
                alts |= e
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] == av[1] and av[0] <= 32:
            e = _exact(list(av[2]))
            if e is None or len(e) > 1:
                return None
            alts = {next(iter(e)) * av[0]}
        elif op is C.AT:
            alts = {""}
        else:
            return None
        if alts is None:
            return None
        acc = {a + b for a in acc for b in alts}
        if len(acc) > _MAX_SET:
            return None
    return acc


def required_literals(items: list) -> set[str]:  # type: ignore[type-arg]
    """Literals one of which every match of the parsed pattern contains (empty: none known)."""
    import re._constants as C  # type: ignore[import-not-found]

    best: set[str] = set()

    def consider(c: set[str]) -> None:
        nonlocal best
        if c and all(c) and (min(map(len, c)), -len(c)) > ((min(map(len, best)), -len(best)) if best else (0, 0)):
            best = c

    run = {""}
    for op, av in items:
        e = _exact([(op, av)])
        if e is not None and "" not in e and len({a + b for a in run for b in e}) <= _MAX_SET:
            run = {a + b for a in run for b in e}
            consider(run)
            continue
        if e == {""}:
            continue  # zero-width: the run goes on
        run = {""}
        if op is C.SUBPATTERN:
            consider(required_literals(list(av[3])))
        elif op is C.BRANCH:
            parts = [required_literals(list(b)) for b in av[1]]
            if all(parts):
                consider(set().union(*parts))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
            consider(required_literals(list(av[2])))
    return best


def literals_report() -> None:
    import re._constants as C  # type: ignore[import-not-found]
    import re._parser as P  # type: ignore[import-not-found]

    from crashscope.sources import LINE_SOURCES

    for src in LINE_SOURCES:
        tree = list(P.parse(src.prefilter))
        while len(tree) == 1 and tree[0][0] is C.SUBPATTERN:
            tree = list(tree[0][1][3])
        branches = [list(b) for b in tree[0][1][1]] if len(tree) == 1 and tree[0][0] is C.BRANCH else [tree]
        useless = []
        for i, b in enumerate(branches):
            lits = required_literals(b)
            in_chatter = sorted(x for x in lits if any(x in c for c in ingest_mod.CHATTER))
            if not lits or in_chatter:
                useless.append(f"    branch {i}: " + ("no literal" if not lits else f"literals {sorted(lits)[:8]} occur in the chatter ({in_chatter[:3]})"))
        print(f"{src.name}: {len(branches)} branches, {len(useless)} without a literal the chatter lacks")
        print("\n".join(useless))


def passes_report(job: str, files: int, sizes_mib: list[int]) -> None:
    import os
    from pathlib import Path

    os.environ["POLARS_MAX_THREADS"] = "1"  # (read when polars first starts its pool)
    paths = sorted(p for p in (Path(job) / "logs").glob("*.log") if 0 < p.stat().st_size <= ingest_mod.SMALL_FILE_BYTES)[:files]

    def cut(limit: int) -> list[tuple[memoryview, list[tuple[int, int]]]]:
        out, cur, size = [], [], 0

        def push() -> None:
            data = bytearray()
            spans = []
            for q in cur:
                b = q.read_bytes()
                spans.append((len(data), len(b)))
                data += b if b.endswith(b"\n") else b + b"\n"
            out.append((memoryview(data), spans))

        for q in paths:
            n = q.stat().st_size
            if cur and size + n + 1 > limit:
                push()
                cur, size = [], 0
            cur.append(q)
            size += n + 1
        if cur:
            push()
        return out

    sets = {m: cut(m * 1024 * 1024) for m in sizes_mib}
    hits = {m: [h for mv, spans in bufs for h in ingest_mod._bulk_hits(mv, spans)] for m, bufs in sets.items()}
    first = next(iter(hits.values()))
    for m, h in hits.items():
        if [(x or (None,))[1:] for x in h] != [(x or (None,))[1:] for x in first] or any(
            (a is None) != (b is None) or (a is not None and b is not None and not a[0].equals(b[0])) for a, b in zip(h, first)
        ):
            sys.exit(f"passes of {m} MiB gave other hits")
    mb = sum(q.stat().st_size for q in paths) / 1e6
    best = {m: float("inf") for m in sets}
    for _ in range(5):
        for m, bufs in sets.items():
            c = time.process_time()
            for mv, spans in bufs:
                ingest_mod._bulk_hits(mv, spans)
            best[m] = min(best[m], time.process_time() - c)
    for m in sets:
        print(f"passes of {m:3d} MiB: {len(sets[m]):4d} passes, {best[m]:.3f} CPU s for {mb:.0f} MB ({mb / best[m]:.0f} MB per CPU s)")


def main() -> None:
    if sys.argv[1:] == ["--literals"]:
        literals_report()
        return
    if sys.argv[1:2] == ["--passes"]:
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("--passes", required=True, help="a job directory with logs/*.log (the ingest benchmark's)")
        ap.add_argument("--files", type=int, default=128)
        ap.add_argument("--pass-mib", default="16,32")
        a = ap.parse_args()
        passes_report(a.passes, a.files, [int(x) for x in a.pass_mib.split(",")])
        return
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
