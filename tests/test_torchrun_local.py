"""Plain torchrun runs on one host, recorded by benchmarks/lab/local_torchrun.py: only the
console output, a print-based training script unlike the lab's (progress from rank 0 only,
no per-rank files, no TORCH_DISTRIBUTED_DEBUG). Real torch 2.13 gloo output, faults made by
the worker itself at step 30."""

from __future__ import annotations

from pathlib import Path

from crashscope.pipeline import analyze

DATA = Path(__file__).resolve().parent / "data" / "torchrun_local"


def _report(name: str):  # type: ignore[no-untyped-def]
    report, _, _ = analyze(DATA / name)
    return report


def test_the_exception_on_one_rank_is_the_cause_and_names_it() -> None:
    r = _report("exc")
    assert r.cause == "software_error"
    assert r.implicated.ranks == [2]
    assert r.first_failure is not None and r.first_failure.rank == 2 and "KeyError" in r.first_failure.message


def test_a_rank_killed_by_sigkill_is_named_though_nothing_says_why() -> None:
    # torchrun's root-cause entry names the rank and the signal; no line says who sent it.
    r = _report("kill")
    assert r.implicated.ranks == [2]
    assert r.confidence < 0.8
    assert r.first_failure is not None and r.first_failure.rank == 2


def test_the_stopped_rank_is_the_hang_suspect() -> None:
    # Ranks 0, 2, 3 time out or read a close; rank 1 (SIGSTOP) says nothing until torchrun kills it.
    r = _report("stop")
    assert r.implicated.ranks == [1]
    assert r.confidence < 0.8


def test_a_rank_that_read_a_close_is_not_taken_for_the_silent_one() -> None:
    # Rank 1 fell silent allocating memory; rank 3 read rank 0's close instead of timing out
    # itself, which says it was alive in the collective: only rank 1 is the suspect.
    r = _report("stall")
    assert r.implicated.ranks == [1]
    assert r.cause != "none" and r.confidence < 0.8


def test_the_node_whose_launcher_fell_silent_is_the_node_failure() -> None:
    # Two torchrun agents, one console file each; the second agent and its workers were
    # SIGKILLed at step 25. node0's ranks read a reset / close from their lost peers and its
    # agent printed the ChildFailedError table; node1.log ends after torchrun's start banner.
    r = _report("nodeloss")
    assert r.cause == "node_failure" and r.confidence < 0.8
    assert {e.file for e in r.evidence if e.rule == "silent-agent"} >= {"node1.log"}
    assert r.first_failure is not None and r.first_failure.file == "node1.log"
    assert 1 not in r.implicated.ranks  # node0's rank 1 only reported the loss


def test_silent_agent_needs_the_others_peer_loss(tmp_path: Path) -> None:
    # The same consoles cut before any loss: two quiet agents are a job still running.
    job = tmp_path / "job"
    job.mkdir()
    for name in ("node0.log", "node1.log"):
        lines = (DATA / "nodeloss" / name).read_text().splitlines()[:6]
        (job / name).write_text("\n".join(lines) + "\n")
    report, _, _ = analyze(job)
    assert not [e for e in report.evidence if e.rule == "silent-agent"]


def test_torchruns_own_sigkill_after_the_grace_period_is_no_oom_evidence() -> None:
    # Rank 1 (SIGSTOPped) ignored the agent's SIGTERM; 30 s later torchrun logged "Unable to
    # shutdown process 23268 via 15, forcefully exiting via 9" and listed the worker with
    # "exitcode  : -9 (pid: 23268)": that -9 is the launcher's kill, not the OOM killer's.
    r = _report("stop")
    oom_rules = {"torchrun-worker-sigkill", "catalog-worker-sigkill", "catalog-oom-context"}
    assert not [e for e in r.evidence if e.rule in oom_rules]
    assert r.cause != "oom"


def test_a_sigkill_of_another_worker_still_reads_as_weak_oom(tmp_path: Path) -> None:
    # The same table where the -9 is another pid than the one torchrun force-killed: no teardown
    # explains it, so it stays the weak OOM evidence it was.
    text = (DATA / "stop" / "train.log").read_text()
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.log").write_text(text.replace("Unable to shutdown process 23268", "Unable to shutdown process 23270"))
    assert {"torchrun-worker-sigkill", "catalog-worker-sigkill"} <= _fired(job)
    assert not {"torchrun-worker-sigkill", "catalog-worker-sigkill"} & _fired(DATA / "stop")


def _fired(job: Path) -> set[str]:
    from crashscope.pipeline import find, load_timeline
    from crashscope.verdict import _this_job

    tl = load_timeline(job).timeline
    findings, _ = find(_this_job(tl.events, tl.job_id), tl.world_size)
    return {f.rule_id for f in findings}
