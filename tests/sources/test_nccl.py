"""Explicit checks of the NCCL_DEBUG source (goldens in tests/golden/nccl cover the rest)."""

from __future__ import annotations

import json
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions
from crashscope.sources.nccl import PREFILTER, nccl_version_str
from crashscope.testing import parse_text

OPTS = ParseOptions(tz=ZoneInfo("Europe/Berlin"), tz_known=True, year=2026, month=9)


def _rows(text: str | bytes, **kw):
    df, warnings = parse_text("nccl", text, options=kw.pop("options", OPTS), **kw)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def test_ib_completion_every_version_shape():
    text = "\n".join([
        # <= 2.20
        "node001:2718:3140 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.10.1.3 remoteGid ::ffff:10.10.1.7",
        # 2.21-2.22
        "node001:2718:3140 [3] transport/net_ib.cc:1354 NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with status=4 opcode=1 len=0 vendor err 81 (Send)",
        # 2.23-2.30.4
        "[2026-03-02 14:05:12] node001:2718:3140 [3] transport/net_ib.cc:2312 NCCL WARN NET/IB: Got completion from peer 10.10.1.7<51234> with status=13 opcode=0 len=0 vendor err 244 (Send) localGid ::ffff:10.10.1.3 remoteGids::ffff:10.10.1.7 hca mlx5_3",
        # master
        "[2026-09-14 08:12:44.100512] node012:880:1012 [1] transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError) NCCL WARN NET/IB: Got completion from peer 10.0.3.21<33811> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_2",
    ])
    rows, warnings = _rows(text)
    assert not warnings
    assert [r["kind"] for r in rows] == ["network_error"] * 4
    assert [r["attrs"]["status"] for r in rows] == [12, 4, 13, 12]
    assert [r["attrs"]["status_name"] for r in rows] == [
        "IBV_WC_RETRY_EXC_ERR", "IBV_WC_LOC_PROT_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_RETRY_EXC_ERR"]
    assert [r["attrs"]["vendor_err"] for r in rows] == [129, 81, 244, 129]
    assert all(r["attrs"]["transport"] == "ib" and r["severity"] == "error" for r in rows)
    assert rows[0]["attrs"]["peer"] == "10.10.1.7" and rows[0]["attrs"]["peer_port"] == 51234
    assert rows[0]["attrs"]["remote_gid"] == "::ffff:10.10.1.7"
    assert rows[2]["attrs"]["hca"] == "mlx5_3" and rows[2]["attrs"]["remote_gid"] == "::ffff:10.10.1.7"
    assert rows[3]["attrs"]["hca"] == "mlx5_2" and rows[3]["attrs"]["func"] == "ncclIbLogCompletionWithError"
    assert rows[3]["host"] == "node012" and rows[3]["pid"] == 880 and rows[3]["gpu_index"] == 1
    # local time (Berlin, CEST) -> UTC
    assert str(rows[3]["time"]) == "2026-09-14 06:12:44.100512+00:00"
    assert rows[3]["time_quality"] == "exact"
    assert rows[0]["time"] is None and rows[0]["time_quality"] == "missing"


def test_prefix_found_behind_launcher_prefixes_and_other_text():
    text = "\n".join([
        " 12: node003:7001:7001 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "[default3]:node003:7004:7004 [3] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "[rank5]:node003:7006:7006 [5] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "some tool says: node003:7007:7007 [6] NCCL INFO NCCL version 2.21.5+cuda12.4",
    ])
    rows, warnings = _rows(text)
    assert not warnings
    assert [r["pid"] for r in rows] == [7001, 7004, 7006, 7007]
    assert rows[0]["attrs"]["srun_task"] == 12
    assert rows[1]["local_rank"] == 3
    assert rows[2]["rank"] == 5
    assert all(r["host"] == "node003" and r["attrs"]["version"] == "2.21.5" for r in rows)


def test_comm_init_rank_is_comm_local_not_the_event_rank():
    text = (
        "node004:51001:51001 [0] NCCL INFO ncclCommSplit comm 0x5601d9a00c10 rank 3 nranks 8 cudaDev 0 nvmlDev 0 "
        "busId 1b000 parent 0x5601d7f1a230 color 3 key 24 - Init COMPLETE\n"
    )
    rows, warnings = _rows(text)
    assert not warnings and len(rows) == 1
    r = rows[0]
    assert r["kind"] == "comm_init" and r["rank"] is None
    assert r["attrs"]["rank"] == 3 and r["attrs"]["nranks"] == 8 and r["attrs"]["phase"] == "complete"
    assert r["gpu"] == "0000:1b:00.0" and r["gpu_index"] == 0


def test_cuda_failures():
    text = "\n".join([
        "node001:1:1 [2] enqueue.cc:1045 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
        "node001:1:1 [2] include/alloc.h:127 NCCL WARN Cuda failure 2 'out of memory'",
        "node001:1:1 [2] enqueue.cc:99 NCCL WARN Cuda failure 'out of memory'",
    ])
    rows, _ = _rows(text)
    assert [r["kind"] for r in rows] == ["cuda_error", "cuda_oom", "cuda_oom"]
    assert rows[1]["attrs"]["code"] == 2 and rows[1]["attrs"]["error"] == "out of memory"


