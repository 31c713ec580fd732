"""Cross-rank analyses (crashscope/analyses/): who stopped first, the first task killed,
a throughput collapse. Events are built in code; the texts are those real runs wrote
(fixtures/recorded/, torch 2.13 gloo under Slurm 22.05)."""

from __future__ import annotations

import pytest

from crashscope.analyses.progress import throughput_collapse
from crashscope.analyses.silence import MUTUAL_WEIGHT, NAMED_WEIGHT, NODE_WEIGHT, RANK_WEIGHT, first_killed, silent_ranks, step_cancelled
from crashscope.sources.applog import TRAINING_ENDED
from tests.factories import make_events

GLOO_TIMEOUT = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation to complete"
HOST = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}


def _progress(rank: int, t: float, line: int = 10, step: int = 12) -> dict:
    return dict(source="applog", kind="train_step", severity="info", rank=rank, host=HOST[rank], t=t, line=line,
                file=f"logs/rank{rank}.log", message=f"step {step} loss 0.62", attrs={"step": step})


def _timeout(rank: int, t: float) -> dict:
    return dict(source="pytorch", kind="collective_timeout", severity="error", rank=rank, host=HOST[rank], t=t, line=20,
                file=f"logs/rank{rank}.log", message=GLOO_TIMEOUT, attrs={"transport": "gloo", "wait": "recv", "timeout_ms": 30000})


def test_the_rank_that_said_nothing_while_its_peers_timed_out_is_the_suspect():
    ev = make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], *[_timeout(r, 30.2) for r in (0, 1, 2)])
    (f,) = silent_ranks(ev, 4)
    assert (f.cause, f.ranks, f.hosts, f.weight) == ("node_failure", (3,), ("n2",), RANK_WEIGHT)
    assert f.evidence[0].file == "logs/rank3.log" and f.evidence[0].rank == 3  # its last own line


def test_no_peer_loss_means_no_silence_finding():
    ev = make_events(*[_progress(r, 0.0) for r in range(4)])
    assert silent_ranks(ev, 4) == []


def test_a_whole_node_gone_quiet_is_the_node():
    ev = make_events(*[_progress(r, 0.0) for r in range(4)], *[_timeout(r, 30.2) for r in (0, 1)])
    (f,) = silent_ranks(ev, 4)
    assert (f.hosts, f.ranks, f.weight) == (("n2",), (2, 3), NODE_WEIGHT)
    assert f.evidence[0].rank == 2  # ranks that stopped together: the lowest first


def test_the_barrier_names_a_rank_that_came_back_late():
    # rank 2 resumed after the peers gave up and then failed on the closed connections
    barrier = dict(source="pytorch", kind="desync_report", severity="error", rank=0, host="n1", t=30.1, line=30,
                   file="logs/rank0.log", message="[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 30000 ms",
                   attrs={"lagging_ranks": [2], "via": "monitoredBarrier"})
    closed = dict(source="pytorch", kind="network_error", severity="error", rank=2, host="n2", t=34.0, line=40,
                  file="logs/rank2.log", message="Connection closed by peer [127.0.0.1]:2249", attrs={"transport": "gloo", "status": "closed"})
    late = _progress(2, 33.9, line=39, step=13)
    ev = make_events(*[_progress(r, 0.0) for r in range(4)], barrier, _timeout(1, 30.2), _timeout(3, 30.2), closed, late)
    (f,) = silent_ranks(ev, 4)
    assert (f.cause, f.ranks, f.weight) == ("node_failure", (2,), NAMED_WEIGHT)
    assert f.evidence[0].time is not None and f.evidence[0].line == 10  # where it stopped, not where it came back


def test_a_rank_that_reads_the_close_seconds_after_its_peers_timed_out_was_not_waiting():
    # no barrier (DETAIL off): rank 1 was stopped; ranks 0, 2, 3 timed out waiting in the ring,
    # closed their pairs, and rank 1, resumed 3 s later, read the close (sigstop_late_cont_rank1_nodebug_srun)
    closed = dict(source="pytorch", kind="network_error", severity="error", rank=1, host="n1", t=33.5, line=40,
                  file="logs/rank1.log", message="Connection closed by peer [127.0.0.1]:919", attrs={"transport": "gloo", "status": "closed"})
    waits = [_timeout(0, 30.2), dict(_timeout(2, 30.25), attrs={"transport": "gloo", "wait": "send", "timeout_ms": 30000}),
             _timeout(3, 30.24)]
    (f,) = silent_ranks(make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], *waits, closed), 4)
    assert (f.rule_id, f.cause, f.ranks, f.hosts, f.weight) == ("silent-ranks", "node_failure", (1,), ("n1",), RANK_WEIGHT)
    assert f.evidence[0].rank == 1 and f.evidence[0].line == 10  # where it stopped, not where it came back
    assert f.evidence[1].line == 40 and "was not waiting in the collective" in f.title  # and when it spoke again
    assert f.first_time == f.evidence[0].time
    # the same close read within milliseconds: a live rank blocked on the pair (a cut link), no culprit
    (g,) = silent_ranks(make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], *waits, dict(closed, t=30.21)), 4)
    assert (g.rule_id, g.ranks) == ("mutual-timeout", ())


