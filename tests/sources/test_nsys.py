"""The nsys source: the real 2024.5 export (when shared/ is there) and multi-rank exports
written on its schema (tests/data/nsys/schema-3.13.2.sql), through the real ingest."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from crashscope.ingest import ingest
from crashscope.sources import nsys
from crashscope.sources.nsys import parse_nccl_kernel
from crashscope.testing import parse_text

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "data" / "nsys" / "single-gpu-cuda-2024.5.sqlite"
EPOCH = 1_789_600_000_000_000_000  # 2026-09-16T23:06:40Z


def _fixture():
    spec = importlib.util.spec_from_file_location("nsys_fixture", ROOT / "tests" / "data" / "nsys" / "nsys_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


F = _fixture()


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"])


# -- the real export -------------------------------------------------------------------------------------

@pytest.mark.skipif(not REAL.exists(), reason="the real nsys export (shared/data/nsys) is not on this machine")
def test_real_export_2024_5() -> None:
    data = REAL.read_bytes()
    assert nsys.SOURCE.sniff(data[:8192].decode("utf-8", "replace"), REAL.name) >= 0.9
    df, warnings = parse_text("nsys", data, REAL.name)
    assert warnings == []
    inv = df.filter(pl.col("kind") == "gpu_inventory").to_dicts()
    assert [(r["host"], r["gpu"], r["gpu_index"]) for r in inv] == [("LUBEN", "0000:01:00.0", 0)]
    assert _attrs(inv[0])["name"] == "NVIDIA GeForce GTX 1050"
    (s,) = df.filter(pl.col("kind") == "trace_summary").to_dicts()
    a = _attrs(s)
    con = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    n, first, epoch = con.execute(
        "SELECT COUNT(*), MIN(start), (SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    assert a["kernels"] == n == 153
    assert a["nccl_kernels"] == 0 and a["ops"] == {}
    assert (a["nsys_version"], a["schema_version"]) == ("2024.5.1.113", "3.13.2")
    assert s["pid"] == 56747 and a["process"] == "build/cuda_bitonic_sort"
    # wall time = session start (UTC ns) + the first kernel's start on the session timeline
    assert int(s["time"].timestamp() * 1e6) == (epoch + first) // 1000
    assert s["time_quality"] == "exact"
    assert df.filter(pl.col("kind") == "collective_trace").height == 0  # no NCCL in it


# -- NCCL kernel names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,want", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", {"op": "AllReduce", "redop": "Sum", "dtype": "bf16", "algo": "RING", "proto": "LL"}),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgs4K)", {"op": "ReduceScatter", "dtype": "f32", "algo": "RING"}),
    ("ncclDevKernel_AllReduce_Sum_f8e4m3_TREE_LL", {"op": "AllReduce", "dtype": "f8e4m3", "algo": "TREE", "proto": "LL"}),
    ("ncclDevKernel_AllGather_RING_LL", {"op": "AllGather", "algo": "RING", "proto": "LL"}),
    ("ncclDevKernel_SendRecv", {"op": "SendRecv"}),
    ("ncclDevKernel_Generic", {"op": "Generic"}),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", {"op": "AllReduce", "algo": "RING", "proto": "LL", "redop": "Sum", "dtype": "f32"}),
    ("ncclKernel_AllReduce_COLLNET_DIRECT_SIMPLE_Sum___nv_bfloat16", {"op": "AllReduce", "algo": "COLLNET_DIRECT", "proto": "SIMPLE", "dtype": "bf16"}),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", {"op": "SendRecv", "dtype": "i8"}),
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_Sum_bf16", {"op": "AllReduce", "redop": "Sum", "dtype": "bf16", "algo": "RSxLD_AGxST"}),
])
def test_nccl_kernel_names(name: str, want: dict) -> None:
    got = parse_nccl_kernel(name)
    assert got is not None
    for k, v in want.items():
        assert got.get(k) == v, (k, got)


@pytest.mark.parametrize("name", ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "void flash_fwd_kernel<...>(Flash_fwd_params)",
                                  "ncclInternalKernel", ""])
def test_other_kernels_are_not_nccl(name: str) -> None:
    assert parse_nccl_kernel(name) is None


# -- multi-rank exports on the real schema, through the ingest ---------------------------------------------

def _job(tmp_path: Path, **kw) -> tuple[dict, pl.DataFrame, list[str]]:
    job = F.plan_job(nodes=2, gpus_per_node=4, seed=kw.pop("seed", 1), **{k: kw.pop(k) for k in list(kw) if k in ("slow_rank", "hung_rank", "slow_factor")})
    F.write_job(tmp_path, job, hosts=["node001", "node002"], epoch_ns=EPOCH, **kw)
    res = ingest(tmp_path)
    return job, res.events, res.warnings


def test_eight_ranks_straggler_and_hung_rank(tmp_path: Path) -> None:
    job, ev, warnings = _job(tmp_path, slow_rank=5, hung_rank=6)
    listing = sorted(str(p) for p in tmp_path.rglob("*"))
    assert not [w for w in warnings if "nsys" in w and "binary" in w]
    summ = ev.filter(pl.col("kind") == "trace_summary").sort("rank")
    assert summ["rank"].to_list() == list(range(8))
    assert summ.filter(pl.col("rank") == 5)["host"].item() == "node002"
    assert summ.filter(pl.col("rank") == 5)["gpu"].item() == "0000:2a:00.0"  # local rank 1 of node002 -> its GPU's bus id
    per = {r["rank"]: _attrs(r) for r in summ.to_dicts()}
    # the straggler: slowest compute, shortest NCCL kernels, per step
    assert max(per, key=lambda r: per[r]["step_compute_ms_median"]) == 5
    assert min(per, key=lambda r: per[r]["step_nccl_ms_median"]) == 5
    assert per[0]["ops"]["AllReduce"]["dtype"] == "bf16" and per[0]["ops"]["AllReduce"]["algo"] == "RING"
    assert per[0]["steps"] == 20 and per[6]["steps"] == 19 and per[6]["open_step"] == "step 19"
    last = {r["rank"]: r for r in ev.filter(pl.col("kind") == "collective_trace").to_dicts()}
    assert _attrs(last[6])["state"] == "launched_not_completed" and _attrs(last[6])["op"] == "AllReduce"
    assert _attrs(last[6])["seq"] == 20 and last[6]["severity"] == "warning"
    assert all(_attrs(last[r])["state"] == "completed" and _attrs(last[r])["seq"] == 20 for r in range(8) if r != 6)
    # exact UTC time: session start + the kernel's start
    st = job["plan"][0][-1]["nccl_start"]
    assert int(last[0]["time"].timestamp() * 1e6) == (EPOCH + st) // 1000
    # reading again writes nothing next to the traces (no -journal, no temp file)
    ingest(tmp_path)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == listing


def test_old_nccl_names_and_rank_from_the_captured_environment(tmp_path: Path) -> None:
    _, ev, _ = _job(tmp_path, slow_rank=2, old_names=True, rank_in_env=True)
    summ = ev.filter(pl.col("kind") == "trace_summary")
    assert sorted(summ["rank"].to_list()) == list(range(8))  # file names carry no rank: SLURM_PROCID
    assert sorted(summ["local_rank"].to_list()) == [0, 0, 1, 1, 2, 2, 3, 3]
    a = _attrs(summ.filter(pl.col("rank") == 2).row(0, named=True))
    assert a["ops"]["AllReduce"]["dtype"] == "f32"  # ncclKernel_AllReduce_RING_LL_Sum_float


def test_one_event_set_per_process_not_per_kernel(tmp_path: Path) -> None:
    job = F.plan_job(nodes=1, gpus_per_node=2, seed=3, steps=400)
    F.write_job(tmp_path, job, hosts=["node001"], epoch_ns=EPOCH)
    ev = ingest(tmp_path).events
    assert ev.height == 6  # per rank: inventory, summary, last collective (2000 kernels each)
    a = _attrs(ev.filter(pl.col("kind") == "trace_summary").row(0, named=True))
    assert a["kernels"] == 2000 and len(a["step_compute_ms"]) == nsys.MAX_STEPS_KEPT


def test_cut_export_warns_and_does_not_raise(tmp_path: Path) -> None:
    job = F.plan_job(nodes=1, gpus_per_node=2, seed=4)
    (p, _) = F.write_job(tmp_path, job, hosts=["node001"], epoch_ns=EPOCH)
    data = p.read_bytes()
    df, warnings = parse_text("nsys", data[: len(data) // 3], p.name)
    assert warnings and any("nsys export" in w.reason or "SQLite" in w.reason for w in warnings)


def test_sqlite_that_is_not_an_export(tmp_path: Path) -> None:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE wandb_history (step INTEGER, loss REAL)")
    data = con.serialize()
    df, warnings = parse_text("nsys", data, "wandb.db")
    assert df.height == 0 and any("not an nsys export" in w.reason for w in warnings)


def test_stats_csv_units_are_converted() -> None:
    text = ("Time (%),Total Time (ms),Instances,Avg (ms),Med (ms),Min (ms),Max (ms),StdDev (ms),Name\n"
            "60.0,1500.5,10,150.05,150.0,140.0,160.0,5.0,ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgs4K)\n"
            "40.0,1000.0,30,33.3,33.3,30.0,36.0,1.0,\"void gemm<float, 4>(Params)\"\n")
    df, warnings = parse_text("nsys", text, "rank1_cuda_gpu_kern_sum.csv")
    assert warnings == []
    a = _attrs(df.row(0, named=True))
    assert (a["nccl_ms"], a["compute_ms"], a["kernels"], a["nccl_kernels"]) == (1500.5, 1000.0, 40, 10)
    assert a["ops"]["AllReduce"]["max_ms"] == 160.0


def test_text_that_is_not_a_stats_report_is_not_claimed() -> None:
    assert nsys.SOURCE.sniff("timestamp, index, pci.bus_id, temperature.gpu\n", "gpu.csv") == 0.0
    assert nsys.SOURCE.sniff("Name,Value\nfoo,1\n", "x.csv") == 0.0


def test_kernel_cut_by_the_capture_end_did_not_end(tmp_path: Path) -> None:
    """Ranks waiting in the collective a hung rank never completes: their AllReduce kernels
    run until nsys stops (the kernel's end is the capture's end)."""
    job = F.plan_job(nodes=1, gpus_per_node=4, seed=5, hung_rank=2)
    for r in range(4):
        if r != 2:
            job["plan"][r][-1]["nccl_end"] = job["capture_end"]
    F.write_job(tmp_path, job, hosts=["node001"], epoch_ns=EPOCH)
    last = {r["rank"]: _attrs(r) for r in ingest(tmp_path).events.filter(pl.col("kind") == "collective_trace").to_dicts()}
    assert {r: a["state"] for r, a in last.items()} == {0: "running_at_capture_end", 1: "running_at_capture_end",
                                                        2: "launched_not_completed", 3: "running_at_capture_end"}
    assert not any(a["ended"] for a in last.values())
