"""The bulk scan of small files against the plain per-file scan, same job, one process.

Usage:
    python benchmarks/ingest_bench.py --sizes 0.3 --out /tmp/cs-bench-small   # makes the job
    python benchmarks/bulk_scan_bench.py /tmp/cs-bench-small/job_0.3GB

Prints wall and CPU seconds of ``ingest(workers=1)`` for each path (plain first, then bulk,
twice each) and checks both give the same number of events.

    python benchmarks/bulk_scan_bench.py --passes /tmp/cs-bench/job_2GB --files 128 --pass-mib 16,32

times ``_bulk_hits`` alone (one polars thread, CPU seconds, min of 5) over the job's
``logs/*.log`` files cut into passes of each size, with the same hits per file checked
across sizes: the number behind PASS_BYTES. ``--ways lines,csv`` times the line-reader
way of a pass against the CSV reader's (``ingest.LINES_PASS``), the same hits checked.

    python benchmarks/bulk_scan_bench.py --prescan /tmp/cs-bench/job_2GB 9

measures a literal pre-scan over chunks of lines (see ``prescan_report``), the idea that
would let only candidate chunks be split, against today's bulk pass.

    python benchmarks/bulk_scan_bench.py --literals

prints, for each top-level branch of each line source's prefilter, a set of literals one
of which every match contains (from the pattern's parse tree), and flags the branches for
which a literal pre-scan over whole blocks (Aho-Corasick / the regex crate's literal
prefilter) would gain nothing: no literal at all, or a literal that NCCL's INFO chatter
(``crashscope.ingest.CHATTER``) itself contains, so every chatter line is a candidate.
"""

from __future__ import annotations

import re
import sys
import time

import regex

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


def passes_report(job: str, files: int, sizes_mib: list[int], ways: list[str] | None = None) -> None:
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

    # (size, way): "lines" is the default (the line reader where a pass takes it), "csv"
    # every pass by the CSV reader (ingest.LINES_PASS off)
    sets = {(m, w): cut(m * 1024 * 1024) for m in sizes_mib for w in (ways or ["lines"])}

    def bulk(way: str, mv: memoryview, spans: list[tuple[int, int]]) -> list:  # type: ignore[type-arg]
        ingest_mod.LINES_PASS = way != "csv"
        try:
            return ingest_mod._bulk_hits(mv, spans)
        finally:
            ingest_mod.LINES_PASS = True

    hits = {k: [h for mv, spans in bufs for h in bulk(k[1], mv, spans)] for k, bufs in sets.items()}
    first = next(iter(hits.values()))
    for m, h in hits.items():
        if [(x or (None,))[1:] for x in h] != [(x or (None,))[1:] for x in first] or any(
            (a is None) != (b is None) or (a is not None and b is not None and not a[0].equals(b[0])) for a, b in zip(h, first)
        ):
            sys.exit(f"passes of {m[0]} MiB ({m[1]}) gave other hits")
    mb = sum(q.stat().st_size for q in paths) / 1e6
    best = {m: float("inf") for m in sets}
    for _ in range(5):
        for m, bufs in sets.items():
            c = time.process_time()
            for mv, spans in bufs:
                bulk(m[1], mv, spans)
            best[m] = min(best[m], time.process_time() - c)
    for m in sets:
        print(f"passes of {m[0]:3d} MiB, {m[1]:5s}: {len(sets[m]):4d} passes, {best[m]:.3f} CPU s for {mb:.0f} MB ({mb / best[m]:.0f} MB per CPU s)")