def test_torchruns_summary_of_the_late_rank_is_not_when_it_spoke():
    # torchrun's ChildFailedError block (a '[1]:' entry, then the rank's error.json traceback) is printed by
    # the agent; its unstamped lines may take a neighbouring stamp (sigstop_late_cont_rank3_info_torchrun)
    closed = dict(source="pytorch", kind="network_error", severity="error", rank=3, host="n2", t=33.3, line=16,
                  file="logs/rank3.log", message="Connection closed by peer [127.0.0.1]:8877", attrs={"transport": "gloo", "status": "closed"})
    report = dict(source="pytorch", kind="root_cause_report", severity="error", rank=3, host="n2", t=33.0, line=200,
                  file="slurm-87.out", message="rank      : 3 (local_rank: 1)", attrs={"root": False, "rank": 3})
    echo = dict(closed, t=30.0, line=216, file="slurm-87.out")
    root = dict(report, rank=2, line=220, t=30.0, attrs={"root": True, "rank": 2})
    waits = [_timeout(0, 30.2), _timeout(1, 30.22), dict(_timeout(2, 30.21), attrs={"transport": "gloo", "wait": "send", "timeout_ms": 30000})]
    (f,) = silent_ranks(make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], *waits, closed, report, echo, root), 4)
    assert (f.rule_id, f.cause, f.ranks) == ("silent-ranks", "node_failure", (3,))
    assert f.evidence[0].line == 10 and f.evidence[1].line == 16  # its own lines, not the agent's summary


def test_a_named_rank_that_timed_out_too_was_cut_off():
    barrier = dict(source="pytorch", kind="desync_report", severity="error", rank=0, host="n1", t=30.1, line=30,
                   file="logs/rank0.log", message="[Rank 0]: Rank 3 failed to pass monitoredBarrier in 30000 ms",
                   attrs={"lagging_ranks": [3]})
    ev = make_events(*[_progress(r, 0.0) for r in range(4)], barrier, *[_timeout(r, 30.2) for r in (1, 2, 3)])
    (f,) = silent_ranks(ev, 4)
    assert (f.cause, f.ranks) == ("fabric_timeout", (3,))


def test_the_first_task_to_die_of_sigkill_names_its_node():
    killed = dict(source="slurm", kind="process_exit", severity="error", host="n2", t=10.0, line=50, file="slurm-8.out",
                  message="srun: error: n2: tasks 2-3: Killed", attrs={"hosts": ["n2"], "tasks": [2, 3], "signal": "SIGKILL"})
    term = dict(source="slurm", kind="process_exit", severity="error", host="n1", t=10.5, line=53, file="slurm-8.out",
                message="srun: error: n1: tasks 0-1: Terminated", attrs={"hosts": ["n1"], "tasks": [0, 1], "signal": "SIGTERM"})
    (f,) = first_killed(make_events(*[_progress(r, 0.0) for r in range(4)], killed, term), 4)
    assert (f.cause, f.hosts, f.ranks) == ("node_failure", ("n2",), (2, 3))
    assert f.evidence[0].line == 50


def test_one_task_killed_beside_living_tasks_is_not_the_node():
    # The OOM killer takes one process; a whole node going away takes all its tasks.
    def kill(tasks: list[int], host: str = "n1") -> dict:
        return dict(source="slurm", kind="process_exit", severity="error", host=host, t=10.0, line=50, file="slurm-8.out",
                    message=f"srun: error: {host}: task {tasks[0]}: Killed", attrs={"hosts": [host], "tasks": tasks, "signal": "SIGKILL"})
    prog = [_progress(r, 0.0) for r in range(4)]
    for ev in (make_events(*prog, kill([0])), make_events(kill([0]))):  # rank 1 ran on n1 too; nothing says what else ran there
        (f,) = first_killed(ev, 4)
        assert (f.role, f.hosts, f.ranks) == ("symptom", ("n1",), (0,))  # where to look, not a cause
    alone = [dict(_progress(r, 0.0), host="n1" if r < 2 else "n2") for r in range(3)]  # world 3: rank 2 alone on n2
    (f,) = first_killed(make_events(*alone, kill([2], "n2")), 3)
    assert (f.role, f.hosts, f.ranks) == ("cause", ("n2",), (2,))


def test_a_sigkill_the_scheduler_was_asked_for_is_not_the_node():
    # scancel of the step (fixtures/recorded/scancel_step_torchrun): sacct records the requester of a
    # SIGKILL only; srun's own kill after a bad exit leaves the step a plain CANCELLED
    killed = dict(source="slurm", kind="process_exit", severity="error", host="n1", t=10.0, line=91, file="slurm-85.out",
                  message="srun: error: n1: tasks 0-1: Killed", attrs={"hosts": ["n1"], "tasks": [0, 1], "signal": "SIGKILL"})
    step = dict(source="sacct", kind="job_state", severity="warning", t=10.5, line=4, file="sacct.txt",
                message="85.0|bash||CANCELLED by 0|0:9||", attrs={"job_id": "85", "step": "0", "state": "CANCELLED", "state_by_uid": 0})
    plain = dict(step, message="85.0|bash||CANCELLED|0:9||", attrs={"job_id": "85", "step": "0", "state": "CANCELLED"})
    prog = [_progress(r, 0.0) for r in range(4)]
    assert first_killed(make_events(*prog, killed, step), 4) == []
    assert first_killed(make_events(*prog, killed, dict(step, attrs={"job_id": "85", "step": "0", "state": "CANCELLED",
                                                                     "kill_request_user": "root"})), 4) == []
    (f,) = first_killed(make_events(*prog, killed, plain), 4)
    assert f.hosts == ("n1",)
    # a failed node: slurmctld killed the step itself and is the requester
    node_fail = dict(step, message="85|train||NODE_FAIL|0:0||", attrs={"job_id": "85", "step": None, "state": "NODE_FAIL"})
    assert len(first_killed(make_events(*prog, killed, step, node_fail), 4)) == 1


