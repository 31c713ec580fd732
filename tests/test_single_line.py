"""A user pastes one error line into a ticket: crashscope must still name the cause.

Each line is in the exact real format (see shared/reference); none comes from the
simulator's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashscope.pipeline import analyze

CASES = [
    ("fabric_timeout", "node002:41001:41188 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.3<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv) localGid ::ffff:10.10.1.7 remoteGid ::ffff:10.10.1.3"),
    ("fabric_timeout", "[2026-09-14 08:12:44.100512] node012:880:1012 [1] transport/net_ib/p2p.cc:688 (ncclIbLogCompletionWithError) NCCL WARN NET/IB: Got completion from peer 10.0.3.21<33811> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129  hca mlx5_2"),
    ("gpu_hardware", "[ 9120.330217] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
    ("gpu_hardware", "Sep 14 08:13:02 node003 kernel: NVRM: Xid (PCI:0000:9a:00): 48, pid=44123, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
    ("preemption", "slurmstepd: error: *** JOB 123456 ON node001 CANCELLED AT 2026-09-14T08:20:01 DUE TO PREEMPTION ***"),
    ("time_limit", "slurmstepd: error: *** STEP 123456.0 ON node001 CANCELLED AT 2026-09-14T08:20:01 DUE TO TIME LIMIT ***"),
    ("node_failure", "slurmstepd: error: *** JOB 123456 ON node001 CANCELLED AT 2026-09-14T08:19:59 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"),
    ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use."),
    ("oom", "slurmstepd: error: Detected 1 oom_kill event in StepId=123456.0. Some of the step tasks have been OOM Killed."),
    ("oom", "[ 9130.004111] Memory cgroup out of memory: Killed process 44120 (python3) total-vm:61234560kB, anon-rss:50123456kB, file-rss:81234kB, shmem-rss:0kB, UID:1001 pgtables:101234kB oom_score_adj:0"),
    ("storage_stall", "[ 8123.456789] nfs: server fs01 not responding, still trying"),
    ("driver_drift", "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"),
    ("driver_drift", "Failed to initialize NVML: Driver/library version mismatch"),
    ("gpu_hardware", "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"),
    ("gpu_hardware", "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ("software_error", "[rank1]: RuntimeError: DDP expects same model across all ranks, but Rank 1 has 212 params, while rank 0 has inconsistent 0 params."),
    ("software_error", "node001:2718:2718 [1] init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 1000"),
]


@pytest.mark.parametrize("cause,line", CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)])
def test_one_pasted_line_gets_its_cause(tmp_path: Path, cause: str, line: str) -> None:
    (tmp_path / "pasted.log").write_text(line + "\n")
    report, _, _ = analyze(tmp_path)
    assert report.cause == cause, (report.cause, report.summary, [e.rule for e in report.evidence])
    assert report.evidence and report.evidence[0].file == "pasted.log" and report.evidence[0].line == 1


def test_a_traceback_whose_header_was_cut(tmp_path: Path) -> None:
    (tmp_path / "tail.log").write_text(
        '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/parallel/distributed.py", line 674, in __init__\n'
        "    _verify_param_shape_across_processes(self.process_group, parameters)\n"
        "RuntimeError: DDP expects same model across all ranks, but Rank 1 has 212 params, while rank 0 has inconsistent 0 params.\n"
    )
    report, _, _ = analyze(tmp_path)
    assert report.cause == "software_error"
    assert report.first_failure is not None and report.first_failure.line == 3


def test_a_lone_watchdog_timeout_is_a_symptom_not_a_cause(tmp_path: Path) -> None:
    (tmp_path / "pasted.log").write_text(
        "[rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600047 milliseconds before timing out.\n"
    )
    report, _, _ = analyze(tmp_path)
    assert report.cause == "unknown"
    assert report.confidence <= 0.5
    assert report.missing  # says what is missing


def test_a_chained_traceback_cut_inside_a_checkpoint_save_follows_its_cause(tmp_path: Path) -> None:
    # CPython prints a chain's cause first, then "The above exception was the direct cause of
    # the following exception:", then the later traceback (Lib/traceback.py). A paste that keeps
    # the cause's last line and a later traceback cut inside the checkpoint save
    # (NVIDIA/NeMo-Aligner#502's shape): the cut traceback is no new software failure.
    (tmp_path / "pasted.log").write_text(
        "OSError: [Errno 5] Input/output error\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/app/train.py", line 173, in main\n'
        "    trainer.fit()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/lightning/pytorch/trainer/trainer.py", line 1365, in save_checkpoint\n'
        "    self.strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)\n"
    )
    report, _, _ = analyze(tmp_path)
    assert report.cause == "storage_stall", (report.cause, [e.rule for e in report.evidence])
    assert "python-traceback-truncated" not in {e.rule for e in report.evidence}


def test_a_cut_traceback_after_an_unrelated_exception_is_still_read(tmp_path: Path) -> None:
    # no chain line between them: the cut traceback is its own failure, as before
    (tmp_path / "pasted.log").write_text(
        "OSError: [Errno 5] Input/output error\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/app/train.py", line 173, in main\n'
        "    trainer.fit()\n"
    )
    report, _, _ = analyze(tmp_path)
    assert "python-traceback-truncated" in {e.rule for e in report.evidence}