# -- --prescan: a literal pre-scan over chunks, measured (issue 13; not used by the ingest) --
# Cut a pass into chunks of whole lines and keep only the chunks holding one of a set of
# literals that every prefilter match contains, so that only their lines are split and
# matched. The set comes from the prefilters' parse trees: for each top-level branch, the
# strings one of which every match must contain, chosen to avoid what NCCL's INFO chatter
# holds; small classes (\d, \s, [IWEF]) spelt out in ASCII (a chunk with a byte over 0x7f
# would always be kept). Measured on the 2 GB job's rank logs: the set is ~1,000 literals
# (nccl's 'file.cc:NNN -> N' branch gives {.c:, .cc:, .cpp:, .cu:, .h:}, applog's stamped
# branch ' 00:'..' 99:' and the like), plus one branch kept as a regex (applog's progress
# bar '/(\d+|\?) \[\d+:\d\d', every literal of which NCCL's 'pid [dev]' header holds), and 99%
# of the chunks would be dropped; but the Rust engine runs such a set at ~470 MB/s per core
# (fast only for a few dozen literals: samples of 16-32 ran at 1.2-8 GB/s, 64 at 0.65-0.9,
# 128 or more at ~0.46), no faster than the
# line split plus the chatter filter it would save.
CHUNK_BYTES = 16 * 1024
_LIT_CAP = 256  # literal sets larger than this are not spelt out
# Lines of NCCL's INFO chatter (NCCL 2.x init.cc/channel.cc/enqueue.cc formats) the literals should not occur in.
_CHATTER_SAMPLE = (
    "node052:79619:79944 [5] NCCL INFO Channel 00/0 : 413[5] -> 414[6] via P2P/IPC/read",
    "node052:79619:79944 [5] NCCL INFO Channel 02/1 : 0[0] -> 8[0] [send] via NET/IB/0(7)/GDRDMA",
    "node052:79619:79944 [5] NCCL INFO Ring 00 : 412 -> 413 -> 414",
    "node052:79619:79944 [5] NCCL INFO Trees [0] 414/-1/-1->413->412 [1] 414/-1/-1->413->412",
    "node052:79619:79944 [5] NCCL INFO Connected all rings",
    "node052:79619:79944 [5] NCCL INFO Connected all trees",
    "node052:79619:79944 [5] NCCL INFO P2P Chunksize set to 524288",
    "node052:79619:79944 [5] NCCL INFO threadThresholds 8/8/64 | 8192/8/64 | 512 | 512",
    "node052:79619:79944 [5] NCCL INFO Setting affinity for GPU 5 to ffff,ffff0000",
    "node052:79619:79944 [5] NCCL INFO AllReduce: opCount 4 sendbuff 0x7f1c2a000000 recvbuff 0x7f1c2a000000 count 1024 datatype 7 op 0 root 0 comm 0x55d1c9a2bfea [nranks=1024] stream 0x55d1c9b0",
)
_ASCII_SPACE = " \t\r\x0b\x0c\x1c\x1d\x1e"  # what \s can be on one line of ASCII text (a superset of Rust's)


def _class_chars(items: list) -> set[str] | None:  # type: ignore[type-arg]
    """The ASCII characters a [...] item of a parse tree matches, when few; else None."""
    import re._constants as C  # type: ignore[import-not-found]

    chars: set[str] = set()
    for op, av in items:
        if op is C.LITERAL:
            chars.add(chr(av))
        elif op is C.RANGE and av[1] - av[0] < 16:
            chars.update(chr(c) for c in range(av[0], av[1] + 1))
        elif op is C.CATEGORY and av is C.CATEGORY_DIGIT:
            chars.update("0123456789")
        elif op is C.CATEGORY and av is C.CATEGORY_SPACE:
            chars.update(_ASCII_SPACE)
        else:  # a negated class, \w, a wide range
            return None
    return chars