def test_the_kernels_oom_report_before_the_kill_is_no_ranks_complaint():
    # oom_cgroup_rank3_fourth_srun (round 15): the memcg OOM report in a dmesg without its host,
    # read by the catalog too, 1 s before srun's 'n2: task 3: Killed'; the report is the kill, said by the kernel
    oom = dict(source="catalog", kind="host_oom", severity="error", t=9.0, line=1, file="dmesg.txt",
               message="python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0", attrs={"catalog": "oom"})
    killed = dict(source="slurm", kind="process_exit", severity="error", host="n2", t=10.0, line=90, file="slurm-3.out",
                  message="srun: error: n2: task 3: Killed", attrs={"hosts": ["n2"], "tasks": [3], "signal": "SIGKILL"})
    (f,) = first_killed(make_events(*[_progress(r, 0.0) for r in range(4)], oom, killed), 4)
    assert (f.role, f.hosts, f.ranks) == ("symptom", ("n2",), (3,))


def test_a_kill_after_ranks_complained_is_not_the_first_failure():
    killed = dict(source="slurm", kind="process_exit", severity="error", host="n2", t=40.0, line=50, file="slurm-8.out",
                  message="srun: error: n2: task 3: Killed", attrs={"hosts": ["n2"], "tasks": [3], "signal": "SIGKILL"})
    assert first_killed(make_events(*[_timeout(r, 30.2) for r in range(3)], killed), 4) == []


def _steps(ms_by_step: list[float]) -> list[dict]:
    rows, t = [], 0.0
    for i, ms in enumerate(ms_by_step, start=1):
        t += ms / 1000
        for r in range(2):
            rows.append(dict(source="applog", kind="train_step", severity="info", rank=r, host=HOST[r], t=t, line=i,
                             file=f"logs/rank{r}.log", message=f"iteration {i}/100", attrs={"step": i, "step_ms": ms}))
    return rows


def test_a_job_that_slowed_down_and_stayed_slow():
    (f,) = throughput_collapse(make_events(*_steps([280.0] * 12 + [650.0] * 10)), 2)
    assert f.cause == "gpu_throttle" and f.hosts == () and f.ranks == ()
    assert "2.3x" in f.title and f.evidence[0].line == 12  # the last step at the old speed


def test_steady_or_noisy_steps_are_no_collapse():
    assert throughput_collapse(make_events(*_steps([280.0] * 22)), 2) == []
    assert throughput_collapse(make_events(*_steps([280.0, 300.0, 260.0, 700.0] * 5)), 2) == []


def test_step_times_from_stamps_when_lines_print_none():
    rows = [dict(r, attrs={"step": r["attrs"]["step"]}) for r in _steps([280.0] * 12 + [900.0] * 10)]
    (f,) = throughput_collapse(make_events(*rows), 2)
    assert f.cause == "gpu_throttle"


# gloo's ring allreduce: which connection the send/recv timeouts show broken (silence._ring_link).
# Texts as torch 2.13 gloo printed them (fixtures/recorded/iptables_*): unbound_buffer.cc:129 is
# waitSend's throw, :78 waitRecv's.
GLOO_SEND_TIMEOUT = "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 30000ms for send operation to complete"


def _wait(rank: int, wait: str, t: float = 30.1) -> dict:
    if wait == "closure":
        return dict(source="pytorch", kind="collective_timeout", severity="error", rank=rank, host=HOST[rank], t=t, line=20,
                    file=f"logs/rank{rank}.log", message="Application timeout caused pair closure",
                    attrs={"transport": "gloo", "wait": "pair closed on timeout"})
    return dict(_timeout(rank, t), message=GLOO_SEND_TIMEOUT if wait == "send" else GLOO_TIMEOUT,
                attrs={"transport": "gloo", "wait": wait, "timeout_ms": 30000})


def _fr(rank: int, seq: int, op: str = "gloo:all_reduce", t: float = 0.1) -> dict:
    return dict(source="flight_recorder", kind="collective", severity="info", rank=rank, host=HOST[rank], t=t, line=seq,
                file=f"fr/nccl_trace_rank_{rank}", message=f"{op} seq {seq}",
                attrs={"pg": "0", "pg_desc": "default_pg", "pg_id": 0, "seq": seq, "op": op, "record_id": seq,
                       "state": "scheduled", "input_sizes": [[919296]], "input_dtypes": ["Float"]})


