"""analyses/progress.py: the job's throughput collapse, and a rank that was slow before it got stuck."""

from __future__ import annotations

import polars as pl

from crashscope.analyses.progress import slow_then_stuck, throughput_collapse
from tests.factories import make_event


def _steps(ranks: int, n: int, last_gap_s: float, period_s: float = 0.3) -> list[pl.DataFrame]:
    """HF Trainer dicts (no step number) in each rank's own log, the last one after a long gap."""
    out = []
    for r in range(ranks):
        t = 100.0
        for i in range(n):
            t += last_gap_s if i == n - 1 else period_s
            out.append(make_event(kind="train_step", source="applog", host=f"n{r // 2 + 1}", rank=r, t=t,
                                  file=f"logs/rank{r}.log", line=5 + i, severity="info",
                                  message=f"- [rank {r}/{ranks}] [n{r // 2 + 1}] train - {{'loss': 0.63, 'epoch': {i / 60:.2f}}}",
                                  attrs={"framework": "hf_trainer", "loss": 0.63, "seen": i + 1}))
    return out


def _barrier(t: float, lagging: list[int]) -> pl.DataFrame:
    return make_event(kind="desync_report", source="pytorch", host="n1", rank=0, t=t, file="slurm-41.out", line=500,
                      message=f"[Rank 0]: Ranks {','.join(map(str, lagging))} failed to pass monitoredBarrier in 30000 ms",
                      attrs={"lagging_ranks": lagging, "via": "monitoredBarrier", "timeout_ms": 30000}, severity="error")


def test_a_last_step_longer_than_the_timeout_that_completed_names_a_slow_rank() -> None:
    ev = pl.concat([*_steps(4, 13, last_gap_s=112.0), _barrier(100 + 12 * 0.3 + 112 + 30, [1])])
    [f] = slow_then_stuck(ev, 4)
    assert f.cause == "gpu_throttle" and f.ranks == (1,) and f.hosts == ("n1",)
    start = f.evidence[0]
    assert start.rank == 1 and start.file == "logs/rank1.log" and start.line == 5 + 11  # the last step at the old speed
    assert f.first_time == start.time
    assert "112 s" in f.title and "30 s timeout" in f.title
    assert any(x.rule_id == "slow-then-stuck" for x in throughput_collapse(ev, 4))


def test_a_rank_that_stopped_at_full_speed_is_not_a_straggler() -> None:
    """SIGSTOP / a dead node: the steps never slowed, the peers timed out a timeout later."""
    ev = pl.concat([*_steps(4, 13, last_gap_s=0.3), _barrier(100 + 13 * 0.3 + 30, [1])])
    assert slow_then_stuck(ev, 4) == []


def test_a_long_step_shorter_than_the_timeout_or_holding_a_checkpoint_says_nothing() -> None:
    short = pl.concat([*_steps(4, 13, last_gap_s=20.0), _barrier(100 + 12 * 0.3 + 20 + 30, [1])])
    assert slow_then_stuck(short, 4) == []
    ckpt = make_event(kind="checkpoint", source="applog", host="n1", rank=0, t=100 + 12 * 0.3 + 5, file="logs/rank0.log", line=40,
                      message="saving checkpoint at iteration 12 to ckpt in torch format", attrs={"phase": "start", "iteration": 12})
    saved = pl.concat([*_steps(4, 13, last_gap_s=112.0), ckpt, _barrier(100 + 12 * 0.3 + 112 + 30, [1])])
    assert slow_then_stuck(saved, 4) == []


def test_no_single_named_rank_no_finding() -> None:
    for lagging in ([], [1, 2]):
        ev = pl.concat([*_steps(4, 13, last_gap_s=112.0), _barrier(100 + 12 * 0.3 + 112 + 30, lagging)])
        assert slow_then_stuck(ev, 4) == []
