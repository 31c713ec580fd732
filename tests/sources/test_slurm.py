"""Key facts of the slurm line source (formats checked against SchedMD/slurm sources)."""

from __future__ import annotations

import json
from zoneinfo import ZoneInfo

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)


def _rows(text, **kw):
    df, warnings = parse_text("slurm", text, options=kw.pop("options", OPTS), **kw)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def test_time_limit_banner_step_and_job():
    rows, w = _rows(
        "slurmstepd: error: *** STEP 123456.0 ON node001 CANCELLED AT 2026-09-14T08:20:01 DUE TO TIME LIMIT ***\n"
        "slurmstepd: error: *** JOB 123456 ON node001 CANCELLED AT 2026-09-14T08:20:01 DUE TO TIME LIMIT ***\n"
    )
    assert not w
    assert [r["kind"] for r in rows] == ["job_cancel", "job_cancel"]
    step, job = rows
    assert step["attrs"] == {"entity": "step", "id": "123456.0", "job_id": "123456", "step": "0", "node": "node001",
                             "reason": "TIME LIMIT"}
    assert job["attrs"]["entity"] == "job" and job["attrs"]["step"] is None
    assert step["host"] == "node001" and step["job_id"] == "123456"
    assert step["time"].isoformat() == "2026-09-14T08:20:01+00:00"
    assert step["time_quality"] == "exact"


def test_banner_local_time_uses_zone_and_quality():
    opts = ParseOptions(tz=ZoneInfo("Europe/Berlin"), tz_known=False, year=2026)
    rows, _ = _rows("slurmstepd: error: *** JOB 1 ON node001 CANCELLED AT 2026-09-14T08:20:01 DUE TO PREEMPTION ***\n",
                    options=opts)
    assert rows[0]["time"].isoformat() == "2026-09-14T06:20:01+00:00"
    assert rows[0]["time_quality"] == "estimated"
    assert rows[0]["attrs"]["reason"] == "PREEMPTION"


def test_banner_variants_and_reason_followup():
    rows, w = _rows(
        "slurmstepd: error: *** STEP 9.0 ON node011 CANCELLED AT 2026-09-15T11:02:03 DUE to SIGNAL Terminated ***\n"
        "slurmstepd: error: *** REASON: Cancelled by user 1001 ***\n"
        "slurmstepd: error: *** STEP 9.1 ON node012 CANCELLED AT 2026-09-15T11:05:00 DUE TO TASK FAILURE ***\n"
        "slurmstepd: error: *** STEP 9.2 ON node012 FAILED (non-zero exit code or other failure mode) ***\n"
        "slurmstepd: error: *** JOB 9 ON node012 CANCELLED AT 2026-09-15T11:06:00 ***\n"
        "slurmstepd: error: *** STEP 9.3 ON node013 CANCELLED AT 2026-09-15T11:07:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
        "slurmstepd: error: *** STEP 9.4 ON node013 UNCORRECTABLE MEMORY ERROR AT 2026-09-15T11:08:00 ***\n"
        "slurmstepd: error: *** STEP 9.5 STEPD TERMINATED ON node014 AT 2026-09-15T11:09:00 DUE TO JOB NOT ENDING WITH SIGNALS ***\n"
    )
    assert not w
    reasons = [r["attrs"]["reason"] for r in rows]
    assert reasons == ["SIGNAL", "TASK FAILURE", "FAILED", "CANCELLED", "NODE FAILURE", "UNCORRECTABLE MEMORY ERROR",
                       "JOB NOT ENDING WITH SIGNALS"]
    assert rows[0]["attrs"]["signal"] == "SIGTERM"
    assert rows[0]["attrs"]["details"] == "Cancelled by user 1001"
    assert rows[2]["time"] is None  # FAILED banner has no time
    assert [r["host"] for r in rows][-1] == "node014"


def test_srun_task_exits_and_oom():
    rows, w = _rows(
        "srun: error: node[003-004]: tasks 16-23,25: Killed\n"
        "srun: error: node007: task 56: Exited with exit code 1\n"
        "srun: error: node005: tasks 32-33: Out Of Memory\n"
        "srun: error: node001: task 0: Aborted (core dumped)\n"
    )
    assert not w
    assert [r["kind"] for r in rows] == ["process_exit", "process_exit", "host_oom", "process_exit"]
    assert rows[0]["attrs"]["hosts"] == ["node003", "node004"]
    assert rows[0]["attrs"]["tasks"] == [16, 17, 18, 19, 20, 21, 22, 23, 25]
    assert rows[0]["attrs"]["signal"] == "SIGKILL" and rows[0]["host"] == "node003"
    assert rows[1]["attrs"]["exitcode"] == 1 and rows[1]["host"] == "node007"
    assert rows[2]["attrs"]["tasks"] == [32, 33]
    assert rows[3]["attrs"] == {"hosts": ["node001"], "tasks": [0], "signal": "SIGABRT", "core_dumped": True}


def test_srun_step_messages_and_node_failure():
    rows, _ = _rows(
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
        "srun: error: Timed out waiting for job step to complete\n"
        "srun: Terminating StepId=5.0\n"
        "srun: forcing job termination\n"
        "srun: error: task 3 launch failed: Unspecified error\n"
        "srun: error: Node failure on node009\n"
    )
    assert [r["attrs"].get("action") for r in rows[:5]] == ["abort_wait", "abort_timeout", "terminate",
                                                             "force_terminate", "launch_failed"]
    assert rows[0]["attrs"]["seconds"] == 32
    assert rows[2]["job_id"] == "5" and rows[2]["attrs"]["step"] == "5.0"
    assert rows[5]["kind"] == "node_state" and rows[5]["host"] == "node009" and rows[5]["attrs"]["state"] == "failed"