def _mutual(waits: str, ops: tuple[str, ...] = ("gloo:all_reduce",) * 4, fr: bool = True):
    ev = [*[_progress(r, 0.0) for r in range(4)], *[_wait(r, w) for r, w in enumerate(waits.split())]]
    if fr:
        ev += [_fr(r, s, "gloo:all_reduce", t=-0.3 + s / 100) for r in range(4) for s in (31, 32)]
        ev += [_fr(r, 33, ops[r]) for r in range(4)]
    (f,) = silent_ranks(make_events(*ev), 4)
    assert (f.rule_id, f.cause, f.weight) == ("mutual-timeout", "fabric_timeout", MUTUAL_WEIGHT)  # a suspect, not a finding
    # a rank (and its node) only with the link the waits name: its receiving end
    assert ("link between" in f.title) == bool(f.ranks) and f.hosts == tuple(HOST[r] for r in f.ranks), f.title
    return f


def test_a_send_timeout_beside_its_receivers_recv_timeout_names_the_link_and_its_receiving_end():
    # rank 1 sends to rank 0 in the ring; it timed out on that send, rank 0 on that receive
    f = _mutual("recv send recv recv")
    assert "on the link between rank 0 (n1) and rank 1 (n1); the receiving end, rank 0 (n1), is the suspect" in f.title
    assert (f.ranks, f.hosts) == ((0,), ("n1",))
    assert "rank 0 is a suspect, not a finding (rank 1 next)" in f.explanation
    assert f.actions[0].startswith("Start with rank 0's network path, then rank 1's")
    # where the suspect stopped first (its last calm line, here its dump's last collective: the first
    # failure), then the link's two ends
    assert (f.evidence[0].rank, f.evidence[0].kind, f.first_time) == (0, "collective", f.evidence[0].time)
    assert f.evidence[0].time < f.evidence[1].time
    assert {f.evidence[1].rank, f.evidence[2].rank} == {0, 1}


def test_the_suspects_first_failure_is_a_line_before_the_waits_gave_up():
    # the applog source's info-level copy of the rank's own 'rank 0 failed: ... Timed out' record, stamped
    # with the timeout, is no calm line (held-out round 8: iptables_rank2_w3_nodebug_srun, rank3_info_srun)
    echo = dict(source="applog", kind="log_error", severity="info", rank=0, host="n1", t=30.1, line=56, file="slurm-1.out",
                message="[n1] train - rank 0 failed: RuntimeError: " + GLOO_TIMEOUT)
    ev = [*[_progress(r, 0.0) for r in range(4)], *[_wait(r, w) for r, w in enumerate("recv send recv recv".split())], echo]
    ev += [_fr(r, s, t=-0.3 + s / 100) for r in range(4) for s in (31, 32)] + [_fr(r, 33) for r in range(4)]
    (f,) = silent_ranks(make_events(*ev), 4)
    assert f.ranks == (0,) and f.evidence[0].line != 56 and f.first_time == f.evidence[0].time < f.evidence[1].time


def test_the_receiving_end_is_named_wherever_the_link_lies():
    assert _mutual("recv recv recv send").ranks == (2,)  # rank 3 sends to rank 2 (iptables_rank2_info_srun: rank 2 cut)
    f = _mutual("send recv recv recv")  # rank 0 (n1) sends to rank 3 (n2), across the nodes
    assert (f.ranks, f.hosts) == ((3,), ("n2",))
    assert _mutual("recv recv send recv").ranks == (1,)  # rank 2 (n2) sends to rank 1 (n1)
    assert _mutual("recv recv recv recv").ranks == ()  # no link, no suspect


def test_the_suspects_node_comes_from_the_ranks_lines_not_only_the_timeouts():
    # torchrun's summary lines carry no node: the ranks' own logging headers ([rank 0/4] [n1]) say where they ran
    ev = [*[_progress(r, 0.0) for r in range(4)], *[dict(_wait(r, w), host=None) for r, w in enumerate("recv send recv recv".split())],
          *[_fr(r, s, t=-0.3 + s / 100) for r in range(4) for s in (31, 32)], *[_fr(r, 33) for r in range(4)]]
    (f,) = silent_ranks(make_events(*ev), 4)
    assert (f.rule_id, f.hosts, f.ranks) == ("mutual-timeout", ("n1",), (0,))
    # a suspect whose node no line says: the rank, no node
    ev0 = [dict(e, host=None) if e["rank"] == 0 else e for e in ev]
    (g,) = silent_ranks(make_events(*ev0), 4)
    assert (g.rule_id, g.hosts, g.ranks) == ("mutual-timeout", (), (0,)) and "link between rank 0 and rank 1 (n1)" in g.title


def test_the_ring_closes_from_rank_zero_to_the_last_rank():
    f = _mutual("send recv recv recv")  # rank 0 sends to rank 3
    assert "on the link between rank 3 (n2) and rank 0 (n1)" in f.title


def test_no_link_without_a_send_beside_a_recv_or_with_two_of_them():
    for waits in ("recv recv recv recv", "send send send send", "send recv send recv"):
        assert "link between" not in _mutual(waits).title, waits
    # rank 2's send waited on rank 1, itself stuck on a send: that says nothing; ranks 1 and 0 still do
    assert "on the link between rank 0 (n1) and rank 1 (n1)" in _mutual("recv send send recv").title