def test_error_stack_collapses_per_thread():
    text = "\n".join([
        "node001:10:20 [0] misc/socket.cc:49 NCCL WARN socketProgressOpt: Call to recv from 10.0.0.2<4000> failed : Connection reset by peer",
        "node001:10:20 [0] NCCL INFO misc/socket.cc:749 -> 6 (Connection reset by peer)",
        "node001:11:21 [1] NCCL INFO init.cc:1121 -> 2",  # other process: its own stack
        "node001:10:20 [0] NCCL INFO misc/socket.cc:790 -> 6",
        "node001:10:20 [0] NCCL INFO bootstrap.cc:650 (bootstrapRecv) -> 6",
    ])
    rows, _ = _rows(text)
    errs = [r for r in rows if r["kind"] == "nccl_error"]
    assert len(errs) == 2
    a = next(r for r in errs if r["pid"] == 10)
    assert a["attrs"]["frames"] == ["misc/socket.cc:749", "misc/socket.cc:790", "bootstrap.cc:650"]
    assert a["attrs"]["result"] == "ncclRemoteError" and a["attrs"]["warn_line"] == 1
    assert a["attrs"]["errno_text"] == "Connection reset by peer" and a["line"] == 2
    b = next(r for r in errs if r["pid"] == 11)
    assert b["attrs"]["result"] == "ncclSystemError"
    assert [r["line"] for r in rows] == sorted(r["line"] for r in rows)


def test_version_mismatch_and_codes():
    assert nccl_version_str(21805) == "2.18.5"
    assert nccl_version_str(2708) == "2.7.8"
    rows, _ = _rows("node1:5:5 [0] init.cc:582 NCCL WARN Mismatched NCCL version detected : rank 1 version 21805 rank 9 version 21903\n")
    assert rows[0]["kind"] == "nccl_error" and rows[0]["severity"] == "error"
    assert (rows[0]["attrs"]["version"], rows[0]["attrs"]["version2"]) == ("2.18.5", "2.19.3")


