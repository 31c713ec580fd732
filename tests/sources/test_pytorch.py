"""Key facts of the pytorch line source (see tests/golden/pytorch for whole files)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import polars as pl

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

UTC_OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)

TIMEOUT = (
    "[rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) "
    "ran for 600047 milliseconds before timing out."
)


def _rows(text, **kw):
    kw.setdefault("options", UTC_OPTS)
    df, warnings = parse_text("pytorch", text, **kw)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def _ns(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=timezone.utc)


def test_collective_timeout_attrs_rank_and_time():
    rows, warnings = _rows(TIMEOUT + "\n")
    assert warnings == []
    (r,) = rows
    assert r["kind"] == "collective_timeout" and r["source"] == "pytorch"
    assert r["rank"] == 3 and r["severity"] == "error"
    assert r["attrs"] == {"seq": 5012, "op": "ALLREDUCE", "numel_in": 25165824, "numel_out": 25165824,
                          "timeout_ms": 600000, "ran_ms": 600047, "pg_rank": 3}
    # the 9-digit fraction is CLOCK_MONOTONIC: only whole seconds are used
    assert r["time"] == _ns("2026-09-17T04:21:41")
    assert r["time_quality"] == "exact"


def test_local_zone_and_quality():
    opts = ParseOptions(tz=ZoneInfo("America/New_York"), tz_known=False, year=2026, month=9)
    rows, _ = _rows(TIMEOUT, options=opts)
    assert rows[0]["time"] == _ns("2026-09-17T08:21:41")  # EDT = UTC-4
    assert rows[0]["time_quality"] == "estimated"


def test_year_rollover_for_january_stamp_in_december_job():
    opts = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=12)
    line = TIMEOUT.replace("E0917", "E0102")
    rows, _ = _rows(line, options=opts)
    assert rows[0]["time"] == _ns("2027-01-02T04:21:41")


def test_pg_rank_is_not_global_rank_for_sub_groups():
    text = (
        "[rank9]:[E0917 04:21:42.000399120 ProcessGroupNCCL.cpp:2271] [PG ID 4 PG GUID 45(DATA_PARALLEL_GROUP) Rank 1]"
        "  failure detected by watchdog at work sequence id: 2 PG status: last enqueued work: 3, last completed work: -1\n"
        "[E0917 04:21:43.517771093 ProcessGroupNCCL.cpp:2271] [PG ID 4 PG GUID 45(DATA_PARALLEL_GROUP) Rank 1]"
        "  failure detected by watchdog at work sequence id: 2 PG status: last enqueued work: 3, last completed work: 1\n"
        "[E0917 04:21:43.517771093 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 5]"
        "  failure detected by watchdog at work sequence id: 7 PG status: last enqueued work: 7, last completed work: 6\n"
    )
    rows, _ = _rows(text)
    assert [r["kind"] for r in rows] == ["watchdog_error"] * 3
    assert [r["rank"] for r in rows] == [9, None, 5]
    a = rows[0]["attrs"]
    assert a["pg_id"] == 4 and a["pg_guid"] == "45" and a["pg_desc"] == "DATA_PARALLEL_GROUP" and a["pg_rank"] == 1
    assert a["seq"] == 2 and a["last_enqueued"] == 3 and a["last_completed"] == -1


def test_old_prefix_without_time_and_unpadded_month():
    text = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 12] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, "
        "OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800556 milliseconds before timing out.\n"
        "[rank9]:[E318 08:49:08.969150748 ProcessGroupNCCL.cpp:2057] [PG ID 4 PG GUID 45 Rank 1] Process group watchdog "
        "thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
    )
    rows, _ = _rows(text, rank_hint=12)
    assert rows[0]["time"] is None and rows[0]["time_quality"] == "missing"
    assert rows[0]["rank"] == 12  # from the file's rank hint, not from "[Rank 12]"
    assert [r["kind"] for r in rows[1:]] == ["watchdog_error", "cuda_error"]
    assert rows[1]["time"] == _ns("2026-03-18T08:49:08")
    assert rows[2]["attrs"] == {"error": "an illegal memory access was encountered"}


def test_terminate_and_what_are_one_event():
    text = (
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: "
        "NCCL error: unhandled system error, NCCL version 2.19.3\n"
    )
    rows, _ = _rows(text)
    kinds = [r["kind"] for r in rows]
    assert kinds == ["watchdog_error", "version"]
    a = rows[0]["attrs"]
    assert a["what"] == "terminate" and a["exception_type"] == "c10::DistBackendError"
    assert a["nccl_result"] == "unhandled system error" and a["nccl_version"] == "2.19.3"
    assert rows[0]["severity"] == "critical" and rows[0]["rank"] == 3
    assert rows[1]["attrs"] == {"component": "nccl", "version": "2.19.3"}


def test_desync_report_inherits_rank_and_time():
    text = TIMEOUT.replace("rank3", "rank0").replace("[Rank 3]", "[Rank 0]") + "\n" + (
        "\t - [0] Timeout at collective: ALLREDUCE, #41207\n"
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
        "\t   - [7] joined but didn't finish collective #41207 (count from 1)\n"
        "\t     [0, 1, 2, 3, 4, 5, 6] finished collective #41207, but didn't join collective #41208 (count from 1)\n"
    )
    rows, _ = _rows(text)
    d = [r for r in rows if r["kind"] == "desync_report"][0]
    assert d["rank"] == 0 and d["time"] == _ns("2026-09-17T04:21:41")
    assert d["attrs"]["joined_not_finished"] == [7]
    assert d["attrs"]["finished_not_joined"] == [0, 1, 2, 3, 4, 5, 6]
    assert d["attrs"]["seq"] == 41207 and d["attrs"]["op"] == "ALLREDUCE"


def test_traceback_with_rank_prefix_reports_innermost_frame_and_last_exception():
    text = (
        "[rank6]: Traceback (most recent call last):\n"
        '[rank6]:   File "/workspace/train.py", line 150, in train_step\n'
        "[rank6]:     dist.all_reduce(loss)\n"
        '[rank6]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce\n'
        "[rank6]:     work = group.allreduce([tensor], opts)\n"
        "[rank6]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "[rank6]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
    )
    rows, warnings = _rows(text)
    assert warnings == []
    exc = [r for r in rows if r["kind"] == "exception"]
    assert len(exc) == 1
    e = exc[0]
    assert e["rank"] == 6 and e["line"] == 6
    assert e["attrs"]["type"] == "torch.distributed.DistBackendError"
    assert e["attrs"]["frames_top"].endswith("distributed_c10d.py:2501 in all_reduce")
    assert e["attrs"]["nccl_enum"] == "ncclUnhandledCudaError"
    assert e["attrs"]["nccl_result"].startswith("unhandled cuda error")


def test_cuda_oom_new_and_old_texts():
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
        "79.15 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.6 GiB memory in use.\n"
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.5 GiB "
        "already allocated; 4.75 MiB free; 14.6 GiB reserved in total by PyTorch)\n"
    )
    rows, _ = _rows(text)
    oom = [r for r in rows if r["kind"] == "cuda_oom"]
    assert len(oom) == 2
    assert oom[0]["attrs"]["tried_bytes"] == 2 * 1024**3 and oom[0]["gpu_index"] == 3
    assert oom[0]["attrs"]["free_bytes"] == 3 * 1024**3 // 2
    assert oom[1]["attrs"]["tried_bytes"] == 20 * 1024**2 and oom[1]["attrs"]["device"] == 0


def test_collective_mismatch():
    text = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=1649, OpType=BARRIER), but Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=0, OpType=GATHER).Collectives differ in the following aspects: "
        "\t Sequence number: 1649vs 0  Op type: BARRIERvs GATHER\n"
    )
    rows, _ = _rows(text)
    (m,) = [r for r in rows if r["kind"] == "collective_mismatch"]
    assert m["attrs"]["ranks"] == [2, 1] and m["attrs"]["seqs"] == [1649, 0]
    assert m["attrs"]["detail"].startswith("Sequence number")


def test_torchrun_agent_eras():
    text = (
        "E0917 04:31:45.002000 90211 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
        "local_rank: 3 (pid: 90236) of binary: /usr/bin/python3\n"
        "[2024-07-25 06:36:18,293] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 1234 "
        "closing signal SIGTERM\n"
        "WARNING:torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, shutting down workers\n"
    )
    rows, _ = _rows(text, host_hint="node003")
    assert [r["kind"] for r in rows] == ["process_exit", "signal", "signal"]
    pe = rows[0]
    assert pe["attrs"]["exitcode"] == -6 and pe["attrs"]["signal"] == "SIGABRT"
    assert pe["local_rank"] == 3 and pe["pid"] == 90236 and pe["host"] == "node003"
    assert pe["time"] == _ns("2026-09-17T04:31:45.002")
    assert rows[1]["attrs"]["direction"] == "sent" and rows[1]["pid"] == 1234
    assert rows[1]["time"] == _ns("2024-07-25T06:36:18.293")
    assert rows[2]["attrs"] == {"signal": "SIGTERM", "direction": "received"} and rows[2]["time"] is None


def test_child_failed_error_block_with_srun_prefix():
    text = "\n".join(
        " 1: " + ln
        for ln in [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "train.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "[1]:",
            "  time      : 2026-09-17_04:31:45",
            "  host      : node002.cluster.example.com",
            "  rank      : 9 (local_rank: 1)",
            "  exitcode  : -6 (pid: 90234)",
            "  error_file: <N/A>",
            "  traceback : Signal 6 (SIGABRT) received by PID 90234",
            "------------------------------------------------------------",
            "Root Cause (first observed failure):",
            "[0]:",
            "  time      : 2026-09-17_04:31:41",
            "  host      : node002.cluster.example.com",
            "  rank      : 8 (local_rank: 0)",
            "  exitcode  : 1 (pid: 90233)",
            "  error_file: /tmp/torchelastic_x/none_y/attempt_0/0/error.json",
            "  traceback : Traceback (most recent call last):",
            '    File "/workspace/train.py", line 10, in main',
            "      x = y[3]",
            "  IndexError: list index out of range",
            "  ",
            "============================================================",
        ]
    )
    rows, warnings = _rows(text)
    assert warnings == []
    rc = [r for r in rows if r["kind"] == "root_cause_report"]
    assert len(rc) == 2
    other, root = rc
    assert other["attrs"]["root"] is False and root["attrs"]["root"] is True
    assert root["host"] == "node002" and root["rank"] == 8 and root["local_rank"] == 0 and root["pid"] == 90233
    assert root["time"] == _ns("2026-09-17T04:31:41")
    assert root["attrs"]["error"] == "IndexError: list index out of range"
    assert root["attrs"]["error_file"].endswith("/0/error.json")
    assert other["attrs"]["signal"] == "SIGABRT" and other["attrs"]["error_file"] is None


def test_no_other_failures_gives_only_the_root():
    text = (
        "Failures:\n  <NO_OTHER_FAILURES>\n------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-09-17_04:31:50\n  host      : node001\n"
        "  rank      : 3 (local_rank: 3)\n  exitcode  : 1 (pid: 4411)\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "============================================================\n"
    )
    rows, _ = _rows(text)
    assert [r["kind"] for r in rows] == ["root_cause_report"]
    assert rows[0]["attrs"]["exitcode"] == 1 and rows[0]["host"] == "node001"


def test_megatron_checkpoint_and_step_are_applog_lines():
    # Application progress and checkpoint lines belong to the applog source (one owner);
    # tests/sources/test_applog.py checks what it reads from them.
    text = (
        " iteration      100/    1000 | consumed samples:        12800 | elapsed time per iteration (ms): 1234.5 |"
        " learning rate: 1.500E-04 |\n"
        "saving checkpoint at iteration     100 to /lustre/ckpt/gpt in torch_dist format\n"
        "  successfully saved checkpoint from iteration     100 to /lustre/ckpt/gpt\n"
    )
    rows, _ = _rows(text)
    assert rows == []
    df, _ = parse_text("applog", text, options=UTC_OPTS)
    assert [(k, json.loads(a).get("phase")) for k, a in zip(df["kind"], df["attrs"])] == [
        ("train_step", None), ("checkpoint", "start"), ("checkpoint", "end")]


def test_truncated_and_garbage_lines_never_raise():
    text = (
        TIMEOUT[:120] + "\n"  # cut inside WorkNCCL(...)
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/workspace/train.py", line 2\n'
    ).encode() + b"\xff\xfe\x00garbage Error: \x80\x81\n[E0\x00917 x.cpp:\n" + b"\x00" * 50 + b"\n"
    rows, warnings = _rows(text)
    # a cut timeout line is still a timeout, without the WorkNCCL facts (and a warning)
    (t,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert "seq" not in t["attrs"] and t["rank"] == 3
    reasons = [w.reason for w in warnings]
    assert any("WorkNCCL" in r for r in reasons)  # the cut timeout line
    assert any("traceback without" in r for r in reasons)  # the cut traceback


def test_empty_input():
    rows, warnings = _rows("")
    assert rows == [] and warnings == []


def test_other_sources_lines_give_nothing():
    text = (
        "node001:1234:5678 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.11<0>\n"
        "node001:1234:5678 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.12<54321> "
        "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Send)\n"
        "slurmstepd: error: *** JOB 123456 ON node001 CANCELLED AT 2026-09-17T04:31:40 ***\n"
        "[Wed Sep 17 04:20:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "some line with an Error: inside it\n"
    )
    rows, warnings = _rows(text)
    assert rows == [] and warnings == []


def test_prefilter_compiles_in_polars_and_selects_block_lines():
    src = get_source("pytorch")
    # "[0]:" index lines are not selected (every launcher-prefixed line looks like them);
    # the "time" field opens a ChildFailedError entry instead.
    lines = ["  time      : 2026-09-17_04:31:41", "Failures:", "\t - [0] Timeout at collective: ALLREDUCE, #3",
             '  File "/x.py", line 3, in f', "Traceback (most recent call last):", "random text", "[0]:"]
    hit = pl.DataFrame({"l": lines}).filter(pl.col("l").str.contains(src.prefilter))["l"].to_list()
    assert hit == lines[:-2]


def test_sniff():
    src = get_source("pytorch")
    assert src.sniff(TIMEOUT + "\n", "slurm-1.out") >= 0.9
    assert src.sniff("node001:1:1 [0] NCCL INFO Bootstrap\n", "x.log") == 0.0
    assert src.sniff("", "x.log") == 0.0


# -- a logging record's continuation lines carry the record's identity ------------------------------------

GLOO_RECORD = (
    "2026-12-01 12:11:47,696 - ERROR - [rank 1/4] [n1] train - rank 1 failed: RuntimeError: Rank 1 successfully "
    "reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs "
    "for faulty rank.\n"
    " Original exception: \n"
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for "
    "recv operation to complete\n"
)


def test_gloo_timeout_continuing_a_logging_record_gets_its_rank_and_time():
    rows, _ = _rows(GLOO_RECORD)
    (r,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert r["line"] == 3 and r["rank"] == 1
    assert r["time"] == _ns("2026-12-01T12:11:47.696")
    assert r["attrs"]["transport"] == "gloo" and r["attrs"]["timeout_ms"] == 30000


def test_a_record_header_line_gives_its_own_events_its_rank_and_time():
    text = ("2026-12-01 12:11:47,680 - ERROR - [rank 0/4] [n1] train - rank 0 failed: RuntimeError: [Rank 0]: "
            "Ranks 2 failed to pass monitoredBarrier in 30000 ms\n")
    (r,) = [r for r in _rows(text)[0] if r["kind"] == "desync_report"]
    assert r["rank"] == 0 and r["time"] == _ns("2026-12-01T12:11:47.680") and r["attrs"]["lagging_ranks"] == [2]


def test_only_the_very_next_bare_lines_continue_a_record():
    gloo = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
            "30000ms for recv operation to complete\n")
    header = GLOO_RECORD.splitlines(keepends=True)[0]
    # a line no source selects between them: the chain is not known to be unbroken
    rows, _ = _rows(header + "some other process's output\n" + gloo)
    (r,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert r["rank"] is None and r["time"] is None
    # another record (a c10 line without identity) in between starts its own record
    c10 = "[E1201 12:11:47.772359823 ProcessGroupGloo.cpp:67] Rank 3 successfully reached monitoredBarrier\n"
    rows, _ = _rows(header + c10 + gloo)
    (r,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert r["rank"] is None
    # a launcher-prefixed line is another writer's: the bare line after it is not its continuation
    rows, _ = _rows("[rank2]: RuntimeError: boom\n" + gloo)
    (r,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert r["rank"] is None


def test_traceback_printed_by_logger_exception_gets_the_records_rank():
    # (the record's first line must be one this source reads: here it names the exception; a
    # bare "step failed" header reaches the applog source only, and the traceback stays rank-less)
    text = ("2026-12-01 12:11:47,696 - ERROR - [rank 3/4] [n2] train - step failed: RuntimeError: Connection closed by peer\n"
            "Traceback (most recent call last):\n"
            '  File "/work/train.py", line 260, in <module>\n'
            "RuntimeError: Connection closed by peer [127.0.0.1]:20126\n")
    rows, _ = _rows(text)
    (r,) = [r for r in rows if r["kind"] == "exception"]
    assert r["rank"] == 3 and r["time"] == _ns("2026-12-01T12:11:47.696") and r["attrs"]["type"] == "RuntimeError"


def test_a_traceback_after_an_unterminated_progress_bar_is_read():
    # tqdm redraws with '\r' and the traceback printed next lands on the bar's line
    bar = " 45%|\u2588\u2588\u2588\u2588\u258c     | 90/200 [00:09<00:11,  9.81it/s]\r"
    text = (f"[rank3]:{bar}Traceback (most recent call last):\n"
            '[rank3]:  File "train.py", line 9, in <module>\n'
            "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    rows, _ = _rows(text)
    (exc,) = [r for r in rows if r["kind"] == "exception"]
    assert exc["rank"] == 3 and exc["line"] == 3 and "illegal memory access" in exc["message"]
    # a bar alone reads as no error
    assert not [r for r in _rows(bar + "\n")[0] if r["kind"] == "exception"]


def test_desync_report_snapshot_and_the_rank_that_never_joined_the_next_collective():
    # pytorch/pytorch#152623 (TORCH_NCCL_DESYNC_DEBUG=1 on 8 ranks), the report as c10 prints it
    text = (
        "[rank0]:[E515 18:36:47.343377708 ProcessGroupNCCL.cpp:1937] Rank 0\n"
        "         - [0] Timeout at collective: ALLREDUCE, #315\n"
        "         - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
        "             [7] finished collective #182, but didn't join collective #183 (count from 1)\n"
        "         - Snapshot of ranks' latest states:\n"
        "           #182 finished ranks:\n"
        "             [7] finished ALLREDUCE\n"
        "           #315 started ranks:\n"
        "             [0, 1, 2] started ALLREDUCE\n"
        "           #317 started ranks:\n"
        "             [3, 4, 5, 6] started _ALLGATHER_BASE\n"
    )
    (d,) = [r for r in _rows(text)[0] if r["kind"] == "desync_report"]
    assert d["attrs"]["reporting_rank"] == 0 and d["attrs"]["suspects"] == [7]
    assert d["attrs"]["snapshot"][1] == {"seq": 315, "state": "started", "op": "ALLREDUCE", "ranks": [0, 1, 2]}
    assert len(d["attrs"]["snapshot"]) == 3
    assert "mismatched_seq" not in d["attrs"]  # different counts, not one count with two collectives
    # one count, two collectives: a mismatch; the smaller group is named
    mismatch = text.replace("#317 started", "#315 started").replace("[3, 4, 5, 6] started _ALLGATHER_BASE", "[3] started BROADCAST")
    (d,) = [r for r in _rows(mismatch)[0] if r["kind"] == "desync_report"]
    assert d["attrs"]["mismatched_seq"] == 315 and d["attrs"]["mismatched_ranks"] == [3]
    assert d["attrs"]["mismatched_ops"] == {"ALLREDUCE": [0, 1, 2], "BROADCAST": [3]}


def test_desync_report_ranks_inside_the_collective_are_the_suspects_over_those_that_finished_it():
    text = TIMEOUT.replace("rank3", "rank0").replace("[Rank 3]", "[Rank 0]") + "\n" + (
        "\t - [0] Timeout at collective: ALLREDUCE, #41207\n"
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:\n"
        "\t   - [7] joined but didn't finish collective #41207 (count from 1)\n"
        "\t     [0, 1, 2, 3, 4, 5, 6] finished collective #41207, but didn't join collective #41208 (count from 1)\n"
    )
    (d,) = [r for r in _rows(text)[0] if r["kind"] == "desync_report"]
    assert d["attrs"]["suspects"] == [7]


def test_an_exception_message_on_the_next_line_is_not_a_separator_rule():
    # torch <= 1.5 asserts print "AssertionError: " and the message on the next line; torchelastic's
    # ChildFailedError prints its table after a "====" rule, which is not its message.
    asserted = "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nAssertionError: \nThe NVIDIA driver on your system is too old (found version 9010).\n"
    child = ("Traceback (most recent call last):\n  File \"run.py\", line 3, in <module>\n"
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
             "============================================================\ntrain.py FAILED\n")
    msgs = [[r["message"] for r in _rows(t)[0] if r["kind"] == "exception"] for t in (asserted, child)]
    assert any("driver on your system is too old" in m for m in msgs[0]), msgs[0]
    assert msgs[1] and all("====" not in m for m in msgs[1]), msgs[1]


def test_torchruns_forced_kill_after_the_grace_period() -> None:
    # torch/distributed/elastic/multiprocessing/api.py _close, three wordings: torch 2.x on
    # Python >= 3.11 (tests/data/torchrun_local/stop), torch 1.x's f-string with its typo
    # (tests/data/real/nvdiffrecmc-21), torch 2.1-2.3's logging envelope on Python < 3.11 (%s of the
    # Signals member: its name).
    text = (
        "W1202 06:13:19.222000 23148 torch/distributed/elastic/multiprocessing/api.py:1047] Unable to shutdown "
        "process 23268 via 15, forcefully exiting via 9\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Unable to shutdown process 5527 via 15, forcefully exitting via 9\n"
        "[2024-08-10 15:47:06,101] torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown process 188 "
        "via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL\n"
        # torch/multiprocessing/spawn.py ProcessContext.join (mp.spawn, no torchrun)
        "Unable to shutdown process 4242 via SIGTERM , forcefully exiting via SIGKILL\n"
    )
    rows, _ = _rows(text)
    assert [r["kind"] for r in rows] == ["signal"] * 4
    assert [r["pid"] for r in rows] == [23268, 5527, 188, 4242]
    for r in rows:
        assert r["attrs"]["forced"] is True and r["attrs"]["signal"] == "SIGKILL" and r["attrs"]["after"] == "SIGTERM"
        assert r["attrs"]["direction"] == "sent"
    assert rows[0]["attrs"]["agent_pid"] == 23148


def test_a_traceback_cut_before_its_exception_line_is_an_event_only_when_it_had_a_header():
    """srun --kill-on-bad-exit can lose a dying task's last stderr lines (recorded, Slurm 22.05):
    what is left of a traceback still says a Python process raised; a bare header that another
    header follows is two tracebacks interleaved, and frames with no header are a cut excerpt."""
    srun_tail = (
        "srun: error: n2: task 1: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=2.0\n"
    )
    one_frame = 'Traceback (most recent call last):\n  File "/w/rank.py", line 16, in <module>\n' + srun_tail
    rows, _ = _rows(one_frame)
    (e,) = [r for r in rows if r["kind"] == "exception"]
    assert e["attrs"]["truncated"] and e["attrs"]["frames"] == 1 and e["attrs"]["frames_top"] == "/w/rank.py:16 in <module>"
    assert e["line"] == 2

    rows, _ = _rows("Traceback (most recent call last):\n" + srun_tail)
    (e,) = [r for r in rows if r["kind"] == "exception"]
    assert e["attrs"]["truncated"] and e["attrs"]["frames"] == 0 and e["line"] == 1
    assert "after its header line" in e["message"]

    interleaved = (
        "Traceback (most recent call last):\n"
        "Traceback (most recent call last):\n"
        '  File "/w/rank.py", line 16, in <module>\n'
        "    raise ValueError('x')\n"
        "ValueError: x\n"
    )
    rows, _ = _rows(interleaved)
    exc = [r for r in rows if r["kind"] == "exception"]
    assert [(r["attrs"]["type"], r["line"]) for r in exc] == [("ValueError", 5)]

    rows, _ = _rows('  File "/w/rank.py", line 16, in <module>\n' + srun_tail)
    assert [r for r in rows if r["kind"] == "exception"] == []


def test_collective_mismatch_fingerprint_without_tensors_has_no_comma_before_its_op():
    # torch 2.13.0, recorded (fixtures/recorded/uneven_rank2_srun): a barrier's fingerprint, and the
    # peer's as the wrapper decodes it, print "SequenceNumber=NOpType=X"
    text = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=32OpType=BARRIER), but Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects: "
        "\t Sequence number: 32vs 0  Op type: BARRIERvs GATHER\n"
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=32, OpType=ALLREDUCE, TensorShape=[919296], TensorDtypes=Float), "
        "but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE)."
        "Collectives differ in the following aspects: \t Sequence number: 32vs 0  Op type: ALLREDUCEvs REDUCE\n"
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running collective: "
        "CollectiveFingerPrint(OpType=ALLREDUCE), but Rank 0 is running collective: unknown.\n"
    )
    rows, _ = _rows(text)
    ms = [r["attrs"] for r in rows if r["kind"] == "collective_mismatch"]
    assert [m["ranks"] for m in ms] == [[2, 0], [1, 2], [3, 0]]
    assert ms[0]["ops"] == ["BARRIER", "GATHER"] and ms[0]["seqs"] == [32, 0]
    assert ms[1]["ops"] == ["ALLREDUCE[919296]", "REDUCE"]
    # an op is kept beside its own rank: the second fingerprint names none
    assert ms[2]["ops"] == ["ALLREDUCE", None]


# Ray's driver reprints worker lines as "{DIM}{CYAN}(<actor> pid=N[, ip=A]){RESET_ALL} <line>"
# (ray-project/ray python/ray/_private/worker.py print_worker_logs / prefix_for).
RAY_TIMEOUT = "\x1b[2m\x1b[36m(WorkerDict pid=835, ip=172.26.143.83)\x1b[0m " + TIMEOUT.replace("[rank3]", "[rank38]").replace("[Rank 3]", "[Rank 38]")


def test_ray_worker_prefix_keeps_the_c10_stamp_rank_and_node():
    rows, _ = _rows(RAY_TIMEOUT)
    (ev,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert ev["rank"] == 38 and ev["host"] == "172.26.143.83" and ev["pid"] == 835
    assert ev["time"] == _ns("2026-09-17T04:21:41") and ev["time_quality"] == "exact"  # whole seconds, as without the prefix
    # "[36m" without its ESC byte, no ip (the worker on the driver's node)
    rows, _ = _rows("[36m(RayWorkerWrapper pid=4009) " + TIMEOUT)
    (ev,) = [r for r in rows if r["kind"] == "collective_timeout"]
    assert ev["rank"] == 3 and ev["host"] is None and ev["time"] is not None


RAY_DEATH = (
    "(TrainController pid=79312) The actor died unexpectedly before finishing this task.\n"
    "(TrainController pid=79312) \tclass_name: RayTrainWorker\n"
    "(TrainController pid=79312) \tip: 10.0.0.7\n"
    "(TrainController pid=79312) The actor died because its node has died. Node Id: b157c93de9603b1458ae4bd22668b46a4f0ae249bf9467072ba6fd45\n"
    "(TrainController pid=79312) \tthe actor's node was preempted: simulating node drain\n"
    "(TrainController pid=79312) Graceful shutdown of backend failed. This is expected if one of the workers has crashed.\n"
)


def test_a_ray_process_reprinting_a_dead_actors_error_is_marked_as_such():
    # Ray Train logs the warning with exc_info in `except RayActorError`: the traceback is that death's
    rows, _ = _rows(RAY_DEATH + "(TrainController pid=79312) Traceback (most recent call last):\n")
    (ev,) = [r for r in rows if r["kind"] == "exception"]
    assert ev["attrs"]["truncated"] and ev["attrs"]["ray_actor_death"] and ev["severity"] == "warning"
    rows, _ = _rows(RAY_DEATH + "(TrainController pid=79312) Traceback (most recent call last):\n"
                    '(TrainController pid=79312)   File "/x/ray/train/v2/_internal/execution/worker_group/worker_group.py", line 9, in shutdown\n'
                    "(TrainController pid=79312) ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")
    (ev,) = [r for r in rows if r["kind"] == "exception"]
    assert ev["attrs"]["ray_actor_death"] and ev["attrs"]["type"] == "ray.exceptions.ActorDiedError"


def test_a_ray_workers_own_traceback_is_its_program_error():
    # another worker's death report does not make this worker's own exception a reprint
    rows, _ = _rows(RAY_DEATH + "(RayTrainWorker pid=5000, ip=10.0.0.8) Traceback (most recent call last):\n"
                    '(RayTrainWorker pid=5000, ip=10.0.0.8)   File "/app/train.py", line 10, in train_func\n'
                    "(RayTrainWorker pid=5000, ip=10.0.0.8) ValueError: bad batch\n")
    (ev,) = [r for r in rows if r["kind"] == "exception"]
    assert "ray_actor_death" not in ev["attrs"] and ev["attrs"]["type"] == "ValueError" and ev["host"] == "10.0.0.8"