def test_no_link_unless_the_dumps_show_one_all_reduce_everywhere():
    assert "link between" not in _mutual("recv send recv recv", fr=False).title  # not known to be a ring allreduce
    # gloo's allgather ring runs the other way (recv from rank-1): the same texts would point elsewhere
    assert "link between" not in _mutual("recv send recv recv", ops=("gloo:all_gather",) * 4).title
    # one rank in a later collective than the others: not the same ring
    ev = [*[_progress(r, 0.0) for r in range(4)], *[_wait(r, w) for r, w in enumerate("recv send recv recv".split())],
          *[_fr(r, 33) for r in range(4)], _fr(2, 34, t=0.2)]
    fs = silent_ranks(make_events(*ev), 4)
    assert all("link between" not in f.title for f in fs)


def test_no_link_when_the_logs_hold_only_part_of_the_job():
    # 4 ranks seen of 8: rank 1's send still goes to rank 0, but the ring's ends are not known to be 0 and 3
    ev = [*[_progress(r, 0.0) for r in range(4)], *[_wait(r, w) for r, w in enumerate("recv send recv recv".split())],
          *[_fr(r, 33) for r in range(4)]]
    (f,) = silent_ranks(make_events(*ev), 8)
    assert f.rule_id == "mutual-timeout" and "link between" not in f.title
    assert "link between" in silent_ranks(make_events(*ev), 4)[0].title  # the same events, the whole job


def test_no_link_when_a_second_operation_timed_out_in_a_rank():
    # "Application timeout caused pair closure": another op was in flight (DDP buckets); its waits may be these
    assert "link between" not in _mutual("recv send recv closure").title


# The recordings (real torch 2.13 gloo runs, one rank's TCP ports dropped by iptables mid-run) as
# goldens: the link the waits show, and that it always holds the cut rank. None where the texts
# show no send beside its receiver's recv (rank3_nodebug_srun) or a second op timed out (rank1_torchrun).
RECORDED_LINKS = {
    "iptables_rank0_nodebug_srun": (0, 1), "iptables_rank0_torchrun": (3, 0), "iptables_rank1_info_srun": (1, 2),
    "iptables_rank1_torchrun": None, "iptables_rank2_nodebug_torchrun": (2, 3), "iptables_rank3_ddp_torchrun": (3, 0),
    "iptables_rank3_nodebug_srun": None,
}


def test_the_recorded_iptables_runs_name_the_broken_link_and_its_receiving_end():
    import json
    import re
    from pathlib import Path

    from crashscope.evaluation import load_cases, analyze_case

    cases = {c.id: c for c in load_cases(Path(__file__).parents[1] / "fixtures" / "recorded", "recorded")}
    for rid, want in RECORDED_LINKS.items():
        rep = analyze_case(cases[rid])
        cut = json.loads((cases[rid].path / "truth.json").read_text())["culprit"]["ranks"][0]
        m = re.search(r"on the link between rank (\d+) \(n\d\) and rank (\d+) \(n\d\)", rep["summary"])
        got = (int(m.group(1)), int(m.group(2))) if m else None
        assert got == want, (rid, rep["summary"])
        assert got is None or cut in got, rid  # the cut rank is one end of the link the waits name
        assert rep["cause"] == "fabric_timeout" and rep["confidence"] < 0.8, rid
        # the receiving end (and its node) is the suspect; iptables_rank0_torchrun's cut fell inside the
        # all_reduce after rank 0 had its segment, so there the sending end was the cut one
        assert rep["implicated"]["ranks"] == ([got[0]] if got else []), (rid, rep["implicated"])
        assert rep["implicated"]["nodes"] == ([HOST[got[0]]] if got else []), (rid, rep["implicated"])
        assert (got is None) or (got[0] == cut) == (rid != "iptables_rank0_torchrun"), rid


# A rank alone on its node is named by the arrival order when it began to be last part-way
# (cpu_starve_mild_rank2_w3_srun: 3 ranks, rank 2 alone on n2, CPU-throttled after iteration 10;
# last at 4 of the 26 collectives before, 58 of the 63 after), not when it leans as much from the start.
def _arrivals(last_of: list[int], hosts: dict[int, str]):  # type: ignore[no-untyped-def]
    rows, line = [], 1
    for seq, last in enumerate(last_of):
        for r in [x for x in sorted(hosts) if x != last] + [last]:
            rows.append(dict(kind="collective_enter", source="pytorch", severity="info", rank=r, host=hosts[r], file="slurm-98.out",
                             line=line, t=seq * 0.3, attrs={"seq": seq, "op": "ALLREDUCE", "shape": "1024", "pg_rank": r},
                             message=f"[Rank {r}] Running collective: CollectiveFingerPrint(SequenceNumber={seq}, OpType=ALLREDUCE, ...)"))
            line += 1
    return make_events(*rows)


