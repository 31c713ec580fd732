"""decide(): the verdict as a pure function of findings, the timeline and the classifier's
opinion, tested without any ingest."""

from __future__ import annotations

import copy
from pathlib import Path

from crashscope.engine.model import Evidence, Finding
from crashscope.timeline import Timeline
from crashscope.verdict import CAP_BASE, CAP_SLOPE, CONFIDENT_LINE, _explained_where, decide, evidence_cap
from tests.factories import SEC, T0, make_events


def _finding(cause: str, weight: float, *, role: str = "cause", t: float = 0.0, host: str = "node002", rank: int = 9, rule: str = "r") -> Finding:
    ev = Evidence(time=T0 + int(t * SEC), host=host, rank=rank, gpu=None, gpu_index=None, file=f"logs/rank{rank}.log",
                  line=42, source="nccl", kind="network_error", message="NET/IB : Got completion from peer with status=12")
    return Finding(rule_id=rule, title=rule, cause=cause, role=role, status="stable", weight=weight, first_time=ev.time,
                   count=1, hosts=(host,), ranks=(rank,), gpus=(), evidence=(ev,), explanation="", actions=("look",))


def _timeline(*rows: dict) -> Timeline:
    ev = make_events(*rows) if rows else make_events(dict(kind="log_error", severity="error", message="x"))
    return Timeline(ev, None, ["node001", "node002"], 16, list(range(16)), {}, [], [])


def test_the_strongest_in_window_cause_wins_and_names_its_place():
    fs = [_finding("fabric_timeout", 0.9, t=0, rule="ib"), _finding("software_error", 0.6, t=5, host="node001", rank=1, rule="exc"),
          _finding("fabric_timeout", 0.25, role="symptom", t=600, rule="timeout")]
    v = decide(fs, _timeline())
    assert v.cause == "fabric_timeout"
    assert v.implicated.nodes == ["node002"] and v.implicated.ranks == [9]
    assert v.first_failure is not None and v.first_failure.file == "logs/rank9.log" and v.first_failure.line == 42
    assert [e.rule for e in v.evidence][:1] == ["ib"]


def test_a_hang_on_a_rank_defers_to_the_reason_found_for_that_rank():
    # fr-hang says rank 9 never arrived; a throttled GPU under rank 9 says why.
    hang = _finding("node_failure", 0.85, t=0, rule="fr-hang")
    slow = _finding("gpu_throttle", 0.7, t=-30, rule="gpu-hw-slowdown")
    v = decide([hang, slow], _timeline())
    assert v.cause == "gpu_throttle"
    assert v.implicated.ranks == [9]
    assert "fr-hang" in [c.rule for c in v.co_occurring]
    # The same reason about another rank explains nothing; nor does a weak one; and a
    # node_failure finding that says why (a rule, not a hang report) is never set aside.
    other = _finding("gpu_throttle", 0.7, t=-30, host="node001", rank=1, rule="gpu-hw-slowdown")
    assert _explained_where([(0.8, hang), (0.7, other)]) == []
    assert _explained_where([(0.8, hang), (0.1, slow)]) == []
    down = _finding("node_failure", 0.85, rule="node-down")
    assert _explained_where([(0.8, down), (0.7, slow)]) == []
    assert _explained_where([(0.8, hang), (0.7, slow)]) == [hang]


def test_a_rank_that_fell_silent_because_it_was_killed_alone_is_no_node_failure():
    # rank 9 stopped answering, and it was the one task SIGKILLed while its node-mates lived on
    # (the OOM killer's way): the silence is the kill, and the kill alone does not say why
    silent = _finding("node_failure", 0.55, t=0, rule="silent-ranks")
    killed = _finding("node_failure", 0.45, role="symptom", t=1, rule="first-killed")
    assert _explained_where([(0.55, silent)], [killed]) == [silent]
    v = decide([silent, killed], _timeline())
    assert v.cause == "unknown" and v.implicated.ranks == [9] and v.implicated.nodes == ["node002"]
    # another rank's kill explains nothing about rank 9
    other = _finding("node_failure", 0.45, role="symptom", t=1, host="node001", rank=1, rule="first-killed")
    assert _explained_where([(0.55, silent)], [other]) == []
    assert decide([silent, other], _timeline()).cause == "node_failure"


def test_a_run_whose_progress_reached_its_last_iteration_is_none_but_not_sure():
    def it(rank: int, step: int, total: int = 60, fw: str = "megatron") -> dict:
        return dict(source="applog", kind="train_step", severity="info", rank=rank, t=float(step),
                    message=f"iteration {step}/{total} | elapsed time per iteration (ms): 300.0 |",
                    attrs={"framework": fw, "step": step, "total": total})
    v = decide([], _timeline(*[it(r, s) for r in (0, 1) for s in (59, 60)]))
    assert v.cause == "none" and v.confidence < CONFIDENT_LINE and "60/60" in v.summary
    assert any("exit status" in m for m in v.missing)
    # a rank that stopped short, a counter whose total is not the run's (an epoch's tqdm bar)
    assert decide([], _timeline(it(0, 60), it(1, 59))).cause == "unknown"
    assert decide([], _timeline(it(0, 100, 100, "tqdm"))).cause == "unknown"


