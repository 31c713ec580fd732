"""Who it was: the rank and node a cause line names through its launcher or its own text, and
the lone connection reset (issue 8, parts 3, 4 and 7). Lines are in the real formats (the
upstream source that prints each is cited where it is parsed)."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from crashscope.analyses.lone_network import RULE_ID, lone_network_reset
from crashscope.pipeline import analyze
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text
from crashscope.verdict import CONFIDENT_LINE, PEER_LOG_MISSING
from tests.factories import make_events

OPTS = ParseOptions(tz=ZoneInfo("Asia/Shanghai"), tz_known=False, year=2026, month=9)


def _rows(source: str, text: str) -> list[dict]:
    df, _ = parse_text(source, text, options=OPTS)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows


# -- NCCL lines behind a launcher's rank tag -----------------------------------------------------

@pytest.mark.parametrize(
    ("line", "rank"),
    [
        # OpenMPI --timestamp-output --tag-output (orte iof_base_output.c)
        ("2019-06-02T16:13:44.884Z: [1,12]<stdout>:c57:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error", 12),
        # horovodrun: asctime() then [rank]<stream>: (safe_shell_exec.prefix_connection)
        ("Tue Nov 27 13:49:06 2018[3]<stderr>:w7:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 10.0.0.9<41468> failed : Connection timed out", 3),
        # the same tag as pasted, without its stream
        ("[15]worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 10.0.0.9<41468> failed : Connection timed out", 15),
        # a bare "[N] " with a space is not a rank tag
        ("[15] worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 10.0.0.9<41468> failed : Connection timed out", None),
    ],
)
def test_nccl_rank_from_the_launcher_tag(line: str, rank: int | None) -> None:
    (r, *_) = _rows("nccl", line)
    assert r["kind"] == "network_error" and r["rank"] == rank
    assert r["host"] in ("c57", "w7", "worker-23")


def test_the_mpirun_stamp_before_the_tag_is_the_line_time() -> None:
    (r, *_) = _rows("nccl", "2019-06-02T16:13:44.884Z: [1,12]<stdout>:c57:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error")
    assert r["time"].isoformat().startswith("2019-06-02T16:13:44.884")
    assert r["time_quality"] == "exact"


@pytest.mark.parametrize("day", ["27", " 7"])
def test_the_catalog_reads_mpiruns_ctime_stamp_glued_to_the_tag(day: str) -> None:
    # mpirun --timestamp-output --tag-output: ctime() ("%.3s %.3s%3d ...", day padded) then [jobid,rank]<stream>:
    line = f"Tue Nov {day} 13:49:06 2018[1,10]<stdout>:F1127 13:49:06.743296 17418 hl_cuda_device.cc:565] Check failed: cudaSuccess == cudaStat (0 vs. 35) Cuda Error: CUDA driver version is insufficient for CUDA runtime version"
    rows = [r for r in _rows("catalog", line) if r["kind"] == "cuda_error"]
    assert rows and all(r["rank"] == 10 for r in rows)
    # local wall time in the run's zone (UTC+8 here), not known for sure
    assert rows[0]["time"].isoformat().startswith(f"2018-11-{day.strip().zfill(2)}T05:49:06") and rows[0]["time_quality"] == "estimated"
    # a weekday and month in prose are not a stamp
    (r, *_) = [r for r in _rows("catalog", "Tue Nov sessions: CUDA error: uncorrectable ECC error encountered") if r["kind"] == "cuda_error"]
    assert r["time"] is None


def test_a_collector_zoned_stamp_beats_nccls_own_local_stamp() -> None:
    # kubectl logs --timestamps (RFC 3339, UTC) around NCCL >= 2.26's zone-less [%F %T] (UTC+8 here)
    (r, *_) = _rows("nccl", "2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer")
    assert r["time"].isoformat().startswith("2025-11-24T03:20:21.001125")
    assert r["time_quality"] == "exact"
    # without the collector's stamp, NCCL's own is used (local, estimated)
    (r2, *_) = _rows("nccl", "[2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer")
    assert r2["time"].isoformat().startswith("2025-11-24T03:20:21") and r2["time_quality"] == "estimated"


def test_the_proxy_service_warn_names_its_own_rank() -> None:
    # proxy.cc: WARN("[Proxy Service %d] Failed to execute operation %s from rank %d, retcode %d", proxyState->tpRank, ..., peer->tpRank, res)
    (r, *_) = _rows("nccl", "node2:24881:25568 [2] proxy.cc:1519 NCCL WARN [Proxy Service 6] Failed to execute operation Setup from rank 2, retcode 1")
    assert r["rank"] == 6 and r["attrs"]["peer_rank"] == 2


# -- PyTorch lines that name the raising rank ----------------------------------------------------

def test_ddp_unused_parameter_error_gets_the_rank_it_names() -> None:
    text = "\n".join([
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that your module has parameters that were not used in producing loss.",
        "making sure all forward function outputs participate in calculating loss.",
        "Parameter indices which did not receive grad for rank 3: 282 283",
    ])
    (r,) = [r for r in _rows("pytorch", text) if r["kind"] == "exception"]
    assert r["rank"] == 3


def test_mp_spawn_banner_gives_the_traceback_its_process_index() -> None:
    text = "\n".join([
        "-- Process 7 terminated with the following error:",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.7/site-packages/torch/multiprocessing/spawn.py", line 19, in _wrap',
        "    fn(i, *args)",
        "RuntimeError: CUDA error: device-side assert triggered",
    ])
    exc = [r for r in _rows("pytorch", text) if r["kind"] == "exception"]
    assert len(exc) == 1 and exc[0]["local_rank"] == 7 and exc[0]["attrs"]["spawn_process"] == 7
    assert exc[0]["rank"] is None  # the index is a local rank; the verdict makes it a rank on one node only


def test_a_collective_mismatch_without_a_prefix_is_the_reporting_ranks() -> None:
    # ProcessGroupWrapper: "Rank " << backend->getRank() << " is running collective: ..., but Rank " << rank << ...
    line = ("RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=21, "
            "OpType=BROADCAST, TensorShape=[1]), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=21, OpType=ALLREDUCE, TensorShape=[1]).")
    (r,) = [r for r in _rows("pytorch", line) if r["kind"] == "collective_mismatch"]
    assert r["rank"] == 1 and r["attrs"]["ranks"] == [1, 0]


# -- the verdict carries the identity into implicated -------------------------------------------

def _analyze(tmp_path: Path, files: dict[str, str]) -> dict:
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    report, _, _ = analyze(tmp_path)
    return report.to_dict()


def test_srun_task_is_the_rank_without_torchrun(tmp_path: Path) -> None:
    r = _analyze(tmp_path, {"slurm-9411285.out": "\n".join([
        "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        "srun: error: gpu20-15: task 2: Out Of Memory",
    ]) + "\n"})
    assert r["cause"] == "oom"
    assert r["implicated"]["nodes"] == ["gpu20-15"] and r["implicated"]["ranks"] == [2]


def test_srun_task_is_not_a_rank_under_torchrun(tmp_path: Path) -> None:
    r = _analyze(tmp_path, {"slurm-9411285.out": "\n".join([
        "[default0]:[W914 08:00:00.000000000 socket.cpp:1] torchrun worker started",
        "W0914 08:00:01.000000 90211 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 90233 closing signal SIGTERM",
        "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes may have been killed by the cgroup out-of-memory handler.",
        "srun: error: gpu20-15: task 1: Out Of Memory",
    ]) + "\n"})
    assert r["cause"] == "oom" and 1 not in r["implicated"]["ranks"]


def test_spawn_index_is_the_rank_on_one_node_only(tmp_path: Path) -> None:
    tb = "\n".join([
        "-- Process 5 terminated with the following error:",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 69, in _wrap',
        "    fn(i, *args)",
        "RuntimeError: CUDA error: device-side assert triggered",
    ]) + "\n"
    one = _analyze(tmp_path / "a", {"log.txt": tb})
    assert one["cause"] == "software_error" and one["implicated"]["ranks"] == [5]
    two = _analyze(tmp_path / "b", {"log.txt": tb, "nccl.log": "node001:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\nnode002:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\n"})
    assert two["cause"] == "software_error" and two["implicated"]["ranks"] == []


def test_unknown_names_the_first_observed_failure(tmp_path: Path) -> None:
    # torchelastic's summary with exit code 1 and no traceback: no cause, but a place to look
    r = _analyze(tmp_path, {"log.txt": "\n".join([
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2023-06-03_22:45:01",
        "  host      : gpu187.cluster.local",
        "  rank      : 4 (local_rank: 0)",
        "  exitcode  : 1 (pid: 19401)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    ]) + "\n"})
    assert r["cause"] == "unknown"
    assert r["implicated"]["nodes"] == ["gpu187"] and r["implicated"]["ranks"] == [4]


def test_the_host_missing_the_net_plugin_is_the_odd_one(tmp_path: Path) -> None:
    r = _analyze(tmp_path, {"nccl.log": "\n".join([
        "HGX-H100-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        "HGX-H100-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so",
    ]) + "\n"})
    assert r["cause"] == "driver_drift" and r["implicated"]["nodes"] == ["HGX-H100-11"]


# -- a connection reset and nothing else -----------------------------------------------------------

RESET = dict(source="nccl", kind="network_error", severity="error", host="gpu-server320", t=0,
             message="socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer",
             attrs={"error_type": "io", "op": "send", "peer": "10.44.137.149"})


def test_a_lone_reset_is_a_weak_fabric_cause() -> None:
    (f,) = lone_network_reset(make_events(RESET, dict(source="nccl", kind="nccl_error", severity="error", host="gpu-server320", t=0.01, message="misc/socket.cc:64 -> 6")), None)
    assert f.rule_id == RULE_ID and f.cause == "fabric_timeout" and f.role == "cause" and f.hosts == ("gpu-server320",)


@pytest.mark.parametrize(
    "other",
    [
        # a peer that exited (FIN), or is alive but absent: a process story
        dict(source="pytorch", kind="exception", severity="error", host="n2", t=-1, message="RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:12345"),
        dict(source="pytorch", kind="network_error", severity="error", host="n2", t=-1, message="[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete"),
        # a process killed, a step cancelled, an OOM, another exception, a timeout
        dict(source="slurm", kind="process_exit", severity="error", host="n2", t=1, message="srun: error: n2: task 1: Killed", attrs={"hosts": ["n2"], "tasks": [1], "signal": "SIGKILL"}),
        dict(source="pytorch", kind="root_cause_report", severity="error", host="n2", t=1, message="ChildFailedError root", attrs={"root": True, "exitcode": -9}),
        dict(source="slurm", kind="job_cancel", severity="error", host="n2", t=1, message="*** STEP 1.0 ON n2 CANCELLED AT 2026-09-14T08:00:01 ***"),
        dict(source="kernel", kind="host_oom", severity="error", host="n2", t=-5, message="Out of memory: Killed process 4411 (python)"),
        dict(source="pytorch", kind="exception", severity="error", host="n2", t=-2, message="RuntimeError: CUDA error: an illegal memory access was encountered"),
        dict(source="pytorch", kind="collective_timeout", severity="error", host="n2", t=-3, message="Watchdog caught collective operation timeout"),
        dict(source="sacct", kind="job_state", severity="error", host=None, t=5, message="State=NODE_FAIL", attrs={"state": "NODE_FAIL"}),
    ],
)
def test_a_reset_beside_a_process_story_is_that_storys_symptom(other: dict) -> None:
    assert lone_network_reset(make_events(RESET, other), None) == []


def test_the_lone_reset_verdict_is_low_and_says_what_is_missing(tmp_path: Path) -> None:
    r = _analyze(tmp_path, {"log.txt": "\n".join([
        "2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN socketProgressOpt: Call to send to 10.44.137.149<52905> failed : Connection reset by peer",
        "2025-11-24T03:20:21.001128133Z gpu-server320 [5] NCCL INFO misc/socket.cc:64 -> 6",
        "2025-11-24T03:20:21.001135879Z gpu-server320 [5] NCCL INFO bootstrap.cc:868 -> 6 ncclSocketConnect()",
    ]) + "\n"})
    assert r["cause"] == "fabric_timeout" and r["confidence"] < CONFIDENT_LINE
    assert r["implicated"]["nodes"] == ["gpu-server320"]
    assert PEER_LOG_MISSING in r["missing"]
    assert r["first_failure"]["line"] == 1 and r["first_failure"]["node"] == "gpu-server320"


def test_the_heartbeat_monitors_store_reset_is_the_store_hosts_end(tmp_path: Path) -> None:
    # ProcessGroupNCCL's heartbeat monitor says in its own words that the reset came from the
    # TCPStore's host going away (NVIDIA-NeMo/Megatron-Bridge#1581: the OOM-killed run's
    # survivors): a process story, not a lone network reset.
    r = _analyze(tmp_path, {"log.txt": "[rank41]:[W1125 19:49:13.737053108 ProcessGroupNCCL.cpp:1781] [PG ID 0 PG GUID 0(default_pg) Rank 41] "
                            "Failed to check the \"should dump\" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer\n"})
    assert r["cause"] == "unknown"
    assert not any(e["rule"] == RULE_ID for e in r["evidence"])


def test_survivors_resets_after_a_node_was_killed_stay_symptoms(tmp_path: Path) -> None:
    # A recorded run (real Slurm, real gloo): node n1's processes were SIGKILLed and the
    # survivors saw "Connection reset by peer"; srun's exit lines say who died.
    import shutil

    from crashscope.pipeline import load_timeline

    src = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "nodekill_n1_srun"
    shutil.copytree(src, tmp_path / "job", ignore=shutil.ignore_patterns("truth.json"))
    ev = load_timeline(tmp_path / "job").timeline.events
    assert ev.filter(ev["message"].str.contains("Connection reset by peer")).height > 0
    assert lone_network_reset(ev, None) == []
    report, _, _ = analyze(tmp_path / "job")
    assert report.cause == "node_failure"


# -- where a job ran, from the scheduler's and the framework's own fields --------------------------

TORQUE_MAIL = "PBS Job Id: 2600365.mskcc-fe1.local\nJob Name:   STDIN\nExec host:  {exec_host}\njob deleted\nJob deleted at request of root@mskcc-fe1.local\njob preempted (node failure)\n"


def test_a_torque_mails_exec_host_is_where_the_job_failed(tmp_path: Path) -> None:
    # Torque svr_mail.c: "PBS Job Id: %i", "Job Name:   %j", "Exec host:  %h" (exec_host host/cpu[+host/cpu])
    r = _analyze(tmp_path / "a", {"mail.txt": TORQUE_MAIL.format(exec_host="gpu-2-17/5")})
    assert r["cause"] == "node_failure" and r["implicated"]["nodes"] == ["gpu-2-17"]
    assert r["first_failure"]["node"] == "gpu-2-17"
    r = _analyze(tmp_path / "b", {"mail.txt": TORQUE_MAIL.format(exec_host="n001/0-3+n001/4-7")})
    assert r["implicated"]["nodes"] == ["n001"]
    # two hosts: the mail does not say which one failed
    r = _analyze(tmp_path / "c", {"mail.txt": TORQUE_MAIL.format(exec_host="n001/0+n002/0")})
    assert r["cause"] == "node_failure" and r["implicated"]["nodes"] == []


RAY_DIED = (Path(__file__).parent / "data" / "real" / "ray-43751" / "log.txt").read_text()


def test_ray_actor_died_errors_ip_field_is_the_dead_node(tmp_path: Path) -> None:
    # ray/exceptions.py ActorDiedError: the "\tip: " field comes right before the death cause (a real paste)
    r = _analyze(tmp_path / "a", {"log.txt": RAY_DIED})
    assert r["cause"] == "node_failure" and r["implicated"]["nodes"] == ["10.72.56.3"]
    # an ip: field of another, earlier error does not place this one
    assert "\tip: 10.72.56.3\nThe actor is dead because its node has died" in RAY_DIED
    far = RAY_DIED.replace("\nThe actor is dead", "\n" + "some other line\n" * 3 + "The actor is dead")
    r = _analyze(tmp_path / "b", {"log.txt": far})
    assert r["implicated"]["nodes"] == []


def test_a_mismatch_culprit_is_the_rank_whose_own_fingerprint_is_the_odd_one(tmp_path: Path) -> None:
    """The four reports of fixtures/recorded/uneven_rank2_srun (torch 2.13.0): rank 2 ran the
    final barrier, the others an all_reduce; the peers' reports decode rank 2's side as REDUCE and
    rank 2's decodes rank 0's as GATHER. Rank 2's own report comes first here, so a vote that
    weighed every side alike would tie on rank 0 and could blame it."""
    fp = "CollectiveFingerPrint(SequenceNumber=32, OpType=ALLREDUCE, TensorShape=[919296], TensorDtypes=Float)"
    lines = ["[rank2]: RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=32OpType=BARRIER), but Rank 0 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=0OpType=GATHER).Collectives differ in the following aspects: "
             "\t Sequence number: 32vs 0  Op type: BARRIERvs GATHER"]
    lines += [f"[rank{r}]: RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running collective: "
              f"{fp}, but Rank 2 is running collective: CollectiveFingerPrint(SequenceNumber=0OpType=REDUCE)."
              "Collectives differ in the following aspects: \t Sequence number: 32vs 0  Op type: ALLREDUCEvs REDUCE"
              for r in (0, 1, 3)]
    r = _analyze(tmp_path, {"train.log": "\n".join(lines) + "\n"})
    assert r["cause"] == "software_error" and r["implicated"]["ranks"] == [2], (r["cause"], r["implicated"])
