"""Shards: a job's events split per node, stored, read back and analysed give the verdict the
direct analysis gives; a broken shard costs itself, not the analysis."""

from __future__ import annotations

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
