"""The ingest's fast path (plain files up to SMALL_FILE_BYTES read ahead and scanned
together, several to a polars pass) against the plain reference path (every file on its
own, block by block): the same events, file records and warnings.

On the whole fixture corpus (simulated jobs, recorded runs under a real Slurm, verbatim
public incident excerpts), and on multi-megabyte rank logs built from the golden inputs
of the line sources with what the fast path must hand back to the plain one (lines over
MAX_LINE_BYTES, our column separator byte) or handle the same way (no final newline, CRLF,
bytes that are not UTF-8, empty lines, runs of identical hits, NCCL chatter).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import crashscope.ingest as ingest_mod
from crashscope import rgpass
from crashscope.ingest import ingest

_ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted(
    [
        *(_ROOT / "fixtures" / "jobs").glob("*/"),
        *(_ROOT / "fixtures" / "recorded").glob("*/"),
        *(_ROOT / "tests" / "data" / "real").glob("*/"),
    ]
)
GOLDEN = _ROOT / "tests" / "golden"
CHATTER = "node003:7002:7170 [1] NCCL INFO Channel 03/0 : 1[1] -> 2[2] via P2P/IPC/read\n"
WARN = "node003:7002:7170 [1] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n"


def _run(job: Path, **kw: object) -> tuple[list[dict], list[tuple], list[str]]:
    r = ingest(job, workers=1, **kw)  # type: ignore[arg-type]
    recs = [(f.file, f.kind, f.confidence, f.events, f.bytes, f.lines, f.warnings, f.runner_up, f.note) for f in r.files]
    return r.events.sort(["file", "line", "source", "kind", "message"]).to_dicts(), recs, r.warnings


def _same_both_ways(job: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list[tuple], list[str]]:
    fast = _run(job)  # with the ripgrep pass where there is an rg (tests below check it is used)
    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)  # the plain path for every file
        m.setattr(ingest_mod, "RG_PASS", False)
        plain = _run(job)
    assert fast[1] == plain[1]
    assert fast[2] == plain[2]
    assert fast[0] == plain[0]
    return fast


def test_the_corpus_is_there() -> None:
    assert len(CORPUS) > 100


@pytest.mark.parametrize("job", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fast_and_plain_paths_agree_on_the_corpus(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same_both_ways(job, monkeypatch)


def _golden_lines() -> bytes:
    out = []
    for src in ("nccl", "pytorch", "kernel", "slurm", "applog", "catalog"):
        for case in sorted((GOLDEN / src).glob("*")):
            if case.is_file() and ".expected." not in case.name and case.name != "README.md":
                out.append(case.read_bytes().rstrip(b"\n") + b"\n")
    return b"".join(out)


@pytest.fixture(scope="module")
def big_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank logs of one to a few MiB, the size the fast path newly takes."""
    root = tmp_path_factory.mktemp("big") / "job"
    (root / "logs").mkdir(parents=True)
    hits = _golden_lines()
    chatter = CHATTER.encode() * 12_000  # ~1 MiB of INFO chatter
    mib = ingest_mod.MAX_LINE_BYTES
    files = {
        "rank0.log": chatter + hits + chatter + hits,
        "rank1.log": hits + chatter * 2 + WARN.encode() * 40 + hits,  # a run of identical hits
        # a line longer than MAX_LINE_BYTES in the middle: the plain path cuts it and says so
        "rank2.log": hits + b"x" * (mib + 10) + WARN.encode() + b"\n" + hits + chatter,
        # ... and as the last line, without a newline
        "rank3.log": chatter + hits + WARN.encode().rstrip(b"\n") + b"y" * (mib + 5),
        "rank4.log": (chatter + hits).replace(b"\n", b"\r\n"),  # CRLF
        "rank5.log": chatter + WARN.encode().replace(b"Got", b"\xff\xfe Got") + hits + b"\n\n\n" + chatter,  # not UTF-8, empty lines
        "rank6.log": chatter + b"a\x1fb\n" + hits,  # our column separator: the plain path
        "rank7.log": chatter + hits.rstrip(b"\n"),  # no final newline
        "rank8.log": hits,  # a small one among the large
        "rank9.log": chatter * 3 + hits,  # ~3 MiB
        "rank10.log": chatter + hits + chatter,  # its last line is chatter: rg prints no last line to count by
        "rank11.log": chatter + WARN.encode().replace(b"NCCL", b"NC\x1fCL") + hits,  # the separator in a hit line
    }
    for name, data in files.items():
        (root / "logs" / name).write_bytes(data)
    return root