def test_a_rank_alone_on_its_node_that_slowed_part_way_is_the_straggler():
    from crashscope.analyses.stragglers import stragglers

    hosts = {0: "n1", 1: "n1", 2: "n2"}
    before = [i % 3 for i in range(36)]  # each rank last in turn: 12 of 36
    after = [1 if i % 10 == 0 else 2 for i in range(54)]  # then rank 2 last at 48 of 54
    (f,) = [f for f in stragglers(_arrivals(before + after, hosts), 3) if f.rule_id == "straggler-arrival-order"]
    assert (f.ranks, f.hosts, f.cause) == ((2,), ("n2",), "gpu_throttle")
    assert "60 of 90 collectives (67%" in f.title and "node-mate" not in f.title
    # the same lean over the whole run (last at 2 of every 3): its node's output path could do that
    even = [2 if i % 3 else i % 2 for i in range(90)]
    assert [f for f in stragglers(_arrivals(even, hosts), 3) if f.rule_id == "straggler-arrival-order"] == []


def test_a_checkpoint_save_ended_by_a_sigkill_is_no_storage_evidence():
    # nodekill_n1_ckpt_info_torchrun: n1's processes SIGKILLed 3 s into rank 0's save, before any rank
    # reported an error; a save hung on storage leaves its rank alive until the peers time out (ckpt_fifo_*)
    from crashscope.analyses.checkpoint_io import saves_cut_by_kill
    from crashscope.engine.model import Finding

    def f(rule: str, cause: str, ranks: tuple[int, ...], title: str, role: str = "cause") -> Finding:
        return Finding(rule_id=rule, title=title, cause=cause, role=role, status="stable", weight=0.6, first_time=1, count=1,
                       hosts=("n1",), ranks=ranks, gpus=(), evidence=(), explanation="", actions=())

    save = f("pytorch-checkpoint-save-unfinished", "storage_stall", (0,), "Checkpoint save started but never finished on a rank")
    still = f("checkpoint-io", "storage_stall", (0,), "Checkpoint save of step 15 on rank 0 was still running when the job ended",
              role="context")
    slow = f("checkpoint-io", "storage_stall", (0,), "Slow checkpoint save (step 10): 40.0 s, 20x the job's median save", role="context")
    killed = f("first-killed", "node_failure", (0, 1), "The processes on n1 were the first to die, killed by SIGKILL")
    assert saves_cut_by_kill([save, still, slow, killed]) == {id(save), id(still)}  # a save that finished is not cut
    assert saves_cut_by_kill([save, still]) == set()  # no kill: the hung save is the storage's
    other = f("first-killed", "node_failure", (2, 3), "The processes on n2 were the first to die, killed by SIGKILL")
    assert saves_cut_by_kill([save, other]) == set()  # the kill was elsewhere


def test_a_completed_run_whose_steps_slowed_is_none_but_not_a_sure_thing():
    # Without DETAIL nothing names the slow rank of a synchronous job (every rank prints one pace), but a
    # completed run whose own pace fell 1.6x part-way is what one slow rank makes (the recorded mild CPU
    # starvations slowed 1.7-2.4x; the clean completed runs 1.0-1.4x): "none", below the sure line
    from crashscope.timeline import Timeline
    from crashscope.verdict import decide

    def run(slow_from: int | None) -> Timeline:
        rows: list[dict] = [dict(source="sacct", kind="job_state", severity="info", message="State=COMPLETED", attrs={"state": "COMPLETED"})]
        for r in range(4):
            t = 0.0
            for step in range(1, 41):
                t += 0.8 if slow_from is not None and step >= slow_from else 0.5 + 0.01 * (step % 3)
                rows.append(dict(source="applog", kind="train_step", severity="info", rank=r, host=HOST[r], file=f"logs/rank{r}.log",
                                 line=step, t=t, message=f"step {step} loss 0.62", attrs={"step": step}))
        return Timeline(make_events(*rows), None, ["n1", "n2"], 4, list(range(4)), {}, [], [])

    v = decide([], run(slow_from=12))
    assert (v.cause, v.confidence) == ("none", 0.6) and "Its steps slowed 1.6x part-way" in v.summary
    steady = decide([], run(slow_from=None))
    assert (steady.cause, steady.confidence) == ("none", 0.95) and "slowed" not in steady.summary


def test_progress_lines_that_number_no_step_are_read_in_their_order():
    # HF Trainer's PrinterCallback prints {'loss': ..., 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...}, one
    # dict per logging interval and no step number (cpu_starve_q2_rank3_info_torchrun: 0.5 s, then 2.6 s a line)
    def rows(numbered: bool) -> list[dict]:
        out, t = [], 0.0
        for i in range(1, 41):
            t += 2.6 if i >= 12 else 0.5
            attrs = {"framework": "hf_trainer", "loss": 0.64, "epoch": round(i / 40, 2), "seen": i}
            if numbered:
                attrs["step"] = i
            out.append(dict(source="applog", kind="train_step", severity="info", rank=0, host="n1", file="logs/rank0.log",
                            line=i, t=t, message="{'loss': 0.64, 'grad_norm': 0.037, 'learning_rate': 0.0001}", attrs=attrs))
        return out

    (f,) = [f for f in throughput_collapse(make_events(*rows(numbered=False)), 4) if f.rule_id == "throughput-collapse"]
    assert f.cause == "gpu_throttle" and "from progress line 12 (its steps are not numbered) on" in f.title
    assert "time between progress lines 500 ms -> 2600 ms" in f.title
    (g,) = [f for f in throughput_collapse(make_events(*rows(numbered=True)), 4) if f.rule_id == "throughput-collapse"]
    assert "from step 12 on" in g.title
    # one numbered series in the job: the unnumbered lines are not given places that could mix with its steps
    mixed = rows(numbered=True)[:3] + [dict(r, file="slurm-1.out", rank=None) for r in rows(numbered=False)]
    assert all("progress line" not in f.title for f in throughput_collapse(make_events(*mixed), 4))


