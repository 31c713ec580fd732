"""Hostile input (issue 7): numbers past 64 bits, zones polars rejects, deep JSON, huge
host names, floods of one line, decompression bombs, growing files, budgets, paths
swapped after the scan. Each must end in warnings and a report, never a traceback, a
hang or unbounded memory. The large versions are in benchmarks/hostile_bench.py."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import crashscope.bundle as bundle
import crashscope.ingest as ingest_mod
from crashscope.pipeline import analyze, resolve_tz
from crashscope.ingest import Budget, ingest, parse_size
from crashscope.report.render import render_json, render_markdown, render_terminal
from crashscope.sources.base import FileInfo, ParseContext, load_json
from crashscope.timeline import build_timeline

HUGE = "99999999999999999999"  # > 2**64
# Real NCCL WARN shape (tests/golden/nccl): what a flapping IB port repeats.
WARN = "node003:7002:7170 [1] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n"
WATCHDOG = (
    "[rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.\n"
)


def _all_views(report) -> None:  # type: ignore[no-untyped-def]
    json.loads(render_json(report))
    render_markdown(report)
    render_terminal(report, width=100, color=False)


def _attrs(ev: pl.DataFrame) -> list[dict]:
    return [json.loads(a) if a else {} for a in ev["attrs"].to_list()]


# -- 1. numbers beyond 64 bits ------------------------------------------------------------

def test_emit_drops_out_of_range_identity_with_one_warning() -> None:
    ctx = ParseContext(FileInfo("f.log", "f.log"), "nccl")
    for i in range(3):
        ctx.emit("network_error", i + 1, f"m{i}", rank=int(HUGE), pid=int(HUGE), local_rank=2**40, gpu_index=10**6, host="node001")
    ctx.emit("network_error", 4, "ok", rank=7, pid=123, local_rank=1, gpu_index=3, host="node001")
    df = ctx.frame()
    assert df["rank"].to_list() == [None, None, None, 7]
    assert df["pid"].to_list() == [None, None, None, 123]
    assert df["gpu_index"].to_list() == [None, None, None, 3]
    reasons = [w.reason for w in ctx.warnings]
    assert sum(r.startswith("rank out of range") for r in reasons) == 1  # one warning per field, not per line
    assert sum(r.startswith("pid out of range") for r in reasons) == 1


def test_numbers_past_64_bits_in_every_number_field(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "rank0.log").write_text(
        f"node001:{HUGE}:{HUGE} [{HUGE}] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n"
        f"node001:2718:2718 [0] NCCL INFO comm 0x55d0 rank {HUGE} nranks {HUGE} cudaDev {HUGE} nvmlDev 0 busId 1b000 commId 0x1 - Init COMPLETE\n"
        f"[rank{HUGE}]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank {HUGE}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={HUGE}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={HUGE}) ran for {HUGE} milliseconds before timing out.\n"
        f"[default{HUGE}]:[rank{HUGE}]: RuntimeError: boom\n"
    )
    (root / "sacct.txt").write_text(
        "JobID|JobName|State|ExitCode|Start|End|NodeList\n"
        f"{HUGE}|train|FAILED|{HUGE}:0|2026-09-17T04:00:00|2026-09-17T04:30:00|node[001-002]\n"
    )
    report, timeline, result = analyze(root)
    _all_views(report)
    assert result.events.height >= 2
    assert result.events["rank"].drop_nulls().max() is None or result.events["rank"].drop_nulls().max() <= 10_000_000
    assert any("out of range" in w for w in report.warnings)


# -- 2. zones zoneinfo accepts and polars rejects -------------------------------------------

@pytest.mark.parametrize("zone", ["Factory", "posixrules", "localtime", "right/UTC", "Bad/Zone", "../../etc/passwd"])
def test_resolve_tz_refuses_what_polars_cannot_use(zone: str) -> None:
    assert resolve_tz(zone) is None


def test_resolve_tz_keeps_real_zones() -> None:
    assert resolve_tz("America/Chicago").key == "America/Chicago"  # type: ignore[union-attr]
    assert resolve_tz("UTC") is not None


@pytest.mark.parametrize("zone", ["Factory", "right/UTC"])
def test_collector_zone_polars_rejects_is_ignored(tmp_path: Path, zone: str) -> None:
    root = tmp_path / "job"
    (root / "node001").mkdir(parents=True)
    (root / "node001" / "collect.json").write_text(json.dumps(
        {"hostname": "node001", "collected_at": "2026-09-17T04:00:00Z", "driver": "535.154.05", "timezone": zone}))
    # a local (zone-less) stamp, so the job zone would be applied
    (root / "node001" / "dmesg.log").write_text("2026-09-17T04:21:40,123456 node001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    report, _, _ = analyze(root)
    _all_views(report)
    assert not any(f"time zone {zone}" in w for w in report.warnings)


# -- 3. deep JSON ---------------------------------------------------------------------------

def test_load_json_depth_is_invalid_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        load_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(json.JSONDecodeError):
        load_json("[" * 65 + "]" * 65)
    assert load_json("[" * 64 + "]" * 64) is not None


def test_deep_json_where_json_is_expected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    root = tmp_path / "job"
    root.mkdir()
    (root / "sacct.json").write_text('{"meta": {}, "jobs": ' + deep + "}")
    (root / "error.json").write_text('{"message": {"extraInfo": {"py_callstack": ' + deep + '}}, "timestamp": 1}')
    (root / "collect.json").write_text('{"hostname": "node001", "driver": "535.154.05", "x": ' + "[" * 500 + "]" * 500 + "}")
    (root / "journal.json").write_text('{"_TRANSPORT":"kernel","MESSAGE":' + deep + "}\n")
    with caplog.at_level(logging.ERROR):
        report, _, _ = analyze(root)
    _all_views(report)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "a parser failed with a traceback"
    text = "\n".join(report.warnings)
    assert "RecursionError" not in text
    assert "sacct.json" in text and "error.json" in text


def test_deep_json_cli_has_no_traceback(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "sacct.json").write_text('{"meta": {}, "jobs": ' + "[" * 50_000 + "]" * 50_000 + "}")
    p = subprocess.run([sys.executable, "-m", "crashscope", "analyze", str(root), "--format", "json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr
    json.loads(p.stdout)


# -- 4. huge host names, too many hosts -------------------------------------------------------

def test_huge_host_names_are_dropped(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    lines = [f"n{i:05d}{'x' * 50_000}:{1000 + i}:{2000 + i} [0] transport/net_ib.cc:109 NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\n" for i in range(12)]
    (root / "rank0.log").write_text("".join(lines))
    result = ingest(root)
    hosts = result.events["host"].drop_nulls().to_list()
    assert all(len(h) <= 255 for h in hosts)
    n = sum("host name longer than 255" in w for w in result.warnings)
    assert 1 <= n <= result.events["source"].n_unique()  # one per file and source, not per line
    report, _, _ = analyze(root)
    _all_views(report)


def test_distinct_hosts_per_file_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import crashscope.sources.base as base

    monkeypatch.setattr(base, "MAX_HOSTS_PER_FILE", 10)
    ctx = ParseContext(FileInfo("f.log", "f.log"), "nccl")
    for i in range(30):
        ctx.emit("network_error", i + 1, f"m{i}", host=f"node{i:03d}")
    hosts = ctx.frame()["host"]
    assert hosts.drop_nulls().n_unique() == 10
    assert hosts.null_count() == 20
    assert sum("distinct host" in w.reason for w in ctx.warnings) == 1


def test_hostname_characters() -> None:
    ctx = ParseContext(FileInfo("f.log", "f.log"), "nccl")
    for i, h in enumerate(["node001", "gpu-a100-07.cluster.local", "10.0.3.21", "bad\x1bhost", "a b"]):
        ctx.emit("network_error", i + 1, f"m{i}", host=h)
    assert ctx.frame()["host"].to_list() == ["node001", "gpu-a100-07", "10.0.3.21", None, None]


# -- 5. one line repeated ------------------------------------------------------------------

def _flood(root: Path, n: int, line: str = WARN, name: str = "rank0.log") -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(line * n)


@pytest.mark.parametrize("block", [None, 64 * 1024])  # one block; many blocks (threads)
def test_repeated_line_collapses_while_streaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int | None) -> None:
    if block:
        monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", block)
    n = 20_000
    _flood(tmp_path / "job", n)
    result = ingest(tmp_path / "job")
    ev = result.events.filter(pl.col("source") == "nccl")
    assert ev.height <= 8  # at most FOLD_AFTER rows for one distinct event, never one per line
    attrs = _attrs(ev)
    assert sum(a.get("repeat", 1) for a in attrs) == n  # every occurrence counted
    assert ev["line"].min() == 1  # the first occurrence keeps its line
    assert max(a.get("last_line", 0) for a in attrs) == n
    assert result.files[0].events >= n  # occurrences, not rows


def test_interleaved_identical_events_fold_in_emit(tmp_path: Path) -> None:
    other = WARN.replace("[1]", "[2]").replace(":7170", ":7171")
    n = 3_000
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "rank0.log").write_text((WARN + other) * n)  # never two identical in a row
    ev = ingest(tmp_path / "job").events.filter(pl.col("source") == "nccl")
    assert ev.height <= 16
    per = {}
    for row, a in zip(ev.iter_rows(named=True), _attrs(ev)):
        per[row["gpu_index"]] = per.get(row["gpu_index"], 0) + a.get("repeat", 1)
    assert per == {1: n, 2: n}


def test_stamped_repeats_keep_first_and_last_time() -> None:
    ctx = ParseContext(FileInfo("f.log", "f.log"), "nccl")
    for i in range(20):
        ctx.emit("network_error", i + 1, "same", host="node001", time=1_789_000_000_000_000_000 + i * 1_000_000_000)
    df = ctx.frame()
    assert df.height == 8
    last = json.loads(df["attrs"][-1])
    assert last["repeat"] == 13 and last["last_line"] == 20
    assert last["last_time"] == "2026-09-10T00:26:59.000000000Z"  # 1_789_000_019 s
    assert df["line"].to_list() == list(range(1, 9))


def test_few_repeats_are_not_folded() -> None:
    ctx = ParseContext(FileInfo("f.log", "f.log"), "pytorch")
    for i in range(8):
        ctx.emit("exception", i + 1, "ChildFailedError:")
    df = ctx.frame()
    assert df.height == 8 and df["attrs"].null_count() == 8  # ordinary logs are unchanged


def test_symptom_group_counts_occurrences_of_folded_rows(tmp_path: Path) -> None:
    n = 500
    _flood(tmp_path / "job", n, WATCHDOG)
    result = ingest(tmp_path / "job")
    assert result.events.filter(pl.col("source") == "pytorch").height <= 8
    tl = build_timeline(result)
    groups = [g for g in tl.groups if g.kind == "collective_timeout"]
    assert groups and groups[0].count == n


# -- 6. decompression bombs ----------------------------------------------------------------

def test_zstd_bomb_stops_at_the_ratio_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import zstandard

    monkeypatch.setattr(bundle, "RATIO_FREE_BYTES", 1024 * 1024)
    root = tmp_path / "job"
    root.mkdir()
    (root / "rank0.log.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(WARN.encode() * 300_000))  # 31 MB
    result = ingest(root)
    rec = result.files[0]
    assert rec.bytes < 4 * 1024 * 1024
    assert any("decompression bomb limit" in w for w in result.warnings)
    assert rec.events >= 1  # what was read is analysed


def test_absolute_decompressed_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "MAX_DECOMPRESSED_BYTES", 2 * 1024 * 1024)
    monkeypatch.setattr(bundle, "MAX_RATIO", 10**9)
    root = tmp_path / "job"
    root.mkdir()
    (root / "a.log.gz").write_bytes(gzip.compress(WARN.encode() * 100_000))
    (root / "b.log.bz2").write_bytes(bz2.compress(WARN.encode() * 100_000))
    result = ingest(root)
    for rec in result.files:
        assert rec.bytes <= 3 * 1024 * 1024, rec
    assert sum("decompression size limit" in w for w in result.warnings) == 2


def test_ordinary_compressed_logs_are_not_capped(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    data = "".join(f"node001:2718:{i} [0] NCCL INFO Channel {i % 32:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n" for i in range(50_000)).encode()
    (root / "a.log.gz").write_bytes(gzip.compress(data))
    result = ingest(root)
    assert result.files[0].bytes == len(data)
    assert not any("limit" in w for w in result.warnings)


# -- 7. files that keep growing ---------------------------------------------------------------

def test_file_is_read_only_to_its_size_at_open(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    p = root / "rank0.log"
    p.write_text(WATCHDOG * 10)
    size = p.stat().st_size
    (ref,) = [r for r in bundle.scan(root) if isinstance(r, bundle.FileRef)]
    items = bundle.open_ref(ref)
    entry = next(items)  # the stream is valid until the walk moves on
    os.truncate(p, size + 512 * 1024 * 1024)  # a sparse tail, extended after the open
    got = entry.stream.read()
    assert len(got) == size
    assert list(items) == []


# -- 8. budgets ------------------------------------------------------------------------------

def test_time_budget_spent_gives_a_partial_report(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    for i in range(3):
        (root / f"rank{i}.log").write_text(WATCHDOG)
    report, _, result = analyze(root, budget_s=0)
    _all_views(report)
    assert [f.kind for f in result.files] == ["unreadable"] * 3
    assert any(w.startswith("partial analysis: time budget of 0 s spent") for w in report.warnings)
    assert any("rank0.log" in w and "not read because of the budget" in w for w in report.warnings)


class _Countdown(Budget):
    """A budget that runs out after ``n`` checks (deterministic)."""

    def __init__(self, n: int):
        super().__init__(seconds=1e9)
        self.n = n

    def check(self):  # type: ignore[no-untyped-def]
        self.n -= 1
        if self.n < 0 and self.exceeded is None:
            self.exceeded = "test budget spent"
        return self.exceeded


def test_budget_cuts_the_current_file_at_a_block_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", 64 * 1024)
    root = tmp_path / "job"
    root.mkdir()
    (root / "a.log").write_text("".join(f"[rank{i % 8}]:" + WATCHDOG.split(":", 1)[1].replace("SeqNum=5012", f"SeqNum={i}") for i in range(3000)))
    (root / "b.log").write_text(WATCHDOG)
    # checks: before a.log, before its entry, after block 1, after block 2 -> spent
    result = ingest(root, budget=_Countdown(3))
    recs = {f.file: f for f in result.files}
    assert recs["a.log"].note and recs["a.log"].note.startswith("cut after")
    assert 0 < recs["a.log"].bytes < (root / "a.log").stat().st_size
    assert recs["a.log"].events >= 1
    assert recs["b.log"].kind == "unreadable" and recs["b.log"].note.startswith("not read")
    assert any("cut short by the budget: a.log" in w for w in result.warnings)


def test_memory_budget(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "rank0.log").write_text(WATCHDOG)
    report, _, _ = analyze(root, max_memory=1024)  # below any process's RSS
    assert any("memory budget of 1 KiB reached" in w for w in report.warnings)
    report, _, result = analyze(root, max_memory=64 * 1024**3)
    assert result.files[0].events >= 1 and not any("budget" in w for w in report.warnings)


def test_parse_size() -> None:
    assert parse_size("2G") == 2 * 1024**3
    assert parse_size("512M") == 512 * 1024**2
    assert parse_size("1.5GiB") == int(1.5 * 1024**3)
    assert parse_size("1000") == 1000
    for bad in ("", "two", "-1G", "0", "1X"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_cli_budget_options(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "rank0.log").write_text(WATCHDOG)
    run = [sys.executable, "-m", "crashscope", "analyze", str(root), "--format", "json"]
    p = subprocess.run(run + ["--max-memory", "lots"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--max-memory" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(run + ["--budget-s", "600", "--max-memory", "16G"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sources"][0]["events"] >= 1
    p = subprocess.run(run + ["--budget-s", "0"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr
    assert any("partial analysis" in w for w in json.loads(p.stdout)["warnings"])


# -- paths swapped after the scan -------------------------------------------------------------

def test_file_swapped_for_fifo_or_link_after_scan(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    (root / "a.log").write_text(WATCHDOG)
    (root / "b.log").write_text(WATCHDOG)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:secret\n")
    refs = {r.rel: r for r in bundle.scan(root) if isinstance(r, bundle.FileRef)}
    os.unlink(root / "a.log")
    os.mkfifo(root / "a.log")  # opening must not block
    os.unlink(root / "b.log")
    os.symlink(secret, root / "b.log")  # must not be followed
    for rel in ("a.log", "b.log"):
        items = list(bundle.open_ref(refs[rel]))
        assert len(items) == 1 and isinstance(items[0], bundle.Skipped), items


def test_directory_swapped_for_link_out_of_root_after_scan(tmp_path: Path) -> None:
    root = tmp_path / "job"
    (root / "node001").mkdir(parents=True)
    (root / "node001" / "dmesg.log").write_text("x\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "dmesg.log").write_text("root:secret\n")
    refs = [r for r in bundle.scan(root) if isinstance(r, bundle.FileRef)]
    (root / "node001" / "dmesg.log").unlink()
    (root / "node001").rmdir()
    os.symlink(outside, root / "node001")  # the last name is a regular file: O_NOFOLLOW alone lets it through
    items = list(bundle.open_ref(refs[0]))
    assert len(items) == 1 and isinstance(items[0], bundle.Skipped)
    assert "inside the job directory" in items[0].reason


def test_holes_of_a_sparse_file_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "job"
    root.mkdir()
    p = root / "rank0.log"
    with open(p, "wb") as fh:
        fh.write(WATCHDOG.encode())
        fh.seek(20 * 1024**3)  # a 20 GiB hole: reading it would take minutes
        fh.write(b"\n" + WATCHDOG.replace("Rank 3", "Rank 4").replace("[rank3]", "[rank4]").encode())
    if p.stat().st_blocks * 512 > 64 * 1024 * 1024:
        pytest.skip("this file system does not keep holes")
    result = ingest(root)
    rec = result.files[0]
    assert rec.bytes < 16 * 1024 * 1024  # the data blocks, not 20 GiB of NULs
    ev = result.events.filter(pl.col("kind") == "collective_timeout")
    assert sorted(ev["rank"].to_list()) == [3, 4]
    assert ev["line"].to_list() == [1, 3]  # line 2 is the hole (NULs) and its newline: numbering as a plain split


def test_python_polars_and_streaming_paths_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Few hits are split in Python, many in polars, large files stream through threads:
    all three must give the same events (the golden inputs of the line sources, plus a flood)."""
    golden = Path(__file__).parent / "golden"
    root = tmp_path / "job"
    root.mkdir()
    for src in ("nccl", "pytorch", "kernel", "slurm"):
        for case in sorted((golden / src).glob("*")):
            if ".expected." not in case.name and case.is_file() and case.name != "README.md":
                (root / f"{src}-{case.name}").write_bytes(case.read_bytes() + (WARN * 50).encode() + case.read_bytes())

    def events() -> list[dict]:
        return ingest(root, workers=1).events.sort(["file", "line", "source", "kind", "message"]).to_dicts()

    (root / "separator.log").write_bytes(b"a\x1fb\n" + (WARN * 3).encode())  # goes alone, not in the bulk scan
    base = events()
    monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)  # each small file scanned on its own
    assert events() == base
    monkeypatch.setattr(ingest_mod, "SMALL_HITS", 0)  # polars split
    assert events() == base
    monkeypatch.setattr(ingest_mod, "BLOCK_BYTES", 4096)  # many blocks: threads
    assert events() == base


_JOBS = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("job", sorted([*(_JOBS / "jobs").glob("*/"), *(_JOBS / "recorded").glob("*/")])[::5], ids=lambda p: p.name)
def test_bulk_scan_of_small_files_is_the_plain_path(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path (small files scanned together) and the plain one (each on its own)
    give the same events, file records and warnings on the fixture corpus."""

    def run() -> tuple[list[dict], list[tuple], list[str]]:
        r = ingest(job, workers=1)
        recs = [(f.file, f.kind, f.events, f.bytes, f.lines, f.note) for f in r.files]
        return r.events.sort(["file", "line", "source", "kind", "message"]).to_dicts(), recs, r.warnings

    fast = run()
    monkeypatch.setattr(ingest_mod, "SMALL_FILE_BYTES", 0)
    assert run() == fast