def test_cgroup_oom_both_eras():
    rows, _ = _rows(
        "slurmstepd: error: Detected 2 oom_kill events in StepId=77.0. Some of the step tasks have been OOM Killed.\n"
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=77.batch cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.\n"
    )
    assert [(r["kind"], r["attrs"]["count"], r["attrs"]["step"], r["job_id"]) for r in rows] == [
        ("host_oom", 2, "77.0", "77"), ("host_oom", 1, "77.batch", "77")]


def test_slurmctld_formats():
    rows, w = _rows(
        "[2026-09-14T08:12:44.101] error: Nodes node003 not responding\n"
        "[2026-09-14T08:14:24+02:00] error: Nodes node[003-004] not responding, setting DOWN\n"
        "[Sep 14 09:00:00] Time limit exhausted for JobId=42\n"
        '{"log":"_job_complete: JobId=43 WTERMSIG 9","stream":"stderr","time":"2026-09-14T08:20:03"}\n'
        "Sep 14 09:05:00 ctl01 slurmctld[2211]: _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=44 uid 1001\n"
    )
    assert not w
    kinds = [(r["kind"], r["attrs"].get("state"), r["host"]) for r in rows]
    assert kinds == [("node_state", "not_responding", "node003"), ("node_state", "down", "node003"),
                     ("node_state", "down", "node004"), ("job_state", "TIMEOUT", None),
                     ("job_state", "FAILED", None), ("job_state", "CANCELLED", "ctl01")]
    assert rows[0]["time"].isoformat() == "2026-09-14T08:12:44.101000+00:00"
    assert rows[1]["time"].isoformat() == "2026-09-14T06:14:24+00:00"
    assert rows[4]["attrs"]["exit_code"] == "0:9" and rows[4]["attrs"]["signal"] == "SIGKILL"
    assert rows[5]["attrs"]["uid"] == 1001 and rows[5]["job_id"] == "44"


def test_slurmd_step_prefix_banner_prefers_line_time():
    rows, _ = _rows(
        "[2026-09-14T08:19:59.410+02:00] [123456.0] error: *** STEP 123456.0 ON node003 CANCELLED AT "
        "2026-09-14T08:19:59 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
    )
    assert rows[0]["kind"] == "job_cancel"
    assert rows[0]["time"].isoformat() == "2026-09-14T06:19:59.410000+00:00"


def test_scontrol_multiline_and_oneline():
    text = (
        "JobId=1 JobName=a b\n   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A\n"
        "   Priority=1 Nice=0 Account=x QOS=normal\n"
        "   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)\n"
        "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=2:0\n"
        "   StartTime=2026-09-14T06:00:02 EndTime=2026-09-14T07:00:00 Deadline=N/A\n"
        "   NodeList=node[01-02]\n"
        "JobId=2 JobName=c UserId=bob(1002) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=node03 "
        "StartTime=2026-09-14T06:00:00 EndTime=Unknown\n"
    )
    rows, w = _rows(text)
    assert not w
    assert len(rows) == 2
    a, b = (r["attrs"] for r in rows)
    assert a["state"] == "FAILED" and a["exit_code"] == "2:0" and a["nodes"] == ["node01", "node02"]
    assert a["name"] == "a b" and a["user"] == "alice" and a["end"] == "2026-09-14T07:00:00Z"
    assert rows[0]["time"].isoformat() == "2026-09-14T07:00:00+00:00"
    assert b["state"] == "TIMEOUT" and b["signal"] == "SIGTERM" and "end" not in b
    assert rows[1]["time"].isoformat() == "2026-09-14T06:00:00+00:00"


def test_garbage_truncated_empty_and_foreign_lines():
    assert _rows("") == ([], [])
    rows, w = _rows(b"\x00\xff\xfe garbage \x80\n*** JOB \n" + "srun: error: node0".encode() + b"\n")
    assert all(r["kind"] == "log_error" for r in rows)
    rows, w = _rows("slurmstepd: error: *** STEP 123456.0 ON node0\n")
    assert len(w) == 1 and rows[0]["kind"] == "log_error"
    # NCCL / PyTorch lines are not ours
    rows, w = _rows(
        "node001:1234:1300 [0] NCCL INFO comm 0x1 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE\n"
        "[rank3]:[E0914 08:00:00.000000 1 ProcessGroupNCCL.cpp:1] Watchdog caught collective operation timeout\n"
    )
    assert rows == [] and w == []


def test_bad_hostlist_never_raises():
    rows, w = _rows("srun: error: node[1-99999999]: tasks 0-3: Killed\n")
    assert rows[0]["attrs"]["hosts"] == ["node[1-99999999]"]
    # one warning for the hostlist; the unexpanded name is also no host name, which emit says
    assert [x.reason for x in w][0] == "slurm: bad hostlist or task list in srun exit line" and len(w) == 2


def test_sniff():
    src = get_source("slurm")
    assert src.sniff("[2026-09-14T08:12:44.101] error: Nodes node003 not responding\n" * 3, "slurmctld.log") >= 0.9
    assert src.sniff("JobId=1 JobName=x\n   UserId=a(1)\n", "job.txt") >= 0.9
    assert src.sniff("x\nslurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026-09-14T08:20:01 ***\n", "slurm-1.out") > 0.5
    assert src.sniff("hello world\nNCCL INFO Bootstrap\n", "x.log") == 0.0