def test_a_step_the_controller_ended_before_any_task_died_was_cancelled_from_outside():
    # fixtures/recorded/scancel_step_w3_srun's slurm-89.out: banner, srun's abort, then the kills
    banner = dict(source="slurm", kind="job_cancel", severity="error", host="n1", t=10.0, line=296, file="slurm-89.out",
                  message="slurmstepd-n1: error: *** STEP 89.0 ON n1 CANCELLED AT 2026-12-01T23:05:21 ***",
                  attrs={"entity": "step", "id": "89.0", "job_id": "89", "step": "0", "node": "n1", "reason": "CANCELLED"})
    abort = dict(source="slurm", kind="job_step", severity="warning", host=None, t=10.0, line=297, file="slurm-89.out",
                 message="srun: Job step aborted: Waiting up to 12 seconds for job step to finish.", attrs={"action": "abort_wait", "seconds": 12})
    killed = dict(source="slurm", kind="process_exit", severity="error", host="n2", t=10.0, line=298, file="slurm-89.out",
                  message="srun: error: n2: task 2: Killed", attrs={"hosts": ["n2"], "tasks": [2], "signal": "SIGKILL"})
    prog = [_progress(r, 0.0) for r in range(3)]
    ev = make_events(*prog, banner, abort, killed)
    (f,) = step_cancelled(ev, 3)
    assert (f.rule_id, f.cause, f.role, f.evidence[0].line) == ("step-cancelled", "preemption", "cause", 296)
    assert first_killed(ev, 3) == []  # the kill was the cancel's, not the node's
    # srun's own end of the step after a task died (nodekill_n2_srun): the exit line comes first
    after = make_events(*prog, dict(killed, line=394), dict(banner, line=396))
    assert step_cancelled(after, 3) == [] and len(first_killed(after, 3)) == 1
    # a banner that says why is its own rule's; a banner alone in a paste says no order
    assert step_cancelled(make_events(*prog, dict(banner, attrs={**banner["attrs"], "reason": "TIME LIMIT"}), abort, killed), 3) == []
    assert step_cancelled(make_events(*prog, banner), 3) == []


def _undated(row: dict) -> dict:
    # per-task output of a script that prints no stamps (benchmarks/lab/train_other.py under srun)
    out = {k: v for k, v in row.items() if k != "t"}
    return dict(out, time=None, time_quality=None)


def test_several_silent_ranks_with_no_time_are_all_suspects():
    # Ranks 1 and 3 (one on each node) said nothing while 0 and 2 timed out, and no line has a
    # time: which of the two stopped first cannot be read, so both are named (before: rank 1
    # alone, for its lower number).
    ev = make_events(*[_undated(_progress(r, 0.0, line=10)) for r in range(4)],
                     *[_undated(_timeout(r, 0.0)) for r in (0, 2)])
    (f,) = silent_ranks(ev, 4)
    assert f.ranks == (1, 3) and f.hosts == ("n1", "n2")
    assert f.weight == RANK_WEIGHT < 0.8
    assert "which of them stopped first is not known" in f.title


def test_with_times_only_the_rank_that_stopped_first_is_the_suspect():
    ev = make_events(_progress(0, 0.0), _progress(1, 0.5), _progress(2, 0.01), _progress(3, 0.02),
                     *[_timeout(r, 30.2) for r in (0, 2)])
    (f,) = silent_ranks(ev, 4)
    assert f.ranks == (3,)


def _closed(rank: int, t: float) -> dict:
    return dict(source="pytorch", kind="network_error", severity="error", rank=rank, host=HOST[rank], t=t, line=30,
                file=f"logs/rank{rank}.log", message="[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:9143",
                attrs={"transport": "gloo", "status": "closed", "role": "peer"})


def test_a_silent_rank_whose_last_words_end_its_training_ran_out_of_work():
    # uneven_exit_rank2_nodebug_srun: rank 2's shard ran out, it logged the end and exited 0;
    # its peers, one step further on, lost their connections to it
    done = dict(_progress(2, 0.5, line=11), kind="activity", message="last time-stamped line of rank 2: [n2] train - training finished after 12 iterations")
    ev = make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], done, *[_closed(r, 0.7) for r in (0, 1, 3)])
    (f,) = silent_ranks(ev, 4)
    assert (f.cause, f.ranks, f.hosts) == ("software_error", (2,), ("n2",))
    assert "training finished after 12 iterations" in f.title and "different amounts of work" in f.title


def test_a_silent_rank_whose_last_line_is_a_step_is_still_the_node():
    # the same losses after an ordinary progress line (a rank stopped or killed): node_failure
    ev = make_events(*[_progress(r, 0.0 + r / 100) for r in range(4)], *[_closed(r, 0.7) for r in (0, 1, 3)])
    (f,) = silent_ranks(ev, 4)
    assert (f.cause, f.ranks) == ("node_failure", (2,))