def _exact_set(items: list) -> set[str] | None:  # type: ignore[type-arg]
    """Every string (on an ASCII line) the parsed sequence can match, when they are few; else None."""
    import re._constants as C  # type: ignore[import-not-found]

    acc = {""}
    for op, av in items:
        alts: set[str] | None
        if op is C.LITERAL:
            alts = {chr(av)}
        elif op is C.IN:
            alts = _class_chars(list(av))
        elif op is C.CATEGORY and av in (C.CATEGORY_DIGIT, C.CATEGORY_SPACE):
            alts = _class_chars([(op, av)])
        elif op is C.SUBPATTERN:
            alts = None if av[1] or av[2] else _exact_set(list(av[3]))
        elif op is C.BRANCH:
            alts = set()
            for b in av[1]:
                e = _exact_set(list(b))
                if e is None:
                    return None
                alts |= e
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] == av[1] and av[0] <= 64:
            one = _exact_set(list(av[2]))
            alts = None if one is None or len(one) ** av[0] > _LIT_CAP else {""}
            for _ in range(av[0] if alts is not None else 0):
                alts = {a + b for a in alts for b in one}  # type: ignore[union-attr]
        elif op is C.AT:
            alts = {""}
        else:
            return None
        if alts is None or len(acc) * len(alts) > _LIT_CAP:
            return None
        acc = {a + b for a in acc for b in alts}
    return {a for a in acc if "\n" not in a} if acc else acc


def _lit_key(s: set[str]) -> tuple[bool, int, int]:
    """(avoids the chatter sample, shortest literal's length, minus the set's size)."""
    good = not any(x in line for x in s for line in _CHATTER_SAMPLE)
    return good, min(map(len, s)), -len(s)


def _necessary(items: list) -> set[str] | None:  # type: ignore[type-arg]
    """A set of non-empty strings one of which every match of the parsed sequence contains
    (the best by ``_lit_key``), or None when none is known."""
    import re._constants as C  # type: ignore[import-not-found]

    cands: list[set[str]] = []
    exact = [_exact_set([it]) for it in items]
    for i in range(len(items)):  # windows of consecutive elements that match few strings
        acc: set[str] = {""}
        for j in range(i, len(items)):
            e = exact[j]
            if e is None or (e != {""} and "" in e):
                break
            if len(acc) * len(e) > _LIT_CAP:
                break
            acc = {a + b for a in acc for b in e}
            if acc and "" not in acc:
                cands.append(acc)
    for op, av in items:
        if op is C.SUBPATTERN and not av[1] and not av[2]:
            sub = _necessary(list(av[3]))
        elif op is C.BRANCH:
            parts = [_necessary(list(b)) for b in av[1]]
            sub = set().union(*parts) if parts and all(parts) else None  # type: ignore[arg-type]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT) and av[0] >= 1:
            sub = _necessary(list(av[2]))
        else:
            sub = None
        if sub:
            cands.append(sub)
    return max(cands, key=_lit_key) if cands else None


