"""Cross-rank analyses (crashscope/analyses/): who stopped first, the first task killed,
a throughput collapse. Events are built in code; the texts are those real runs wrote
(fixtures/recorded/, torch 2.13 gloo under Slurm 22.05)."""

from __future__ import annotations

from crashscope.analyses.progress import throughput_collapse
from crashscope.analyses.silence import NAMED_WEIGHT, NODE_WEIGHT, RANK_WEIGHT, first_killed, silent_ranks
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