def test_chatter_does_not_pass_the_prefilter():
    chatter = [
        "node004:51001:51102 [0] NCCL INFO Channel 00/0 : 8[0] -> 16[0] [send] via NET/IB/0/GDRDMA",
        "node004:51001:51102 [0] NCCL INFO Channel 00/02 :    0   3   2   1",
        "node004:51001:51102 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1",
        "node004:51001:51102 [0] NCCL INFO Ring 00 : 0 1 2 3",
        "node004:51001:51102 [0] NCCL INFO Connected all rings",
        "node004:51001:51102 [0] NCCL INFO Connected all trees",
        "node004:51001:51102 [0] NCCL INFO P2P Chunksize set to 131072",
        "node004:51001:51102 [0] NCCL INFO threadThresholds 8/8/64 | 512/8/64 | 512 | 512",
        "node004:51001:51102 [0] NCCL INFO Setting affinity for GPU 0 to ffff,ffffffff",
        "node004:51001:51102 [0] NCCL INFO HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
        "node005:1200:1260 [2] 1523.417969 ncclIbTest:1290 NCCL TRACE Got completion from peer 10.0.5.6<44021> with status=0 opcode=0 len=1048576",
        "node005:1200:1200 NCCL CALL ncclAllReduce(0x7f3a2000,0x7f3a2000,4194304,7,0,0x55aa10,0x55bb20)",
    ]
    df = pl.DataFrame({"l": chatter})
    assert df.filter(pl.col("l").str.contains(PREFILTER)).height == 0
    rows, warnings = _rows("\n".join(chatter))
    assert rows == [] and warnings == []
    # Once per communicator, and the settings in force (docs/layers.md): read, not chatter.
    settings = [
        "node004:51001:51102 [0] NCCL INFO 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
        "node004:51001:51102 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    ]
    assert pl.DataFrame({"l": settings}).filter(pl.col("l").str.contains(PREFILTER)).height == 2


def test_trace_prefix_parses():
    # A TRACE-build line whose payload is structured still parses through the TRACE prefix.
    rows, warnings = _rows("node005:1200:1260 [2] 1523.417969 initTransportsRank:977 NCCL TRACE comm 0x55aa rank 2 nRanks 16 nNodes 2 localRanks 8 localRank 2 MNNVL 0\n")
    assert not warnings
    assert rows[0]["kind"] == "comm_init" and rows[0]["attrs"]["trace_ms"] == "1523.417969"
    assert rows[0]["attrs"]["func"] == "initTransportsRank" and rows[0]["attrs"]["nnodes"] == 2


def test_bad_input_never_raises():
    # empty input (crashscope.testing cannot build a frame from zero lines, so call directly)
    from crashscope.sources.base import FileInfo, ParseContext

    ctx = ParseContext(FileInfo(path="e.log", name="e.log"), "nccl", OPTS)
    get_source("nccl").parse_lines([], ctx)
    assert ctx.rows == [] and ctx.warnings == []
    assert _rows("\n") == ([], [])
    garbage = b"\x00\xff\xfe NCCL WARN \x80\x81 node1:1:1 [0] x.cc:1 NCCL WARN \xff\n\xde\xad\xbe\xef\nnode1:2:2 [0] NCCL INFO - Init COMPLETE\n"
    rows, warnings = _rows(garbage)
    assert len(warnings) >= 1  # the Init line without fields
    truncated = "node001:2718:3140 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.7<51234> with err\n"
    rows, warnings = _rows(truncated)
    assert len(rows) == 1 and rows[0]["kind"] == "network_error" and rows[0]["attrs"]["transport"] == "ib"
    assert len(warnings) == 1
    rows, warnings = _rows("NCCL INFO init.cc:1093 -> 1\n")
    assert rows == [] and len(warnings) == 1


def test_warn_pasted_without_its_prefix_is_read_without_a_host():
    # NVIDIA/nccl#976's call stack and aws-ofi-nccl's WARN as pasted in issues: no host:pid:tid [dev]
    rows, warnings = _rows(
        "transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'\n"
        "register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4. RC: -22, Error: Invalid argument\n"
        "NCCL WARN something without a prefix\n"
    )
    assert not warnings
    assert [r["kind"] for r in rows] == ["cuda_error", "network_error", "nccl_error"]
    assert rows[0]["host"] is None and rows[0]["attrs"]["file"] == "transport/nvls.cc" and rows[0]["attrs"]["line_in_src"] == 165
    assert rows[0]["attrs"]["error"] == "invalid argument" and rows[0]["attrs"]["prefix"] == "none"
    assert rows[1]["attrs"]["file"] == "register_rail_mr_buffer" and "Unable to register memory" in rows[1]["message"]
    # an INFO payload or chatter without a prefix is still not read
    rows, warnings = _rows("NCCL INFO transport/nvls.cc:324 -> 1\n")
    assert rows == [] and len(warnings) == 1


def test_other_sources_lines_give_nothing():
    text = "\n".join([
        "[rank0]:[E914 08:12:44.123456 140213 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error, NCCL version 2.20.5",
        "Sep 14 08:12:44 node001 kernel: NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, GPU has fallen off the bus.",
        "srun: error: node002: task 1: Exited with exit code 1",
    ])
    rows, warnings = _rows(text)
    assert rows == [] and warnings == []


def test_sniff():
    src = get_source("nccl")
    pure = "\n".join(f"node001:2718:2718 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via P2P/IPC" for i in range(50))
    assert src.sniff(pure, "nccl.node001.2718.log") >= 0.9
    mixed = "\n".join(["[rank0]: step 1 loss 2.3"] * 40 + ["node001:2718:2718 [0] NCCL INFO NCCL version 2.20.5+cuda12.4"] * 5)
    assert 0.3 <= src.sniff(mixed, "slurm-1234.out") <= 0.6
    assert src.sniff("Sep 14 08:12:44 node001 kernel: hello\n", "messages") == 0.0
    assert src.sniff("", "x") == 0.0


@pytest.mark.parametrize("stamp,expected", [
    ("[2026-09-14 10:00:03] ", "2026-09-14 08:00:03+00:00"),
    ("[2026-09-14 10:00:03.412907] ", "2026-09-14 08:00:03.412907+00:00"),
    ("2026-09-14T10:00:03.412+0200 ", "2026-09-14 08:00:03.412000+00:00"),
    ("Sep 14 10:00:03.412 ", "2026-09-14 08:00:03.412000+00:00"),
    ("1789372803.5 ", "2026-09-14 08:00:03.500000+00:00"),
])
def test_timestamp_formats(stamp, expected):
    rows, _ = _rows(f"{stamp}node012:880:1012 [1] misc/socket.cc:63 NCCL WARN socketProgress: Connection closed by remote peer node013<43210>\n")
    assert str(rows[0]["time"]) == expected


def test_estimated_quality_when_zone_unknown():
    rows, _ = _rows("[2026-09-14 10:00:03] node012:880:1012 [1] misc/socket.cc:63 NCCL WARN x failed\n",
                    options=ParseOptions())
    assert rows[0]["time_quality"] == "estimated"


def test_repeated_failures_on_one_thread_are_separate_stacks():
    frames = ["node001:10:20 [0] NCCL INFO transport/net_ib.cc:1388 -> 6", "node001:10:20 [0] NCCL INFO proxy.cc:912 -> 6"]
    rows, _ = _rows("\n".join(frames * 3))
    assert [r["kind"] for r in rows] == ["nccl_error"] * 3
    assert all(r["attrs"]["frames"] == ["transport/net_ib.cc:1388", "proxy.cc:912"] for r in rows)