def test_fast_and_plain_paths_agree_on_multi_mib_rank_logs(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events, recs, warnings = _same_both_ways(big_job, monkeypatch)
    assert len(events) > 100
    by_file = {r[0]: r for r in recs}
    assert by_file["logs/rank1.log"][8] is not None and "repeated" in by_file["logs/rank1.log"][8]
    cut = [w for w in warnings if "longer than" in w]
    assert any("rank2.log" in w for w in cut) and any("rank3.log" in w for w in cut)
    assert any("rank5.log" in w and "not UTF-8" in w for w in warnings)


def test_passes_of_one_block_agree(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 MiB: fewer files a pass, one file alone, the rest the plain way."""
    monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", 4 * 1024 * 1024)
    _same_both_ways(big_job, monkeypatch)


def _fast_path_sizes(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the files _bulk_hits took (a wrong newline count makes it give a pass
    back to the plain path, which the equivalence alone would not notice)."""
    taken: list[int] = []
    real = ingest_mod._bulk_hits

    def spy(data, spans):  # type: ignore[no-untyped-def]
        out = real(data, spans)
        taken.extend(n for (_, n), o in zip(spans, out) if o is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "_bulk_hits", spy)
        m.setattr(ingest_mod, "RG_PASS", False)
        ingest(big_job, workers=1)
    return sorted(taken)


def _clean_sizes(big_job: Path) -> list[int]:
    sizes = {p.name: p.stat().st_size for p in (big_job / "logs").iterdir()}
    return sorted(v for k, v in sizes.items() if k not in ("rank2.log", "rank3.log", "rank6.log", "rank11.log"))


def test_the_fast_path_takes_the_multi_mib_files(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The equivalence above is not vacuous: the large clean files go through _bulk_hits,
    the ones with an over-long line or a separator byte do not."""
    taken = _fast_path_sizes(big_job, monkeypatch)
    assert taken == _clean_sizes(big_job)
    assert max(taken) > 2 * 1024 * 1024


@pytest.mark.parametrize("numpy_from", [0, 1 << 40], ids=["numpy-counts", "bytes-counts"])
def test_both_newline_counters_agree(big_job: Path, monkeypatch: pytest.MonkeyPatch, numpy_from: int) -> None:
    """Small passes count newlines without numpy (its import costs a small job ~0.13 s):
    with either counter the clean files stay on the fast path and give the plain events."""
    monkeypatch.setattr(ingest_mod, "NUMPY_COUNT_BYTES", numpy_from)
    monkeypatch.setattr(ingest_mod, "RG_PASS", False)
    assert _fast_path_sizes(big_job, monkeypatch) == _clean_sizes(big_job)
    _same_both_ways(big_job, monkeypatch)


needs_rg = pytest.mark.skipif(rgpass.ripgrep() is None, reason="no ripgrep (the ripgrep wheel or rg on PATH)")


@needs_rg
def test_ripgrep_takes_the_chatter_files_and_gives_the_plain_events(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ripgrep pass is used, on the large files whose head is chatter, and hands back
    the ones it cannot read as the plain path does (an over-long line, our separator byte);
    the events are the plain path's, with and without it."""
    taken: list[int] = []
    real = ingest_mod._rg_hits

    def spy(scanned, sizes):  # type: ignore[no-untyped-def]
        out = real(scanned, sizes)
        taken.extend(n for n, o in zip(sizes, out) if o is not None)
        return out

    sizes = {p.name: p.stat().st_size for p in (big_job / "logs").iterdir()}
    monkeypatch.setattr(rgpass, "MIN_BYTES", 256 * 1024)  # the default, set here so the test keeps it
    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "_rg_hits", spy)
        _same_both_ways(big_job, monkeypatch)
    want = sorted(sizes[k] for k in ("rank0.log", "rank4.log", "rank5.log", "rank7.log", "rank9.log", "rank10.log"))
    assert sorted(taken) == want
    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "RG_PASS", False)
        _same_both_ways(big_job, monkeypatch)


@needs_rg
def test_ripgrep_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    rgpass.ripgrep.cache_clear()
    try:
        monkeypatch.setenv("CRASHSCOPE_RIPGREP", "off")
        assert rgpass.ripgrep() is None
        rgpass.ripgrep.cache_clear()
        monkeypatch.delenv("CRASHSCOPE_RIPGREP")
        assert rgpass.ripgrep() is not None
    finally:
        rgpass.ripgrep.cache_clear()


_LINE = st.sampled_from([CHATTER.rstrip("\n").encode(), WARN.rstrip("\n").encode(), b"", b"\r", b"x" * 40, b"\xff\xfe NCCL WARN bad", b"step 3 loss 1.0\r",
                         b"NCCL INFO Channel 01", b"a NCCL INFO Ring 00 : 0 1", b"Traceback (most recent call last):"])


@needs_rg
@settings(max_examples=60, deadline=None)
@given(files=st.lists(st.tuples(st.lists(_LINE, min_size=0, max_size=30), st.booleans()), min_size=1, max_size=4), max_line=st.sampled_from([16, 64, 1 << 20]))
def test_ripgrep_pass_is_the_csv_pass(files: list[tuple[list[bytes], bool]], max_line: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    """File by file, where both take it: the same hits, line numbers and line counts as
    the CSV pass (the reference for any bytes); rg gives a file back only where a line
    may be over the limit."""
    import os

    d = tmp_path_factory.mktemp("rgprop")
    blobs = [b"\n".join(lines) + (b"\n" if ended and lines else b"") for lines, ended in files]
    fds = []
    for i, b in enumerate(blobs):
        (d / f"f{i}").write_bytes(b)
        fds.append(os.open(d / f"f{i}", os.O_RDONLY))
    try:
        scanned = rgpass.scan(rgpass.ripgrep(), [(fd, len(b)) for fd, b in zip(fds, blobs)], max_line)  # type: ignore[arg-type]
    finally:
        for fd in fds:
            os.close(fd)
    got = ingest_mod._rg_hits(scanned, [len(b) for b in blobs])
    raw = b"".join(b if b.endswith(b"\n") or not b else b + b"\n" for b in blobs)
    spans, at = [], 0
    for b in blobs:
        n = len(b) + (0 if b.endswith(b"\n") or not b else 1)
        spans.append((at, n))
        at += n
    saved = ingest_mod.MAX_LINE_BYTES
    ingest_mod.MAX_LINE_BYTES = max_line
    try:
        want = ingest_mod._bulk_hits_csv(raw, spans) if raw else [None] * len(blobs)
    finally:
        ingest_mod.MAX_LINE_BYTES = saved
    for b, g, w in zip(blobs, got, want):
        longest = max((len(x) for x in b.split(b"\n")), default=0)
        if g is None:
            assert b"\x1f" in b or longest >= max_line // 2, (b, w)
            continue
        if not b:
            assert g[1] == 0
            continue
        assert w is not None, b
        assert g[0].to_dicts() == w[0].to_dicts() and g[1] == w[1], (b, g, w)


def test_parallel_ingest_is_the_serial_one(big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes plus this one (which parses batches while the workers start):
    the same events, records and warnings, in the same order, as one process."""
    job = _ROOT / "fixtures" / "jobs" / "fabric_timeout_ib_node002"
    for root in (job, big_job):
        monkeypatch.setattr(ingest_mod, "BATCH_FILES", 3)  # many batches (read in this process only)
        serial = ingest(root, workers=1)
        parallel = ingest(root, workers=2)
        assert [(f.file, f.kind, f.events, f.bytes, f.lines, f.note) for f in parallel.files] == [
            (f.file, f.kind, f.events, f.bytes, f.lines, f.note) for f in serial.files
        ]
        assert parallel.warnings == serial.warnings
        assert parallel.events.to_dicts() == serial.events.to_dicts()


def test_spool_read_in_one_pass_is_each_shard_read_alone(tmp_path: Path) -> None:
    """read_spool converts every shard's stored frame in one pass; that gives what each
    shard read alone (read_shard) gives: the events in shard order and the warnings,
    including a shard with values of a newer crashscope, a corrupt one and a foreign one."""
    import json

    from crashscope.shards import EVENTS, META, read_shard, read_spool, shard_dirs, to_storage, write_shard

    src = _ROOT / "fixtures" / "recorded" / "exception_rank1_srun"
    res = ingest(src)
    spool = tmp_path / "1"
    for (host,), part in res.events.group_by(["host"], maintain_order=True):
        write_shard(spool, host or "_job", part, node=host, job_id="1", files=[], warnings=[f"w {host}"], seconds=0.0)
    newer = to_storage(res.events.head(5)).with_columns(pl.lit("a_kind_from_a_newer_crashscope").alias("kind"))
    d = spool / "zz-newer.shard"
    d.mkdir()
    (d / META).write_text(json.dumps({"format": "crashscope-shard/1", "node": "zz", "warnings": ["from zz"]}))
    pl.concat([to_storage(res.events.head(3)), newer]).write_parquet(d / EVENTS)
    bad = spool / "n9.shard"
    bad.mkdir()
    (bad / META).write_text(json.dumps({"format": "crashscope-shard/1", "node": "n9", "warnings": ["never shown"]}))
    (bad / EVENTS).write_bytes(b"PAR1 not really parquet")
    other = spool / "x.shard"
    other.mkdir()
    (other / META).write_text('{"format": "something-else/9"}')

    alone = [read_shard(d) for d in shard_dirs(spool)]
    sp = read_spool(spool)
    assert sp is not None
    assert sp.warnings == [w for _, _, ws in alone for w in ws]
    assert "zz-newer.shard: 5 event(s) with values this crashscope does not know were dropped" in sp.warnings
    want = pl.concat([e for e, _, _ in alone if e.height])
    assert sp.events.to_dicts() == want.to_dicts()
    assert sp.events.height == res.events.height + 3


_GPU_HDR = "timestamp, index, pci.bus_id, temperature.gpu, power.draw [W], clocks.sm [MHz], clocks_event_reasons.active"


def _gpu_csv_job(root: Path) -> Path:
    """Per-node gpu CSVs that exercise every per-file step of the gpu_csv source: two
    headers, throttle runs, ECC changes, a reset, a lost GPU, bad rows, a noheader file,
    bytes that are not UTF-8, the same GPU and driver in several files."""
    golden = sorted(p for p in (GOLDEN / "gpu_csv").glob("*.csv"))
    ecc = ("timestamp, index, pci.bus_id, temperature.gpu, ecc.errors.uncorrected.volatile.total, driver_version\n"
           "2026/09/14 08:00:00.000, 3, 00000000:5D:00.0, 40, 0, 550.54.15\n"
           "2026/09/14 08:00:05.000, 3, 00000000:5D:00.0, 41, 2, 550.54.15\n"
           "2026/09/14 08:00:10.000, 3, 00000000:5D:00.0, 41, 2, 550.54.15\n"
           "2026/09/14 08:00:15.000, 3, 00000000:5D:00.0, [GPU requires reset], [GPU requires reset], 550.54.15\n")
    lost = ("timestamp, index, pci.bus_id, temperature.gpu, power.draw [W]\n"
            "2026/09/14 08:00:00.000, 1, 00000000:2A:00.0, 40, 300.00 W\n"
            "2026/09/14 08:00:05.000, 1, 00000000:2A:00.0, [Unknown Error], [Unknown Error]\n"
            "not, a, row\n" * 7 + "2026/99/99 99:99:99.000, 1, 00000000:2A:00.0, 41, 301.00 W\n")
    for i in range(6):
        d = root / "nodes" / f"node{i:03d}"
        d.mkdir(parents=True)
        rows = [_GPU_HDR] + [
            f"2026/09/14 08:{m:02d}:{s:02d}.{g:03d}, {g}, 00000000:{18 + g:02X}:00.0, {60 + 5 * i + m}, 650.00 W, 1980 MHz, "
            + ("0x0000000000000048" if (i + m + g) % 4 == 0 else "0x0000000000000000")
            for m in range(3) for s in (0, 30) for g in range(2)
        ]
        (d / "gpu-telemetry.csv").write_text("\n".join(rows) + "\n")
        (d / "gpu-ecc.csv").write_text(ecc if i % 2 else lost)
        (d / "golden.csv").write_bytes(golden[i % len(golden)].read_bytes() + (b"\xff\xfe\n" if i == 4 else b""))
    return root


def test_batched_whole_file_parse_is_each_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_csv reads the CSVs of a batch in one pipeline (parse_files): the same events,
    records and warnings as each file parsed on its own; and when the joint parse fails,
    each file is read alone again and only the file that fails alone is lost."""
    from crashscope.sources import gpu_csv

    job = _gpu_csv_job(tmp_path / "job")
    assert gpu_csv.GpuCsvSource.batchable
    batched = _run(job)
    with monkeypatch.context() as m:
        m.setattr(gpu_csv.GpuCsvSource, "batchable", False)
        alone = _run(job)
    assert batched == alone
    kinds = {e["kind"] for e in batched[0] if e["source"] == "gpu_csv"}
    assert {"gpu_telemetry", "gpu_throttle", "gpu_ecc", "log_error", "gpu_inventory", "version"} <= kinds
    assert sum(1 for r in batched[1] if r[1] == "gpu_csv") == 18
    assert any("wrong number of fields" in w for w in batched[2]) and any("noheader" in w for w in batched[2])

    real = gpu_csv._parse

    def fails_on_lost(files, names):  # type: ignore[no-untyped-def]
        if any("[Unknown Error]" in ln for f in files for ln in f[0]):
            raise RuntimeError("boom")
        return real(files, names)

    monkeypatch.setattr(gpu_csv, "_parse", fails_on_lost)
    broken = _run(job)
    with monkeypatch.context() as m:
        m.setattr(gpu_csv.GpuCsvSource, "batchable", False)
        broken_alone = _run(job)
    assert broken == broken_alone
    lost_files = {e["file"] for e in alone[0] if "Unknown Error" in e["message"]}
    assert lost_files and not lost_files & {e["file"] for e in broken[0]}
    assert {e["file"] for e in broken[0]} == {e["file"] for e in alone[0]} - lost_files
    assert sum("gpu CSV parse failed (RuntimeError: boom)" in w for w in broken[2]) == len(lost_files)


@pytest.fixture(scope="module")
def lf_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi-MiB rank logs with no CR anywhere: one pass whose non-chatter lines the
    seven prefilters sort without _COMBINED (few of them), or with it (many)."""
    root = tmp_path_factory.mktemp("lf") / "job"
    (root / "logs").mkdir(parents=True)
    hits = _golden_lines().replace(b"\r", b"")
    chatter = CHATTER.encode() * 12_000
    for i in range(4):
        (root / "logs" / f"rank{i}.log").write_bytes(chatter + hits * (i + 1) + b"\n\n" + chatter + WARN.encode() * 20 + hits)
    return root


@pytest.mark.parametrize("small_hits", [0, 4_096, 1 << 30], ids=["combined-always", "default", "prefilters-always"])
def test_both_ways_of_finding_a_pass_hits_agree(lf_job: Path, big_job: Path, monkeypatch: pytest.MonkeyPatch, small_hits: int) -> None:
    """A pass's hits are the lines _COMBINED matches, or, where few lines are not chatter
    and none ends in CR, the lines one source's prefilter matches: the plain path's events
    either way (big_job has a CRLF file, which makes its pass ask _COMBINED)."""
    monkeypatch.setattr(ingest_mod, "SMALL_HITS", small_hits)
    monkeypatch.setattr(ingest_mod, "RG_PASS", False)  # the polars passes (ripgrep's way is tested above)
    for job in (lf_job, big_job):
        events, _, _ = _same_both_ways(job, monkeypatch)
        assert len(events) > 100


def _pass(files: list[bytes]) -> tuple[bytes, list[tuple[int, int]]]:
    """Files laid out as ingest_batch lays out a pass: each followed by a newline where it lacks one."""
    buf, spans = bytearray(), []
    for f in files:
        spans.append((len(buf), len(f)))
        buf += f if f.endswith(b"\n") else f + b"\n"
    return bytes(buf), spans


def _same_hits(a: list, b: list) -> bool:  # type: ignore[type-arg]
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if (x is None) != (y is None):
            return False
        if x is not None and (x[1:] != y[1:] or x[0].schema != y[0].schema or not x[0].equals(y[0])):
            return False
    return True


_HIT = WARN.rstrip("\n").encode()
_PIECES = st.sampled_from(
    [b"\n", b"\n", b"\r", b"\r\n", b'"', b"\x00", b",", b"\xff\xfe", "é".encode(), b"x" * 50, b"  ", _HIT, _HIT, CHATTER.rstrip("\n").encode(),
     b"Traceback (most recent call last):", b"[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered", b"NCCL INFO Ring 00 : 0 1"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_PIECES, min_size=1, max_size=40), min_size=1, max_size=5), st.sampled_from([64, 1 << 20]), st.sampled_from([0, 4_096]))
def test_the_line_reader_pass_is_the_csv_pass(files: list[list[bytes]], max_line: int, small_hits: int) -> None:
    """A pass read by polars' line reader gives the CSV reader's hits, line counts and
    long-line files, or hands the pass back (CR, not UTF-8): and it takes every pass
    that has neither."""
    raw, spans = _pass([b"".join(f) for f in files])
    saved = ingest_mod.MAX_LINE_BYTES, ingest_mod.SMALL_HITS
    ingest_mod.MAX_LINE_BYTES, ingest_mod.SMALL_HITS = max_line, small_hits
    try:
        got = ingest_mod._bulk_hits_lines(raw, spans)
        want = ingest_mod._bulk_hits_csv(raw, spans)
    finally:
        ingest_mod.MAX_LINE_BYTES, ingest_mod.SMALL_HITS = saved
    if b"\r" in raw or b"\xff" in raw:
        return  # _bulk_hits does not ask the line reader (CR), or it cannot read the pass
    assert got is not None
    assert _same_hits(got, want)


@pytest.mark.parametrize("job", ["lf", "big"])
def test_line_reader_and_csv_passes_agree(job: str, lf_job: Path, big_job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: every pass the CSV way gives the same events, records and warnings as
    the default, in which the line reader takes the passes without CR and non-UTF-8 bytes
    (all of lf_job's; big_job has CRs in its golden lines, so none of its passes)."""
    root = lf_job if job == "lf" else big_job
    monkeypatch.setattr(ingest_mod, "RG_PASS", False)  # the polars passes (ripgrep's way is tested above)
    taken: list[int] = []
    real = ingest_mod._bulk_hits_lines

    def spy(raw, spans):  # type: ignore[no-untyped-def]
        out = real(raw, spans)
        taken.append(out is not None)
        return out

    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "_bulk_hits_lines", spy)
        default = _run(root)
    assert taken == ([True] * len(taken) if job == "lf" else []) and (taken or job == "big")
    with monkeypatch.context() as m:
        m.setattr(ingest_mod, "LINES_PASS", False)
        csv = _run(root)
    assert default == csv