def _top_branches(pattern: str) -> list[str]:
    """The pattern's top-level alternatives as text (split at each ``|`` outside groups and classes)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":  # a ']' first in a class is a literal
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    return out


PRESCAN_MAX_REGEXES = 3  # branches with no literal that keeps the chatter out, each matched over every chunk


def _prescan_patterns() -> tuple[str, tuple[str, ...]] | None:
    """The pre-scan: one alternation of literals, plus the few branches (each a multi-line
    regex) whose every match contains none that the chatter lacks; together, every line a
    prefilter matches matches one of them (on an ASCII line). None when unknown."""
    import re._constants as C  # type: ignore[import-not-found]
    import re._parser as P  # type: ignore[import-not-found]

    lits: set[str] = set()
    rxs: list[str] = []
    from crashscope.sources import LINE_SOURCES

    for src in LINE_SOURCES:
        for text in _top_branches(src.prefilter):
            try:
                tree = P.parse(text)
            except re.error:
                return None
            if tree.state.flags & ~C.SRE_FLAG_UNICODE:
                return None  # (?i) and the like: the literals would not say
            s = _necessary(list(tree))
            if s and _lit_key(s)[0]:
                lits |= s
            elif re.search(r"\\[AZz]", text):
                return None  # a whole-text anchor means something else in a chunk
            else:
                rxs.append("(?m)" + text)
    if len(rxs) > PRESCAN_MAX_REGEXES or not lits:
        return None
    # longest first: the leftmost-first alternation then finds a long literal where a short one is its prefix
    return "|".join(regex.escape(x) for x in sorted(lits, key=lambda x: (-len(x), x))), tuple(rxs)


def prescan_report(job: str, files: int) -> None:
    import os
    import random
    from pathlib import Path

    os.environ["POLARS_MAX_THREADS"] = "1"
    import polars as pl

    got = _prescan_patterns()
    if got is None:
        sys.exit("no literal pre-scan for these prefilters")
    lits, rxs = got
    print(f"{lits.count('|') + 1} literals, {len(rxs)} branch(es) as regexes: {list(rxs)}")
    paths = sorted((Path(job) / "logs").glob("*.log"))[:files]
    data = b"".join(p.read_bytes() for p in paths)
    cuts = [0]
    while cuts[-1] < len(data):
        e = data.find(b"\n", cuts[-1] + CHUNK_BYTES)
        cuts.append(len(data) if e < 0 else e + 1)
    mb = len(data) / 1e6

    def best(fn) -> float:  # type: ignore[no-untyped-def]
        out = float("inf")
        for _ in range(3):
            c = time.process_time()
            fn()
            out = min(out, time.process_time() - c)
        return out

    chunks = pl.Series([data[a:b] for a, b in zip(cuts, cuts[1:])], dtype=pl.Binary).cast(pl.String, strict=False)
    kept = chunks.str.contains(lits) | chunks.str.len_bytes().ne(chunks.str.len_chars())
    for r in rxs:
        kept = kept | chunks.str.contains(r)
    print(f"{mb:.0f} MB in {chunks.len()} chunks of ~{CHUNK_BYTES // 1024} KiB: {kept.sum()} would be kept")
    t = best(lambda: pl.Series([data[a:b] for a, b in zip(cuts, cuts[1:])], dtype=pl.Binary).cast(pl.String, strict=False))
    print(f"  making the chunks       {mb / t:7.0f} MB per CPU s")
    t = best(lambda: chunks.str.contains(lits))
    print(f"  the literals            {mb / t:7.0f} MB per CPU s")
    for r in rxs:
        t = best(lambda r=r: chunks.str.contains(r))  # type: ignore[misc]
        print(f"  regex {r[:40]:40s} {mb / t:7.0f} MB per CPU s")
    pool = [x for x in (x.replace("\\", "") for x in lits.split("|")) if len(x) >= 4]
    random.seed(1)
    for k in (16, 32, 64, 128):
        alt = "|".join(regex.escape(x) for x in random.sample(pool, min(k, len(pool))))
        t = best(lambda alt=alt: chunks.str.contains(alt))  # type: ignore[misc]
        print(f"  {k:3d} of the literals      {mb / t:7.0f} MB per CPU s")
    spans, at = [], 0
    for p in paths:
        spans.append((at, p.stat().st_size))
        at += p.stat().st_size
    buf = memoryview(bytearray(data))
    t = best(lambda: ingest_mod._bulk_hits(buf, spans))
    print(f"  today's bulk pass       {mb / t:7.0f} MB per CPU s")


def main() -> None:
    if sys.argv[1:] == ["--literals"]:
        literals_report()
        return
    if sys.argv[1:2] == ["--prescan"]:
        prescan_report(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 9)
        return
    if sys.argv[1:2] == ["--passes"]:
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("--passes", required=True, help="a job directory with logs/*.log (the ingest benchmark's)")
        ap.add_argument("--files", type=int, default=128)
        ap.add_argument("--pass-mib", default="16,32")
        ap.add_argument("--ways", default="lines", help="lines (the default way), csv (every pass by the CSV reader), or both: lines,csv")
        a = ap.parse_args()
        passes_report(a.passes, a.files, [int(x) for x in a.pass_mib.split(",")], a.ways.split(","))
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
