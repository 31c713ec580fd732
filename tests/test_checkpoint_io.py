"""Checkpoint and data I/O timing (crashscope/analyses/checkpoint_io.py) over real trainer
line formats as the applog source reads them: Megatron-LM's save_checkpoint() lines
(megatron/training/checkpointing.py: "saving checkpoint at iteration {it:7d} to {dir} in
{fmt} format" / "successfully saved checkpoint from iteration {it:7d} to {dir} [ t 1/1, p 1/1 ]"),
and the kernel's NFS line ("nfs: server fs01 not responding, still trying")."""

from __future__ import annotations

import json

import polars as pl

from crashscope.analyses import checkpoint_io
from crashscope.testing import parse_text


def _megatron(rank: int, saves: list[tuple[int, str, str | None]]) -> pl.DataFrame:
    lines = []
    for it, start, end in saves:
        lines.append(f"[2026-09-17 {start}] saving checkpoint at iteration {it:7d} to /lustre/ckpt in torch_dist format")
        if end is not None:
            lines.append(f"  [2026-09-17 {end}] successfully saved checkpoint from iteration {it:7d} to /lustre/ckpt [ t 1/1, p 1/1 ]")
            lines.append(f"[2026-09-17 {end}] iteration {it + 1:8d}/    1000 | consumed samples:        12928 | elapsed time per iteration (ms): 410.2 | lm loss: 2.3E+00 |")
    df, w = parse_text("applog", "\n".join(lines) + "\n", f"rank{rank}.log", rank_hint=rank)
    assert not w
    return df.with_columns(pl.lit(f"node{rank // 2 + 1:03d}").alias("host"))


def _kernel(text: str, host: str) -> pl.DataFrame:
    df, _ = parse_text("kernel", text, f"{host}/dmesg.log", host_hint=host)
    return df


def test_every_save_has_its_start_end_and_duration_per_rank() -> None:
    ev = pl.concat([_megatron(r, [(100, "04:10:03", "04:10:15"), (200, "04:20:03", "04:20:14")]) for r in range(4)])
    done, still = checkpoint_io.saves(ev)
    assert not still
    assert sorted((s["rank"], s["step"], s["duration_s"]) for s in done) == sorted(
        [(r, 100, 12.0) for r in range(4)] + [(r, 200, 11.0) for r in range(4)])
    s = checkpoint_io.summary(ev)
    assert s["saves"] == 8 and s["median_s"] == 11.5 and s["max_s"] == 12.0 and s["outliers"] == [] and s["in_progress"] == []
    assert checkpoint_io.checkpoint_io(ev, 4) == []


def test_one_rank_much_slower_is_named_with_the_nfs_lines_around_it() -> None:
    ranks = [_megatron(r, [(100, "04:10:03", "04:10:15")]) for r in range(3)]
    ranks.append(_megatron(3, [(100, "04:10:03", "04:12:33")]))  # 150 s vs 12 s
    nfs = _kernel("2026-09-17T04:10:40+00:00 node002 kernel: nfs: server fs01 not responding, still trying\n", "node002")
    ev = pl.concat([*ranks, nfs], how="diagonal_relaxed")
    found = checkpoint_io.checkpoint_io(ev, 4)
    assert len(found) == 1
    f = found[0]
    assert f.role == "context" and f.cause == "storage_stall" and f.ranks == (3,)
    assert "150.0 s on rank 3" in f.title and "12.0 s" in f.title
    assert any(e.kind == "storage_error" and "not responding" in e.message for e in f.evidence)


def test_a_save_ten_times_the_job_median_is_an_outlier() -> None:
    saves = [(i * 100, f"04:{10 + i:02d}:00", f"04:{10 + i:02d}:05") for i in range(1, 6)]  # 5 s each
    saves.append((600, "05:00:00", "05:02:00"))  # 120 s: 24x the median
    found = checkpoint_io.checkpoint_io(_megatron(0, saves), 1)
    assert [f.title.split(":")[0] for f in found] == ["Slow checkpoint save (step 600)"]
    assert "24x the job's median" in found[0].title


def test_the_save_still_running_when_the_job_died() -> None:
    ev = pl.concat([_megatron(0, [(100, "04:10:03", "04:10:15"), (200, "04:20:03", None)]),
                    _megatron(1, [(100, "04:10:03", "04:10:15")])])
    # the job's last line, 40 s after the second save began
    tail, _ = parse_text("applog", "[2026-09-17 04:20:43] iteration      201/    1000 | lm loss: 2.3E+00 |\n", "rank1.log", rank_hint=1)
    ev = pl.concat([ev, tail.with_columns(pl.lit("node001").alias("host"))])
    s = checkpoint_io.summary(ev)
    assert [(x["rank"], x["step"], x["running_s"]) for x in s["in_progress"]] == [(0, 200, 40.0)]
    titles = [f.title for f in checkpoint_io.checkpoint_io(ev, 2)]
    assert titles == ["Checkpoint save of step 200 on rank 0 was still running when the job ended (40 s after it began)"]


def test_data_loader_wait_where_the_trainer_logs_it() -> None:
    # mmengine LoggerHook: "Iter(train) [  10/1000]  lr: 1.0000e-04  eta: ...  time: 0.4301  data_time: 0.0105  memory: 1234  loss: 2.3"
    ev = pl.DataFrame({"kind": ["train_step"] * 3, "time": [None] * 3, "rank": [0, 0, 1], "file": ["a", "a", "b"], "line": [1, 2, 3],
                       "message": ["Iter(train) [  10/1000]  lr: 1.0000e-04  time: 0.4301  data_time: 0.0105  loss: 2.3",
                                   "Iter(train) [  20/1000]  lr: 1.0000e-04  time: 0.4301  data_time: 0.0205  loss: 2.3",
                                   "Iter(train) [  20/1000]  lr: 1.0000e-04  time: 3.1000  data_time: 2.7000  loss: 2.3"]},
                      schema_overrides={"time": pl.Datetime("ns", "UTC")})
    dw = checkpoint_io.data_wait(ev)
    assert dw == {"median_s": 0.0205, "max_s": 2.7, "samples": 3, "max_at": {"file": "b", "line": 3, "rank": 1}}
    assert json.dumps(dw)