def test_confidence_is_capped_by_the_most_decisive_line():
    v = decide([_finding("software_error", 0.6)], _timeline())
    assert v.cause == "software_error" and v.confidence <= evidence_cap(0.6) < CONFIDENT_LINE
    assert evidence_cap(0.9) == CAP_BASE + CAP_SLOPE * 0.9 >= CONFIDENT_LINE


def test_a_classifier_sure_of_an_unsupported_cause_is_left_out():
    clf = {"model": "m", "probabilities": {"gpu_hardware": 0.99, "node_failure": 0.005}}
    v = decide([_finding("node_failure", 0.55, rule="silent-ranks")], _timeline(), classifier=clf)
    assert v.cause == "node_failure"
    assert "ignored" in v.classifier


def test_only_symptoms_is_unknown():
    v = decide([_finding("fabric_timeout", 0.25, role="symptom")], _timeline())
    assert v.cause == "unknown" and v.confidence <= 0.5


def test_no_failure_and_no_success_signal_is_unknown_with_what_is_missing():
    tl = _timeline(dict(kind="train_step", severity="info", message="step 1"))
    v = decide([], tl)
    assert v.cause == "unknown" and any("exit status" in m for m in v.missing)


def test_completed_without_failure_is_none():
    tl = _timeline(dict(source="sacct", kind="job_state", severity="info", message="sacct: JobId=1 State=COMPLETED",
                        attrs={"state": "COMPLETED"}))
    assert decide([], tl).cause == "none"


def test_decide_is_pure():
    fs = [_finding("fabric_timeout", 0.9)]
    tl = _timeline()
    missing = ["no kernel log"]
    before = (copy.deepcopy(fs), tl.events.clone(), list(missing))
    a, b = decide(fs, tl, missing=missing), decide(fs, tl, missing=missing)
    assert a == b
    assert (fs, missing) == (before[0], before[2]) and tl.events.equals(before[1])


def test_every_cause_label_has_a_title():
    from crashscope.schema import CAUSE_TITLES, CAUSES

    assert set(CAUSE_TITLES) == set(CAUSES)


def _arrival_run(*, slow_from: int | None, steps: int = 40, rank: int = 0) -> tuple[list[Finding], Timeline]:
    """A completed job whose four ranks log one progress line a step (0.5 s a step, 0.8 s
    from ``slow_from`` on), and the arrival-order finding naming ``rank``."""
    rows: list[dict] = [dict(source="sacct", kind="job_state", severity="info", message="State=COMPLETED", attrs={"state": "COMPLETED"})]
    for r in range(4):
        t = 0.0
        for step in range(1, steps + 1):
            t += 0.8 if slow_from is not None and step >= slow_from else 0.5 + 0.01 * (step % 3)
            rows.append(dict(source="applog", kind="train_step", severity="info", rank=r, host="node001" if r < 2 else "node002",
                             file=f"logs/rank{r}.log", line=step, t=t, message=f"step {step}", attrs={"step": step}))
    f = _finding("gpu_throttle", 0.5, t=10, host="node001", rank=rank, rule="straggler-arrival-order")
    return [f], _timeline(*rows)


def test_a_completed_run_that_slowed_is_an_incident_named_by_arrival_order():
    fs, tl = _arrival_run(slow_from=12)
    v = decide(fs, tl)
    assert v.cause == "gpu_throttle" and v.implicated.ranks == [0] and v.implicated.nodes == ["node001"]
    assert "slowed 1.6x" in v.summary
    # Only arrival-order evidence: never the confidence that promises the cause is right.
    assert 0.3 < v.confidence < CONFIDENT_LINE


def test_a_rank_last_at_every_collective_of_a_steady_completed_run_is_not_an_incident():
    # Rank 0 (logging, checkpoints, evaluation) is routinely the last to arrive in healthy jobs:
    # with the pace unchanged the completed job stays "none".
    fs, tl = _arrival_run(slow_from=None)
    assert decide(fs, tl).cause == "none"
    # Without progress lines no slowdown can be shown either.
    bare = _timeline(dict(source="sacct", kind="job_state", severity="info", message="State=COMPLETED", attrs={"state": "COMPLETED"}))
    assert decide(fs, bare).cause == "none"
    # A slowdown alone (no straggler named, under throughput-collapse's factor) changes nothing.
    _, slowed = _arrival_run(slow_from=12)
    assert decide([], slowed).cause == "none"