@pytest.mark.parametrize("line, ended", [
    ("training finished after 12 iterations", True),
    ("Training completed. Do not forget to share your model on huggingface.co/models =)", True),  # HF Trainer
    ("[after training is done] datetime: 2026-12-03 07:02:08", True),  # Megatron print_datetime
    ("`Trainer.fit` stopped: `max_epochs=3` reached.", True),  # Lightning
    ("Training epoch 3 finished", False),  # the end of an epoch or a step is progress
    ("training step 1200 done in 0.3s", False),
    ("Finished epoch 3", False),
    ("train loop iteration 5 completed", False),
])
def test_what_counts_as_a_rank_saying_its_training_ended(line: str, ended: bool) -> None:
    assert bool(TRAINING_ENDED.search(line)) is ended


def test_a_collectives_group_is_read_from_its_call_line():
    from crashscope.analyses.collectives import _default_group
    assert _default_group("dist.all_gather(parts, lt)", "all_gather")
    assert _default_group("torch.distributed.all_reduce(x, op=dist.ReduceOp.MAX)", "all_reduce")
    assert _default_group("dist.barrier()", "barrier")
    assert _default_group("work = dist.all_reduce(t[0], async_op=True)", "all_reduce")
    assert not _default_group("dist.all_reduce(p.grad, group=dp_group)", "all_reduce")  # round 15's dp x tp mesh
    assert not _default_group("dist.all_reduce(t, ReduceOp.SUM, pg)", "all_reduce")  # the group by its place
    assert not _default_group("dist.barrier(tp_group)", "barrier")
    assert not _default_group("dist.all_reduce(*args)", "all_reduce")
    assert not _default_group("dist.all_reduce(", "all_reduce")  # a call continued on the next line
    assert not _default_group(None, "all_reduce")


def _tb_wait(i: int, op: str, call: str, rank: int | None = None, wait: str = "recv") -> list[dict]:
    text = f"[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 45000ms for {wait} operation to complete"
    common = dict(source="pytorch", severity="error", rank=rank, t=45.0 + i / 100, line=12 + 14 * i, file="cnn-hydra-6.err")
    return [dict(common, kind="exception", message=f"RuntimeError: {text}",
                 attrs={"type": "RuntimeError", "text": text, "c10d_op": op, "c10d_call": call,
                        "frames_top": f"/site-packages/torch/distributed/distributed_c10d.py:3252 in {op}"}),
            dict(common, kind="collective_timeout", message=text, attrs={"transport": "gloo", "wait": wait, "timeout_ms": 45000})]


def test_every_rank_waiting_in_different_collectives_of_the_default_group_is_a_desync():
    from crashscope.analyses.collectives import traceback_op_mismatch
    # collmismatch_rank2_third_torchrun (round 14): four unlabelled tracebacks in torchrun's merged stderr
    waits = [*_tb_wait(0, "all_reduce", "dist.all_reduce(lt)"), *_tb_wait(1, "all_reduce", "dist.all_reduce(lt)"),
             *_tb_wait(2, "all_gather", "dist.all_gather(parts, lt)", wait="send"), *_tb_wait(3, "all_reduce", "dist.all_reduce(lt)", wait="send")]
    (f,) = traceback_op_mismatch(make_events(*waits), 4)
    assert (f.cause, f.weight, f.ranks, f.hosts) == ("software_error", 0.5, (), ())
    assert "odd one out is all_gather" in f.title and f.evidence[0].line == 12 + 14 * 2
    # with the ranks' prefixes the odd one is named
    ranked = [dict(w, rank=i // 2, host=HOST[i // 2]) for i, w in enumerate(waits)]
    (g,) = traceback_op_mismatch(make_events(*ranked), 4)
    assert (g.ranks, g.hosts) == ((2,), ("n2",))
    # three of four waiting (a stopped rank leaves its peers wherever they were), or sub-groups: nothing
    assert traceback_op_mismatch(make_events(*waits[:6]), 4) == []
    mesh = [*_tb_wait(0, "all_reduce", "dist.all_reduce(p.grad, group=dp_group)"), *_tb_wait(1, "all_gather", "dist.all_gather(full, part, group=tp_group)"),
            *_tb_wait(2, "all_reduce", "dist.all_reduce(p.grad, group=dp_group)"), *_tb_wait(3, "all_reduce", "dist.all_reduce(lt)")]
    assert traceback_op_mismatch(make_events(*mesh), 4) == []
    same = [w for i in range(4) for w in _tb_wait(i, "all_reduce", "dist.all_reduce(lt)")]
    assert traceback_op_mismatch(make_events(*same), 4) == []


def test_an_unstamped_rank_tag_and_host_field_is_the_ranks_identity():
    import json

    from crashscope.testing import parse_text
    text = "[rank 2] hostname=n2 local_rank=0 dp_rank=1 tp_rank=0\n[rank 2] step 5 done\nrank=3 host=gpu12 pid=77\nhostname=n1 only\n"
    ev, _ = parse_text("applog", text, "slurm-2.out")
    ids = ev.filter(ev["kind"] == "identity")
    assert list(zip(ids["rank"].to_list(), [json.loads(a)["host"] for a in ids["attrs"].to_list()])) == [(2, "n2"), (3, "gpu12")]
