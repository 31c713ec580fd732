"""The recorded runs as a user without admin access collects them: the job's output
(``slurm-<id>.out``) and the ranks' own logs, with or without what the user can ask Slurm
(sacct, ``scontrol show job``), but no slurmctld/slurmd logs, no kernel log, no Flight
Recorder dumps. Less evidence may lower a verdict to ``unknown``; it must never make one
confidently wrong, and what the remaining files say must still be read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crashscope.evaluation import load_cases, score
from crashscope.pipeline import analyze

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
CASES = {c.id: c for c in load_cases(RECORDED, "recorded")}


def _job_output_and_rank_logs(case_id: str, dst: Path) -> Path:
    src = CASES[case_id].path
    out = dst / case_id
    out.mkdir()
    if (src / "logs").is_dir():
        shutil.copytree(src / "logs", out / "logs")
    # the job's output as the batch script named it: slurm-%j.out by default, srun's -o per-task files,
    # or #SBATCH --output=%x-%j.out --error=%x-%j.err (train_third.py's runs: cnn-hydra-5.out/.err)
    for p in [*src.glob("*.out"), *src.glob("*.err")]:
        shutil.copy(p, out / p.name)
    return out


def _what_a_user_can_collect(case_id: str, dst: Path) -> Path:
    out = _job_output_and_rank_logs(case_id, dst)
    for p in CASES[case_id].path.glob("*"):
        if p.is_file() and (p.name.startswith("sacct") or p.name.startswith("scontrol")):
            shutil.copy(p, out / p.name)
    return out


VARIANTS = {"job output and rank logs": _job_output_and_rank_logs, "and sacct, scontrol": _what_a_user_can_collect}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("case_id", sorted(CASES))
def test_what_a_user_collects_is_never_read_confidently_wrong(case_id: str, variant: str, tmp_path: Path) -> None:
    report, _, _ = analyze(VARIANTS[variant](case_id, tmp_path))
    s = score(CASES[case_id], report.to_dict())
    assert not s.confident_wrong, (s.cause, s.confidence)


def test_a_lone_killed_task_without_the_kernel_log_is_unknown_and_named(tmp_path: Path) -> None:
    # oom_rank3_srun: the memcg OOM killer took rank 3; without dmesg only srun's
    # 'n2: task 3: Killed' is left. Rank 3 fell silent because it was killed: no node failure.
    report, _, _ = analyze(_job_output_and_rank_logs("oom_rank3_srun", tmp_path))
    assert report.cause == "unknown"
    assert (report.implicated.nodes, report.implicated.ranks) == (["n2"], [3])
    assert report.first_failure is not None and "task 3: Killed" in report.first_failure.message


def test_megatron_progress_at_its_last_iteration_is_a_weak_success_signal(tmp_path: Path) -> None:
    # completed_srun logs 'iteration 60/ 60' on every rank and nothing fails; the job's exit
    # status is in no file left (its 'srun exited with 0' is the lab's own echo)
    report, _, _ = analyze(_job_output_and_rank_logs("completed_srun", tmp_path))
    assert report.cause == "none" and report.confidence < 0.8


def _task_outputs_and(case_id: str, dst: Path, *names: str) -> Path:
    """The per-task files of ``srun -o slurm-%j-%t.out`` without the batch script's own output
    (srun's task exit lines are there), plus the named files of the recording."""
    src, out = CASES[case_id].path, dst / case_id
    out.mkdir()
    for p in src.glob("slurm-*-*.out"):
        shutil.copy(p, out / p.name)
    for n in names:
        shutil.copy(src / n, out / n)
    return out


@pytest.mark.parametrize("scheduler_file", ["sacct.txt", "sacct.json", "scontrol_show_job.txt"])
def test_a_batch_script_that_exits_0_after_a_failed_step_is_no_success(scheduler_file: str, tmp_path: Path) -> None:
    # exception_rank2_other_srun (round 9): the job script ends with `echo "END TIME: $(date)"`, so Slurm
    # says COMPLETED 0:0 while step 1.0 FAILED (DerivedExitCode 1:0) and every rank's output ends in a
    # traceback torch's excepthook printed ("[rankN]: Traceback"): rank 2's IndexError came first.
    report, _, _ = analyze(_task_outputs_and("exception_rank2_other_srun", tmp_path, scheduler_file))
    assert report.cause == "software_error"
    assert report.implicated.ranks == [2]
    assert "COMPLETED because its batch script exited 0" in report.summary


def test_a_completed_run_with_per_task_outputs_stays_a_success(tmp_path: Path) -> None:
    # completed_other_srun: the same script ending, a run that did finish: no step failed, no rank raised
    report, _, _ = analyze(_task_outputs_and("completed_other_srun", tmp_path, "sacct.txt"))
    assert (report.cause, report.confidence) == ("none", 0.95)


def test_a_nanogpt_save_followed_by_its_step_line_was_finished(tmp_path: Path) -> None:
    # completed_other_srun: nanoGPT prints "step 40: train loss ...", "saving checkpoint to out" (no end line),
    # then "iter 40: loss ..." and exits; the step after the save says the save returned (no storage stall)
    report, _, _ = analyze(_job_output_and_rank_logs("completed_other_srun", tmp_path))
    assert report.cause != "storage_stall"