def test_summary_never_prints_an_unknown_timeout_field():
    from crashscope.verdict import _known_parts

    assert _known_parts("pg=0 seq=? op=?") == "pg=0"
    assert _known_parts("pg=0 seq=1079 op=ALLREDUCE") == "pg=0 seq=1079 op=ALLREDUCE"
    assert _known_parts("pg=? seq=? op=?") == "a collective"


def test_gloo_timeouts_without_a_sequence_number_read_plainly():
    # gloo's timeout texts carry no SeqNum/OpType: the summary names what is known, no "?".
    from crashscope.evaluation import analyze_case, load_cases

    root = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
    case = next(c for c in load_cases(root, "recorded") if c.id == "iptables_rank1_torchrun")
    summary = analyze_case(case)["summary"]
    assert "timed out in" in summary and "?" not in summary, summary


def test_with_only_symptoms_the_desync_reports_lagging_ranks_are_the_suspects():
    # a watchdog timeout on rank 0 and its desync report naming rank 7: no cause, but a place to look
    timeout = _finding("fabric_timeout", 0.25, role="symptom", host="node001", rank=0, rule="pytorch-collective-timeout")
    desync = _finding("unknown", 0.3, role="context", host="node002", rank=7, rule="pytorch-desync-lagging-ranks")
    v = decide([timeout, desync], _timeline())
    assert v.cause == "unknown" and v.confidence < CONFIDENT_LINE
    assert v.implicated.ranks == [7] and v.implicated.nodes == ["node002"]
    assert "desync report names rank 7" in v.summary
    # without it the verdict names no rank
    assert decide([timeout], _timeline()).implicated.ranks != [7]


def test_a_time_limit_after_the_trainer_said_it_finished_is_the_exit_overrunning() -> None:
    ev = Evidence(time=T0 + 600 * SEC, host="node001", rank=None, gpu=None, gpu_index=None, file="slurm.out", line=4,
                  source="slurm", kind="job_cancel",
                  message="slurmstepd: error: *** STEP 4226796.2 ON node001 CANCELLED AT 2026-09-14T08:10:00 DUE TO TIME LIMIT ***")
    limit = Finding(rule_id="slurm-time-limit", title="t", cause="time_limit", role="cause", status="stable", weight=0.9,
                    first_time=ev.time, count=1, hosts=("node001",), ranks=(), gpus=(), evidence=(ev,), explanation="",
                    actions=("Resume with a longer --time.",))
    cancel = dict(source="slurm", kind="job_cancel", severity="error", t=600.0, file="slurm.out", line=4, message=ev.message)
    done = dict(source="applog", kind="run_end", severity="info", t=600.0, file="slurm.out", line=3,
                message="[after training is done] datetime: 2026-09-14 08:00:03", attrs={"outcome": "success", "framework": "megatron"})
    plain = decide([limit], _timeline(cancel))
    assert plain.cause == "time_limit" and plain.confidence >= CONFIDENT_LINE
    v = decide([limit], _timeline(done, cancel))
    assert v.cause == "time_limit" and v.confidence < CONFIDENT_LINE
    assert "said it finished" in v.summary and "slurm.out:3" in v.summary
    assert v.actions[0].startswith("The trainer finished before the limit")
    # a run_end after the banner (a later line of the same file) says nothing about the overrun
    late = dict(done, line=5)
    assert decide([limit], _timeline(cancel, late)).confidence >= CONFIDENT_LINE


def _oom_kill(pid: int, t: float) -> Finding:
    ev = Evidence(time=T0 + int(t * SEC), host=None, rank=None, gpu=None, gpu_index=None, file="dmesg.txt", line=80,
                  source="kernel", kind="host_oom", message=f"Memory cgroup out of memory: Killed process {pid} (python) total-vm:2390360kB")
    return Finding(rule_id="host-oom-killer", title="oom", cause="oom", role="cause", status="stable", weight=0.9, first_time=ev.time,
                   count=1, hosts=(), ranks=(), gpus=(), evidence=(ev,), explanation="", actions=("look",))


def test_an_oom_kill_by_pid_is_the_one_task_srun_saw_sigkilled_first_and_no_other():
    # the kernel names a pid (mm/oom_kill.c) and kills it with SIGKILL; srun prints that task's end as
    # strsignal(SIGKILL), 'Killed', a second later (oom_cgroup_rank3_fourth_srun)
    killed = _finding("node_failure", 0.45, role="symptom", t=1, host="n2", rank=3, rule="first-killed")
    v = decide([_oom_kill(15785, 0), killed], _timeline())
    assert v.cause == "oom" and (v.implicated.nodes, v.implicated.ranks) == (["n2"], [3])
    assert v.first_failure is not None and (v.first_failure.node, v.first_failure.rank) == ("n2", 3)
    # two processes killed: nothing pairs either pid with the task
    v = decide([_oom_kill(15785, 0), _oom_kill(15790, 0.5), killed], _timeline())
    assert v.cause == "oom" and v.implicated.ranks == [] and v.implicated.nodes == []
