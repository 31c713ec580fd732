"""The flight_recorder source on real torch 2.13 gloo dumps (``fixtures/recorded_fr``, written by
``benchmarks/lab/fr_record.py``), both forms, the restricted unpickler, and bad input."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from crashscope.ingest import ingest
from crashscope.sources import flight_recorder as fr
from crashscope.sources import sniff_scores
from crashscope.sources.base import decode
from crashscope.testing import parse_text

ROOT = Path(__file__).resolve().parents[2]
HANG = ROOT / "fixtures" / "recorded_fr" / "hang_rank2" / "fr"


def _rows(df):  # type: ignore[no-untyped-def]
    return [dict(r, attrs=json.loads(r["attrs"] or "{}")) for r in df.iter_rows(named=True)]


def _sniff_text(data: bytes) -> str:
    return decode(data[:8192])[0]  # what the ingest hands the sniffers


def test_real_pickle_and_json_dumps_give_the_same_entries() -> None:
    pk = HANG / "nccl_trace_rank_3"
    js = HANG / "nccl_trace_rank_3.json"
    a, wa = parse_text("flight_recorder", pk.read_bytes(), pk.name)
    b, wb = parse_text("flight_recorder", js.read_bytes(), js.name)
    assert not wa and not wb
    ra, rb = _rows(a), _rows(b)
    assert ra[0]["kind"] == "trace_dump" and ra[0]["attrs"]["format"] == "pickle" and rb[0]["attrs"]["format"] == "json"
    assert ra[0]["attrs"]["version"] == rb[0]["attrs"]["version"] == "2.10"
    assert {r["rank"] for r in ra + rb} == {3}
    key = lambda r: (r["attrs"]["pg"], r["attrs"]["seq"], r["attrs"]["op"], json.dumps(r["attrs"]["input_sizes"]), r["time"])  # noqa: E731
    ea = [key(r) for r in ra if r["kind"] == "collective"]
    eb = [key(r) for r in rb if r["kind"] == "collective"]
    assert ea == eb and len(ea) == ra[0]["attrs"]["entries"] > 0
    # rank 3 sits in the tensor-parallel group "2" with rank 2 and got one collective further there
    tp = [r["attrs"] for r in ra if r["kind"] == "collective" and r["attrs"]["pg"] == "2"]
    assert tp and tp[-1]["pg_desc"] == "TENSOR_PARALLEL_GROUP" and tp[-1]["seq"] == 6
    # only the pickle has the stack frames; the JSON writes 0 for "never started": not a time
    assert all("frame" in r["attrs"] for r in ra[1:]) and not any("frame" in r["attrs"] for r in rb[1:])
    assert not any("started_ns" in r["attrs"] for r in rb[1:])
    assert all(r["time_quality"] == "exact" for r in ra[1:])


def test_gloo_header_names_the_group_differently_from_the_entries() -> None:
    df, _ = parse_text("flight_recorder", (HANG / "nccl_trace_rank_0").read_bytes(), "nccl_trace_rank_0")
    rows = _rows(df)
    assert rows[0]["attrs"]["pg_config"] == {"": {"desc": "", "ranks": []}}
    assert {(r["attrs"]["pg"], r["attrs"]["pg_desc"]) for r in rows[1:]} >= {("0", "default_pg"), ("1", "TENSOR_PARALLEL_GROUP")}


def test_sniff_pickle_and_json_dumps_and_not_other_pickles() -> None:
    for f in (HANG / "nccl_trace_rank_0", HANG / "nccl_trace_rank_0.json"):
        (score, src), *_ = sniff_scores(_sniff_text(f.read_bytes()), f.name)
        assert src.name == "flight_recorder" and score >= 0.9
    other = pickle.dumps({"state_dict": {"w": [1.0, 2.0]}, "epoch": 3}, protocol=4)
    assert fr.SOURCE.sniff(_sniff_text(other), "ckpt.pkl") == 0.0
    assert fr.SOURCE.sniff('{"message": {"message": "x"}}', "error.json") == 0.0


def test_ingest_reads_the_binary_dump_without_a_binary_warning(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    for f in ("nccl_trace_rank_0", "nccl_trace_rank_2.json"):
        (tmp_path / "fr" / f).write_bytes((HANG / f).read_bytes())
    res = ingest(tmp_path)
    kinds = {r.file: r.kind for r in res.files}
    assert kinds == {"fr/nccl_trace_rank_0": "flight_recorder", "fr/nccl_trace_rank_2.json": "flight_recorder"}
    assert not [w for w in res.warnings if "binary" in w]
    assert set(res.events["rank"].to_list()) == {0, 2}


class _Boom:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_malicious_pickle_never_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    boom = _Boom()
    boom.marker = str(marker)  # type: ignore[attr-defined]
    # shaped like a dump so that it is sniffed as one and reaches the loader
    data = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [{"record_id": 0, "frames": boom}]}, protocol=protocol)
    assert fr.SOURCE.sniff(_sniff_text(data), "nccl_trace_rank_0") >= 0.9
    with pytest.raises(pickle.UnpicklingError):
        fr.load_restricted(data)
    df, warnings = parse_text("flight_recorder", data, "nccl_trace_rank_0")
    assert df.height == 0 and any("refused" in w.reason for w in warnings)
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "nccl_trace_rank_0").write_bytes(data)
    res = ingest(tmp_path / "fr")
    assert res.events.height == 0 and any("not loaded" in w for w in res.warnings)
    assert not marker.exists()
    pickle.loads(data)  # the control: the same bytes do run code with a plain unpickler
    assert marker.exists()


def test_restricted_unpickler_loads_plain_containers() -> None:
    plain = {"a": [1, 2.5, None, True, -(2**70)], "b": ("x", "y"), "c": {"d": []}}
    assert fr.load_restricted(pickle.dumps(plain, protocol=2)) == plain  # what torch's Pickler writes
    rich = dict(plain, e=b"y", f={1, 2}, g=frozenset({3}))
    assert fr.load_restricted(pickle.dumps(rich, protocol=5)) == rich  # opcodes of their own from protocol 3/4
    with pytest.raises(pickle.UnpicklingError, match="_codecs.encode refused"):
        fr.load_restricted(pickle.dumps({"e": b"y"}, protocol=2))  # protocol 2 builds bytes through a global


def test_truncated_and_garbage_dumps_cost_a_warning() -> None:
    data = (HANG / "nccl_trace_rank_1").read_bytes()
    for cut in (len(data) // 3, len(data) // 2, len(data) - 1):
        df, warnings = parse_text("flight_recorder", data[:cut], "nccl_trace_rank_1")
        assert df.height == 0 and warnings
    df, warnings = parse_text("flight_recorder", b"\x80\x02" + os.urandom(4000), "nccl_trace_rank_1")
    assert df.height == 0 and warnings
    df, warnings = parse_text("flight_recorder", b'{"version": "2.10", "entries": 7}', "rank_1.json")
    assert [r["kind"] for r in _rows(df)] == ["trace_dump"] and any("not a list" in w.reason for w in warnings)
    df, warnings = parse_text("flight_recorder", pickle.dumps(["not", "a", "dict"], protocol=2), "rank_1")
    assert df.height == 0 and warnings


def _dump(**over):  # type: ignore[no-untyped-def]
    entry = {"record_id": 4, "pg_id": 0, "process_group": ["default_pg", "nccl"], "collective_seq_id": 4, "p2p_seq_id": 0,
             "op_id": 4, "profiling_name": "allreduce", "time_created_ns": 1796132982629057791, "input_sizes": [[8]],
             "input_dtypes": ["Float"], "output_sizes": [[8]], "output_dtypes": ["Float"], "state": "started",
             "time_discovered_started_ns": 1796132982629957791, "time_discovered_completed_ns": 0, "retired": False,
             "timeout_ms": 600000, "is_p2p": False, "thread_id": "1", "thread_name": "python3"}
    d = {"version": "2.10", "comm_lib_version": "", "pg_config": {"default_pg": {"name": "default_pg", "desc": "nccl", "ranks": "[0,1]"}},
         "pg_status": {"0": {"last_enqueued_collective": "4", "last_started_collective": "4", "last_completed_collective": "3"}},
         "entries": [entry]}
    d.update(over)
    return d


def test_torchcomms_json_variant() -> None:
    # torchcomms comms/torchcomms/hooks/fr/FlightRecorder.cpp dump_json(): the same keys, the
    # communicator's (name, backend) as the process group, pg_status numbers as strings,
    # ranks_str without spaces, 0 for "never".
    df, warnings = parse_text("flight_recorder", json.dumps(_dump()), "comm_lib_trace_rank_1")
    rows = _rows(df)
    assert not warnings and [r["rank"] for r in rows] == [1, 1]
    assert rows[0]["attrs"]["pg_status"] == {"0": {"last_enqueued": 4, "last_started": 4, "last_completed": 3}}
    assert rows[0]["attrs"]["pg_config"] == {"default_pg": {"desc": "nccl", "ranks": [0, 1]}}
    e = rows[1]["attrs"]
    assert (e["pg"], e["pg_desc"], e["seq"], e["state"], e["started_ns"]) == ("default_pg", "nccl", 4, "started", 1796132982629957791)
    assert "completed_ns" not in e


@pytest.mark.parametrize("name, rank", [("nccl_trace_rank_12", 12), ("rank_3", 3), ("job_dump_5", 5), ("comm_lib_trace_rank_7.json", 7),
                                        ("trace_9", 9)])
def test_rank_from_file_name_variants(name: str, rank: int) -> None:
    df, _ = parse_text("flight_recorder", json.dumps(_dump()), name)
    assert set(df["rank"].to_list()) == {rank}


def test_rank_key_wins_and_hostname_is_used() -> None:
    df, _ = parse_text("flight_recorder", pickle.dumps(_dump(rank=6, hostname="node007.cluster"), protocol=2), "nccl_trace_rank_1")
    assert set(df["rank"].to_list()) == {6} and set(df["host"].to_list()) == {"node007"}


def test_entries_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fr, "MAX_ENTRIES", 3)
    d = _dump()
    d["entries"] = [dict(d["entries"][0], record_id=i, collective_seq_id=i) for i in range(10)]
    df, warnings = parse_text("flight_recorder", pickle.dumps(d, protocol=2), "rank_0")
    seqs = [r["attrs"]["seq"] for r in _rows(df) if r["kind"] == "collective"]
    assert seqs == [7, 8, 9] and any("entries" in w.reason for w in warnings)
