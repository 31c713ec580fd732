"""Shards: a job's events split per node, stored, read back and analysed give the verdict the
direct analysis gives; a broken shard costs itself, not the analysis."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import polars as pl
import pytest

from crashscope.pipeline import analyze
from crashscope.ingest import ingest
from crashscope.schema import EVENT_SCHEMA
from crashscope.shards import EVENTS, META, from_storage, read_spool, to_storage, write_shard

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
CASES = ["exception_rank1_srun", "timelimit_srun", "preempt_cancel_srun", "oom_rank3_srun"]


def _split_into_shards(src: Path, spool: Path) -> int:
    """One shard per host (host-less events, e.g. the job's stdout, in ``_job``), as the
    nodes' epilogs would write them."""
    res = ingest(src)
    ev = res.events
    n = 0
    for (host,), part in ev.group_by(["host"], maintain_order=True):
        name = host or "_job"
        write_shard(spool, name, part, node=host, job_id="1", files=[{"file": f.file, "kind": f.kind, "events": f.events} for f in res.files if name == "_job"],
                    warnings=[], seconds=0.0)
        n += 1
    return n


@pytest.mark.parametrize("case", CASES)
def test_spool_of_shards_gives_the_direct_verdict(tmp_path, case):  # type: ignore[no-untyped-def]
    src = FIXTURES / case
    if not src.is_dir():
        pytest.skip(f"fixture {case} missing")
    direct, _, _ = analyze(src)
    spool = tmp_path / "1"
    assert _split_into_shards(src, spool) >= 2
    merged, _, res = analyze(spool)
    assert merged.cause == direct.cause
    assert set(merged.implicated.nodes) == set(direct.implicated.nodes)
    assert res.events.height == ingest(src).events.height


def test_storage_round_trip_and_unknown_values_drop():
    ev = pl.DataFrame({"time": [None], "time_quality": ["missing"], "source": ["slurm"], "kind": ["job_state"], "severity": ["error"],
                       "message": ["x"], "attrs": ["{}"]}, strict=False)
    ev = from_storage(ev)[0]
    assert ev.schema == EVENT_SCHEMA
    stored = to_storage(ev)
    assert all(stored.schema[c] == pl.String for c in ("source", "kind", "severity", "time_quality"))
    future = stored.with_columns(pl.lit("a_kind_from_a_newer_crashscope").alias("kind"))
    back, dropped = from_storage(pl.concat([stored, future]))
    assert back.height == 1 and dropped == 1


def test_a_corrupt_shard_is_a_warning(tmp_path):  # type: ignore[no-untyped-def]
    src = FIXTURES / "exception_rank1_srun"
    if not src.is_dir():
        pytest.skip("fixture missing")
    spool = tmp_path / "1"
    _split_into_shards(src, spool)
    bad = spool / "n9.shard"
    bad.mkdir()
    (bad / META).write_text(json.dumps({"format": "crashscope-shard/1", "node": "n9"}))
    (bad / EVENTS).write_bytes(b"PAR1 not really parquet")
    other = spool / "x.shard"
    other.mkdir()
    (other / META).write_text('{"format": "something-else/9"}')
    sp = read_spool(spool)
    assert sp is not None
    assert any("n9.shard: unreadable shard events" in w for w in sp.warnings)
    assert any("x.shard: not a crashscope-shard/1 shard" in w for w in sp.warnings)
    report, _, _ = analyze(spool)
    assert report.cause == analyze(src)[0].cause


def test_not_a_spool():
    assert read_spool(FIXTURES / "exception_rank1_srun") is None


@functools.lru_cache(maxsize=1)
def _fixture_events() -> pl.DataFrame:
    return ingest(FIXTURES / "exception_rank1_srun").events


def _spool_with(tmp_path: Path, odd: str) -> Path:
    """A spool of the fixture's shards (one per host) plus one shard of an odd kind."""
    events = _fixture_events()
    spool = tmp_path / "1"
    for (host,), part in events.group_by(["host"], maintain_order=True):
        write_shard(spool, host or "_job", part, node=host, job_id="1", files=[{"file": f"{host}.log", "kind": "pytorch", "events": part.height}],
                    warnings=[f"w {host}"], seconds=0.0)
    stored = to_storage(events.head(6))
    d = spool / "m-odd.shard"  # sorts between the hosts' shards: its events land mid-spool
    d.mkdir()
    meta: dict[str, object] = {"format": "crashscope-shard/1", "node": "m-odd", "events": stored.height, "warnings": ["from m-odd"]}
    if odd == "newer_values":  # two rows with a kind this version does not know: dropped, counted on m-odd
        stored = stored.with_columns(pl.when(pl.int_range(pl.len()) < 2).then(pl.lit("a_kind_from_a_newer_crashscope")).otherwise(pl.col("kind")).alias("kind"))
    elif odd == "newer_column":  # a column this version does not know: left out
        stored = stored.with_columns(pl.lit(1).alias("a_newer_column"))
    elif odd == "older_columns":  # an older shard without some columns: null there
        stored = stored.drop("gpu_index", "year_assumed")
    elif odd == "other_types":  # rank as Int64, time in microseconds: the multi-file read refuses, each shard alone
        stored = stored.with_columns(pl.col("rank").cast(pl.Int64), pl.col("time").dt.cast_time_unit("us"))
    elif odd == "reordered":  # the columns in another order (another version's schema order): read by name
        stored = stored.select(list(reversed(stored.columns)))
    elif odd == "no_count":
        del meta["events"]
    elif odd == "wrong_count":
        meta["events"] = stored.height + 1
    stored.write_parquet(d / EVENTS)
    if odd == "corrupt_inside":  # parquet magic at both ends, garbage between
        (d / EVENTS).write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    (d / META).write_text(json.dumps(meta))
    return spool


ODD = ["none", "newer_values", "newer_column", "older_columns", "other_types", "reordered", "no_count", "wrong_count", "corrupt_inside"]


@pytest.mark.parametrize("odd", ODD)
def test_spool_read_is_each_shard_read_alone(tmp_path, odd):  # type: ignore[no-untyped-def]
    """read_spool (one multi-file read, one conversion) gives exactly what reading each shard
    alone gives: events in shard order, warnings (dropped rows counted on their shard), files."""
    from crashscope.shards import read_shard, shard_dirs

    spool = _spool_with(tmp_path, odd)
    if odd == "none":
        (spool / "m-odd.shard" / EVENTS).unlink()
        (spool / "m-odd.shard" / META).unlink()
        (spool / "m-odd.shard").rmdir()
    alone = [read_shard(d) for d in shard_dirs(spool)]
    sp = read_spool(spool)
    assert sp is not None
    want = pl.concat([e for e, _, _ in alone if e.height])
    assert sp.events.schema == EVENT_SCHEMA
    assert sp.events.to_dicts() == want.to_dicts()
    assert sp.warnings == [w for _, _, ws in alone for w in ws]
    assert [f.file for f in sp.files] == [f["file"] for _, m, _ in alone for f in (m.get("coverage") or {}).get("files") or []]
    if odd == "newer_values":
        assert "m-odd.shard: 2 event(s) with values this crashscope does not know were dropped" in sp.warnings
    if odd == "corrupt_inside":
        assert any(w.startswith("m-odd.shard: unreadable shard events") for w in sp.warnings)
    base = _fixture_events().height
    assert sp.events.height == base + {"none": 0, "newer_values": 4, "corrupt_inside": 0}.get(odd, 6)


def test_a_whole_spool_is_one_read(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """Shards as write_shard writes them are decoded in one multi-file read: none alone."""
    import crashscope.shards as shards

    spool = _spool_with(tmp_path, "newer_values")
    def alone(*a: object) -> None:
        raise AssertionError("a whole shard was read alone")
    monkeypatch.setattr(shards, "_parse_events", alone)
    sp = read_spool(spool)
    assert sp is not None and sp.events.height == _fixture_events().height + 4


def test_the_merge_secret_filter_skips_only_strings_it_would_not_change():
    """scrub_report (the merge, on every string of a report) leaves a string without any
    pattern's fixed part as it is: the same output as running every pattern, on a real
    report's strings and on strings made to hit each pattern, case-folding included."""
    from crashscope.epilog.secrets import _scrub_all, scrub, scrub_report
    from crashscope.report.render import render_json

    report, _, _ = analyze(FIXTURES / "exception_rank1_srun")
    strings: list[str] = []
    report.map_strings(lambda s: strings.append(s) or s)
    made = ["WANDB_API_KEY=0123456789abcdef", "my_passwd: 'x y'", "tO\u212aEN=abc", "pa\u017f\u017fword=hunter2", "credent\u0130al=1",
            "ghp_" + "a" * 30, "x github_pat_" + "b" * 22, "hf_" + "c" * 21, "AKIAIOSFODNN7EXAMPLE", "xoxb-1234567890ab",
            "Authorization: bearer abcdefgh.ij", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
            "sk-" + "d" * 24, "https://bob:hunter2@example.org/x", "plain text", "node001 rank 3", ""]
    for s in strings + made:
        assert scrub(s) == (_scrub_all(s) if s else s), s
    assert [s for s in made if scrub(s) == s] == ["plain text", "node001 rank 3", ""]
    assert render_json(scrub_report(report)) == render_json(report.map_strings(_scrub_all))


def test_the_controller_waits_for_shards_as_they_come(tmp_path):  # type: ignore[no-untyped-def]
    """wait_for_shards: a shard written while it waits counts, a folder without shard.json
    does not, and the nodes still missing at the deadline come back in node order."""
    import threading
    import time

    from crashscope.epilog.merge import wait_for_shards

    ev = _fixture_events().head(3)
    job = tmp_path / "7"
    write_shard(job, "n1", ev, node="n1", job_id="7", files=[], warnings=[], seconds=0.0)
    (job / "n3.shard").mkdir()  # a shard still being made elsewhere, or a foreign folder
    late = threading.Timer(0.3, lambda: write_shard(job, "n2", ev, node="n2", job_id="7", files=[], warnings=[], seconds=0.0))
    late.start()
    try:
        assert wait_for_shards(job, ["n4", "n3", "n2", "n1"], time.monotonic() + 1.5) == ["n4", "n3"]
    finally:
        late.cancel()
    assert wait_for_shards(job, ["n1", "n2"], time.monotonic() + 5) == []
    assert wait_for_shards(tmp_path / "none", ["n1"], time.monotonic()) == ["n1"]


def _split_by_file(src: Path, spool: Path) -> int:
    """Shards as the epilog makes them: each file read whole by one shard (a node's files
    by its shard, the job's stdout and records by ``_job``), with its file records."""
    from crashscope.shards import file_records

    res = ingest(src)
    ev = res.events
    owner = ev.group_by("file", maintain_order=True).agg(pl.col("host").drop_nulls().first().alias("_owner"))
    ev = ev.join(owner, on="file", how="left", maintain_order="left")
    records = {r.file: r for r in res.files}
    eventless = [r for r in res.files if r.file not in set(owner["file"].to_list())]
    n = 0
    for (host,), part in ev.group_by(["_owner"], maintain_order=True):
        files = [records[f] for f in part["file"].unique(maintain_order=True).to_list() if f in records]
        write_shard(spool, host or "_job", part.drop("_owner"), node=host, job_id="1",
                    files=file_records(files + (eventless if host is None else [])), warnings=[], seconds=0.0)
        n += 1
    return n


# Jobs of several hosts with GPU telemetry, versions, kernel logs. The last two have an
# unstamped line whose nearest line holds the stamps of two sources: with an unstable (file,
# line) sort it took whichever the frame's other rows put first, so the merge differed.
MERGE_CASES = ["recorded/nodekill_n2_srun", "jobs/fabric_timeout_ib_node002", "jobs/xid79_node001",
               "jobs/storage_stall_sharded_node002_rank3", "jobs/driver_drift_nccl_node002", "jobs/gpu_throttle_node001_gpu0"]


@pytest.mark.parametrize("case", MERGE_CASES)
def test_merged_report_is_the_direct_report(tmp_path, case):  # type: ignore[no-untyped-def]
    """The merge of per-node shards (``analyze(<spool>)``) writes the report the analysis of
    the whole job directory writes, but for what needs the files themselves (the lines around
    each evidence line, the bytes read) and the run's own facts (``analysis``: root, seconds)."""
    src = FIXTURES.parent / case
    if not src.is_dir():
        pytest.skip(f"fixture {case} missing")
    spool = tmp_path / "1"
    assert _split_by_file(src, spool) >= 3

    def comparable(report) -> dict:  # type: ignore[no-untyped-def]
        d = report.to_dict()
        del d["analysis"]
        d["coverage"].pop("bytes")
        d["sources"] = sorted(d["sources"], key=lambda s: s["file"])  # in shard order when merged
        for e in d["evidence"]:
            e.pop("context")
        return d

    direct = comparable(analyze(src)[0])
    merged = comparable(analyze(spool)[0])
    assert merged["evidence"] and merged == direct
