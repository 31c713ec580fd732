"""Key facts of the applog line source (see tests/golden/applog for whole files)."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from crashscope.sources import get_source
from crashscope.sources.applog import FIRST_STEPS, MAX_OUTLIERS, STRIDE_CAP
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

UTC_OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)


def _rows(text, **kw):
    kw.setdefault("options", UTC_OPTS)
    df, warnings = parse_text("applog", text, **kw)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def _kind(rows, kind):
    return [r for r in rows if r["kind"] == kind]


# -- progress formats ------------------------------------------------------------------------

def test_megatron_iteration_with_microsecond_stamp():
    line = (" [2026-09-17 04:10:02.123456] iteration      101/    1000 | consumed samples:        12928 |"
            " elapsed time per iteration (ms): 19138.8 | throughput per GPU (TFLOP/s/GPU): 80.2 |"
            " learning rate: 1.500000E-04 | global batch size:   128 | lm loss: 6.501234E+00 | loss scale: 1.0 |\n")
    rows, _ = _rows(line)
    (s,) = _kind(rows, "train_step")
    assert s["attrs"]["step"] == 101 and s["attrs"]["total"] == 1000 and s["attrs"]["step_ms"] == 19138.8
    assert s["attrs"]["throughput"] == 80.2 and s["attrs"]["loss"] == pytest.approx(6.501234)
    assert s["attrs"]["framework"] == "megatron"
    assert s["time"].isoformat() == "2026-09-17T04:10:02.123456+00:00"


def test_deepspeed_step_timers_and_rank_prefix_merge_into_one_step():
    text = (
        "[2026-09-17 04:01:01,100] [INFO] [logging.py:128:log_dist] [Rank 0] step=10, skipped=2, lr=[5.9999e-05], mom=[(0.9, 0.95)]\n"
        "[Rank 0] time (ms) | fwd: 120.50 | bwd: 300.25 | bwd_inner: 290.00 | bwd_allreduce: 10.25 | step: 20.00\n"
    )
    rows, _ = _rows(text)
    (s,) = _kind(rows, "train_step")
    assert s["rank"] == 0
    assert s["attrs"] == {**s["attrs"], "step": 10, "skipped": 2, "lr": 5.9999e-05, "step_ms": 440.75, "framework": "deepspeed"}


def test_deepspeed_pipeline_and_throughput_timer():
    rows, _ = _rows(
        "steps: 100 loss: 2.3456 iter time (s): 0.812 samples/sec: 157.635\n"
        "epoch=0/micro_step=800/global_step=200, RunningAvgSamplesPerSec=54.21, CurrSamplesPerSec=55.03, MemAllocated=3.1GB, MaxMemAllocated=9.8GB\n"
    )
    a, b = (r["attrs"] for r in _kind(rows, "train_step"))
    assert (a["step"], a["loss"], a["step_ms"], a["throughput"]) == (100, 2.3456, 812.0, 157.635)
    assert (b["step"], b["throughput"], b["throughput_unit"]) == (200, 55.03, "samples/s")


def test_torchtitan_step_with_colours():
    e = "\x1b"
    line = (f"[titan] 2026-09-17 04:03:02,111 - root - INFO - {e}[31mstep:  7  {e}[32mloss:  7.90000  "
            f"{e}[38;2;180;60;0mgrad_norm:  1.2000  {e}[38;2;54;234;195mmemory: 30.20GiB(38.20%)  {e}[34mtps: 12,345  "
            f"{e}[36mtflops: 56.78  {e}[35mmfu: 5.67%{e}[39m\n")
    rows, _ = _rows(line)
    (s,) = _kind(rows, "train_step")
    a = s["attrs"]
    assert (a["step"], a["loss"], a["grad_norm"], a["memory_gib"], a["throughput"], a["mfu"]) == (7, 7.9, 1.2, 30.2, 12345.0, 5.67)


def test_torchtitan_2024_wps_line():
    rows, _ = _rows("[titan] 2024-04-10 10:00:00,000 - root - INFO - step:  2  loss: 10.5000  memory: 20.00GiB(25.00%)  wps: 1,024  mfu: 3.10%\n")
    assert _kind(rows, "train_step")[0]["attrs"]["throughput"] == 1024.0


def test_lightning_bar_and_nemo_bar():
    rows, _ = _rows(
        "Epoch 3:  45%|████▌     | 450/1000 [01:02<01:16,  7.20it/s, v_num=0, train_loss=2.310]\n"
        "Epoch 0:  12%|█▏        | 120/1000 [01:40<12:10, reduced_train_loss=3.210, global_step=119.0,"
        " consumed_samples=30720.0, train_step_timing in s=0.812]\n"
        "Validation DataLoader 0:  50%|█████     | 5/10 [00:01<00:01,  4.00it/s]\n"
    )
    li, ne = (r["attrs"] for r in _kind(rows, "train_step"))
    assert (li["framework"], li["epoch"], li["step"], li["loss"], li["step_ms"]) == ("lightning", 3, 450, 2.31, 138.889)
    assert (ne["framework"], ne["step"], ne["batch"], ne["step_ms"], ne["consumed_samples"]) == ("nemo", 119, 120, 812.0, 30720)


def test_nemo_progress_printer():
    rows, _ = _rows("Training epoch 0, iteration 9/999 | lr: 0.0003 | global_batch_size: 256 | global_step: 9 |"
                    " reduced_train_loss: 10.86 | train_step_timing in s: 1.234 | consumed_samples: 2560\n")
    a = _kind(rows, "train_step")[0]["attrs"]
    assert (a["framework"], a["step"], a["loss"], a["step_ms"], a["lr"]) == ("nemo", 9, 10.86, 1234.0, 0.0003)


def test_hf_trainer_dict_joins_the_bar_step():
    text = "\r 49%|████▉     | 490/1000 [00:49<00:51,  9.90it/s]\r 50%|█████     | 500/1000 [00:50<00:50, 10.00it/s]\r{'loss': 2.3104, 'grad_norm': 1.0421, 'learning_rate': 4.5e-05, 'epoch': 0.5}\n"
    rows, _ = _rows(text)
    steps = _kind(rows, "train_step")
    assert [s["attrs"]["step"] for s in steps] == [490, 500]
    assert steps[1]["attrs"]["framework"] == "hf_trainer" and steps[1]["attrs"]["loss"] == 2.3104
    assert steps[1]["attrs"]["lr"] == 4.5e-05 and steps[1]["attrs"]["step_ms"] == 100.0


def test_hf_train_summary_is_not_a_step():
    rows, _ = _rows("{'train_runtime': 1234.5, 'train_samples_per_second': 51.8, 'train_steps_per_second': 0.81, 'train_loss': 2.1, 'epoch': 1.0}\n")
    assert _kind(rows, "train_step") == []


@pytest.mark.parametrize("line,step,total,loss", [
    ("step 120 loss 2.31", 120, None, 2.31),
    ("Step 120/1000", 120, 1000, None),
    ("iter 120 | loss 2.31 | dt 0.5 s", 120, None, 2.31),
    ("2026-09-17 04:05:01,100 - train - INFO - Iteration 7/50, loss=0.125, time=812.5ms", 7, 50, 0.125),
])
def test_plain_progress(line, step, total, loss):
    (s,) = _kind(_rows(line + "\n")[0], "train_step")
    assert (s["attrs"]["step"], s["attrs"].get("total"), s["attrs"].get("loss")) == (step, total, loss)


@pytest.mark.parametrize("line", ["step 3 of the recipe: stir", "Restarting from iteration 12", "the iter 5 thing"])
def test_plain_words_are_not_progress(line):
    assert _kind(_rows(line + "\n")[0], "train_step") == []


# -- bounding ------------------------------------------------------------------------------

def test_fifty_thousand_steps_are_bounded_and_keep_outliers_and_last():
    slow = {12_345, 30_001, 49_000}
    lines = []
    for i in range(1, 50_001):
        ms = 9000.0 if i in slow else 800.0 + (i % 7)
        lines.append(f"step {i}/50000 loss {2 + 1 / i:.4f} time {ms:.1f}ms")
    rows, _ = _rows("\n".join(lines) + "\n")
    steps = _kind(rows, "train_step")
    assert len(steps) <= FIRST_STEPS + STRIDE_CAP + MAX_OUTLIERS + 1 <= 300
    got = {s["attrs"]["step"]: s["attrs"]["sample"] for s in steps}
    assert all(got.get(i) == "outlier" for i in slow)
    assert got[50_000] in ("last", "stride")
    assert [got[i] for i in range(1, FIRST_STEPS + 1)] == ["first"] * FIRST_STEPS
    strided = sorted(s for s, why in got.items() if why == "stride")
    gaps = {b - a for a, b in zip(strided, strided[1:])}
    assert len(gaps) == 1 and len(strided) > STRIDE_CAP // 2  # evenly spaced, and not sparse
    assert max(s["attrs"]["seen"] for s in steps) == 50_000


def test_bounding_is_per_rank():
    lines = [f"{r}: step {i} loss 1.0" for i in range(1, 2001) for r in range(3)]
    rows, _ = _rows("\n".join(lines) + "\n")
    steps = _kind(rows, "train_step")
    by_rank = {r: [s for s in steps if s["attrs"]["srun_task"] == r] for r in range(3)}
    assert all(0 < len(v) <= 300 for v in by_rank.values())
    assert all(max(s["attrs"]["step"] for s in v) == 2000 for v in by_rank.values())


# -- checkpoints ------------------------------------------------------------------------------

def test_megatron_save_pairs_and_unfinished_save():
    rows, _ = _rows(
        "[2026-09-17 04:00:20.100000] saving checkpoint at iteration      10 to /lustre/ckpt/gpt in torch_dist format\n"
        "  [2026-09-17 04:00:31.900000] successfully saved checkpoint from iteration      10 to /lustre/ckpt/gpt [ t 0/8, p 0/4 ]\n"
        "saving checkpoint at iteration      20 to /lustre/ckpt/gpt in torch_dist format\n"
        " iteration       21/    1000 | consumed samples:  2688 | elapsed time per iteration (ms): 815.0 |\n"
    )
    ck = _kind(rows, "checkpoint")
    assert [(c["attrs"]["phase"], c["attrs"]["iteration"]) for c in ck] == [("start", 10), ("end", 10), ("start", 20)]
    assert ck[0]["attrs"]["format"] == "torch_dist" and ck[1]["attrs"]["path"] == "/lustre/ckpt/gpt"
    # an async Megatron save may still hang after training went on: no implied end
    assert not any(c["attrs"].get("implied") for c in ck)


def test_save_without_end_line_is_implied_done_by_the_next_step():
    rows, _ = _rows(
        "09/17/2026 04:02:52 - INFO - transformers.trainer - Saving model checkpoint to /out/checkpoint-500\n"
        " 50%|█████     | 501/1000 [00:50<00:50, 10.00it/s]\n"
        "09/17/2026 04:03:30 - INFO - transformers.trainer - Saving model checkpoint to /out/checkpoint-1000\n"
    )
    ck = _kind(rows, "checkpoint")
    assert [(c["attrs"]["phase"], c["attrs"]["step"], c["attrs"].get("implied")) for c in ck] == [
        ("start", 500, None), ("end", 500, True), ("start", 1000, None)]


def test_save_without_end_line_is_implied_done_by_the_end_of_training():
    # litgpt saves its final checkpoint and goes on to print the training time; completed_third_srun:
    # the last save (step 40), then "Training complete: 40 steps"
    rows, _ = _rows(
        "[2026-12-03 11:14:26,469][__main__][INFO] - Epoch 2/2 | Step 40/40 | loss=2.2943 | lr=1.00e-03 | 0.24s/it\n"
        "[2026-12-03 11:14:26,469][__main__][INFO] - Saving checkpoint to checkpoints/epoch=1-step=40.ckpt\n"
        "[2026-12-03 11:14:26,484][__main__][INFO] - Epoch 2/2 done | train_loss=2.3033 | 4.7s\n"
        "[2026-12-03 11:14:26,484][__main__][INFO] - Training complete: 40 steps\n"
    )
    ck = _kind(rows, "checkpoint")
    assert [(c["attrs"]["phase"], c["attrs"].get("implied"), c["line"]) for c in ck] == [("start", None, 2), ("end", True, 4)]
    assert ck[1]["attrs"]["evidence"] == "end of training at line 4"
    # an epoch's end is not the end of training
    rows, _ = _rows("Saving checkpoint to 'out/step-00000020/lit_model.pth'\nEpoch 2 done | train_loss=2.30\n")
    assert [c["attrs"]["phase"] for c in _kind(rows, "checkpoint")] == ["start"]


def test_deepspeed_ready_line_without_rank_closes_rank_zeros_save():
    rows, _ = _rows(
        "[2026-09-17 04:01:22,001] [INFO] [logging.py:128:log_dist] [Rank 0] [Torch] Checkpoint global_step50 is about to be saved!\n"
        "[2026-09-17 04:01:25,900] [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint global_step50 is ready now!\n"
    )
    start, end = _kind(rows, "checkpoint")
    assert (start["rank"], end["rank"]) == (0, 0)
    assert end["attrs"]["phase"] == "end" and end["attrs"]["tag"] == "global_step50" and end["attrs"]["step"] == 50


@pytest.mark.parametrize("line,phase,fw", [
    ("[titan] 2026-09-17 04:03:06,500 - root - INFO - Staging the checkpoint.", "start", "torchtitan"),
    ("[titan] 2026-09-17 04:03:10,710 - root - INFO - Finished staging the checkpoint in 4.21 seconds.", "end", "torchtitan"),
    ("[titan] 2025-03-01 10:00:00,000 - root - INFO - Finished saving the checkpoint (or staging if async is enabled) in 2.00 seconds.", "end", "torchtitan"),
    ("[titan] 2026-09-17 04:03:10,710 - root - INFO - Last step checkpoint completed in 3.50s", "end", "torchtitan"),
    ("Epoch 2, global step 3000: 'val_loss' reached 1.23400 (best 1.23400), saving model to '/ckpt/e=2.ckpt' as top 3", "start", "lightning"),
    ("Saving latest checkpoint...", "start", "lightning"),
    ("[NeMo I 2026-09-17 04:04:09 model_checkpoint:657] Async checkpoint save for step 6 (/r/c.ckpt) finalized successfully.", "end", "nemo"),
    ("Model checkpoint of size 4.66 GiB saved to /mnt/out/epoch_0/ft-model-00003-of-00030.safetensors", "end", "torchtune"),
    ("0: INFO:torchtune.utils.logging:Model checkpoint of size 4.97 GB saved to /fsx/tuned/hf_model_0024_0.pt", "end", "torchtune"),
    ("INFO:torchtune.utils._logging:Adapter checkpoint of size 0.01 GB saved to /tmp/out/adapter_0.pt", "end", "torchtune"),
    ("Epoch 3 | Training snapshot saved at snapshot.pt", "end", "ddp_tutorial"),
    ("Saving checkpoint to 'out/pretrain/step-00001000/lit_model.pth'", "start", "litgpt"),
    ("[2026-09-17 04:05:13,337][__main__][INFO] - Saving checkpoint to checkpoints/epoch=0-step=20.ckpt", "start",
     "litgpt"),
])
def test_checkpoint_lines(line, phase, fw):
    (c,) = _kind(_rows(line + "\n")[0], "checkpoint")
    assert (c["attrs"]["phase"], c["attrs"]["framework"]) == (phase, fw)


# -- identity ------------------------------------------------------------------------------

@pytest.mark.parametrize("line,rank,local_rank", [
    ("[rank5]:2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0", 5, None),
    ("[default3]:2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0", None, 3),
    ("12: 2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0", None, None),  # srun -l: a task, attrs.srun_task
    ("[1,7]<stdout>:2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0", 7, None),
    ("2026-09-17 04:05:01,100 - train - INFO - rank=9 step 1 loss 2.0", 9, None),
    ("2026-09-17 04:05:01,100 - train - INFO - [RANK 4] step 1 loss 2.0", 4, None),
    ("2026-09-17 04:05:01,100 - train - INFO - global_rank: 6 | step 1 loss 2.0", 6, None),
    ("[2026-09-17 04:01:01,100] [INFO] [logging.py:128:log_dist] [Rank 2] step=10, skipped=0, lr=[0.1], mom=[0.9]", 2, None),
])
def test_identity_from_prefixes_and_fields(line, rank, local_rank):
    (s,) = _kind(_rows(line + "\n")[0], "train_step")
    assert (s["rank"], s["local_rank"]) == (rank, local_rank)


def test_srun_task_is_kept_as_the_task_not_a_rank():
    # srun -l's label is SLURM_PROCID: a rank under plain srun, a node's agent under torchrun;
    # the source keeps it on every event of the line and the timeline decides
    rows, _ = _rows("12: 2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0\n"
                    " 3: [default1]:2026-09-17 04:05:02,100 - train - INFO - step 1 loss 2.0\n")
    steps = _kind(rows, "train_step")
    assert [(s["rank"], s["local_rank"], s["attrs"]["srun_task"]) for s in steps] == [(None, None, 12), (None, 1, 3)]
    acts = _kind(rows, "activity")
    assert sorted(a["attrs"]["srun_task"] for a in acts) == [3, 12]


@pytest.mark.parametrize("line,rank", [
    # the identity field before the level, or before the stamp itself (custom logging formats)
    ("[2026-09-17 04:05:01,100][rank3][INFO] {'loss': 0.6395, 'grad_norm': 0.0368, 'learning_rate': 0.0001, 'epoch': 0.1}", 3),
    ("[rank 3] 2026-09-17 04:05:01,100 INFO {'loss': 0.6395, 'grad_norm': 0.0368, 'learning_rate': 0.0001, 'epoch': 0.1}", 3),
    ("[2026-09-17 04:05:01,100][INFO][rank3] {'loss': 0.6395, 'grad_norm': 0.0368, 'learning_rate': 0.0001, 'epoch': 0.1}", 3),
])
def test_identity_field_before_the_level_or_the_stamp(line, rank):
    (s,) = _kind(_rows(line + "\n")[0], "train_step")
    assert s["rank"] == rank and s["time"] is not None and s["attrs"]["loss"] == 0.6395


def test_srun_task_with_torchrun_prefix_is_the_node_not_the_rank():
    rows, _ = _rows("1: [default3]:2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0\n")
    (act,) = _kind(rows, "activity")
    assert (act["rank"], act["local_rank"], act["attrs"]["srun_task"]) == (None, 3, 1)


def test_lightning_global_rank_line_names_the_file():
    rows, _ = _rows("Initializing distributed: GLOBAL_RANK: 5, MEMBER: 6/8\n"
                    "2026-09-17 04:05:01,100 - train - INFO - step 1 loss 2.0\n")
    assert {r["rank"] for r in rows} == {5}


def test_identity_from_file_name_through_the_ingest(tmp_path: Path):
    from crashscope.ingest import ingest

    d = tmp_path / "node002"
    d.mkdir()
    (d / "log_rank_3.txt").write_text("".join(
        f"2026-09-17 04:05:{i:02d},000 - train - INFO - step {i} loss 2.0\n" for i in range(1, 6)))
    res = ingest(tmp_path, UTC_OPTS)
    ev = res.events.filter(res.events["source"] == "applog")
    assert set(ev["rank"].to_list()) == {3} and set(ev["host"].to_list()) == {"node002"}
    (rec,) = res.files
    assert rec.kind == "applog"


# -- activity, times, errors -----------------------------------------------------------------

def test_activity_is_the_last_stamped_line_per_rank():
    rows, _ = _rows(
        "[rank0]:2026-09-17 04:05:01,000 - t - INFO - step 1 loss 2.0\n"
        "[rank1]:2026-09-17 04:05:01,500 - t - INFO - step 1 loss 2.0\n"
        "[rank0]:2026-09-17 04:05:09,000 - t - INFO - waiting for data\n"
        "[rank0]:step 2 loss 1.9\n"
    )
    act = {a["rank"]: a for a in _kind(rows, "activity")}
    assert act[0]["line"] == 3 and act[0]["time"].isoformat() == "2026-09-17T04:05:09+00:00"
    assert act[0]["attrs"]["last_message"] == "waiting for data" and act[0]["attrs"]["last_step"] == 2
    assert act[0]["attrs"]["first_time"] == "2026-09-17T04:05:01.000000000Z" and act[0]["attrs"]["lines"] == 3
    assert act[1]["line"] == 2


@pytest.mark.parametrize("line,iso", [
    ("09/17/2026 04:02:00 - INFO - __main__ - hello", "2026-09-17T04:02:00+00:00"),
    ("2026-09-17T04:05:11.250+02:00 INFO hello", "2026-09-17T02:05:11.250000+00:00"),
    ("[NeMo W 2026-09-17 04:04:10 nemo_logging:405] hello", "2026-09-17T04:04:10+00:00"),
    ("I0917 04:31:44.718000 90211 torch/distributed/run.py:1] hello", "2026-09-17T04:31:44+00:00"),
    ("2026-09-17 04:05:13.337 | INFO     | __main__:train:88 - hello", "2026-09-17T04:05:13.337000+00:00"),
    ("[2026-09-17 04:05:13,337][__main__][INFO] - hello", "2026-09-17T04:05:13.337000+00:00"),  # Hydra
])
def test_stamp_shapes(line, iso):
    (a,) = _kind(_rows(line + "\n")[0], "activity")
    assert a["time"].isoformat() == iso and a["attrs"]["last_message"] == "hello"


def test_local_stamps_are_estimated_without_a_known_zone():
    (a,) = _kind(_rows("2026-09-17 04:05:01,000 - t - INFO - hi\n", options=ParseOptions(year=2026))[0], "activity")
    assert a["time_quality"] == "estimated"


def test_errors_are_reported_once_per_shape_and_not_when_another_source_reads_the_line():
    text = "".join(f"2026-09-17 04:05:{i:02d},000 - t - ERROR - shard {i} unreadable\n" for i in range(10))
    text += "2026-09-17 04:06:00,000 - t - ERROR - NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error, NCCL version 2.21.5\n"
    text += "2026-09-17 04:06:01,000 - t - WARNING - just a warning\n"
    rows, _ = _rows(text)
    errs = [e for e in _kind(rows, "log_error") if not e["attrs"].get("anchor")]
    assert len(errs) == 3 and all(e["severity"] == "error" and e["attrs"]["logger"] == "t" for e in errs)
    # the line another source reads is kept only as an info time anchor for the lines after it
    (anchor,) = [e for e in _kind(rows, "log_error") if e["attrs"].get("anchor")]
    assert anchor["severity"] == "info" and anchor["time"].isoformat() == "2026-09-17T04:06:00+00:00"


def test_a_silence_leaves_the_line_before_it():
    text = "2026-09-17 04:05:00,000 - t - INFO - step 1 loss 2.0\n2026-09-17 04:05:01,000 - t - INFO - step 2 loss 1.9\n"
    text += "2026-09-17 04:06:30,000 - t - ERROR - gave up waiting\n"
    rows, _ = _rows(text)
    gaps = [a for a in _kind(rows, "activity") if "gap_s" in a["attrs"]]
    assert len(gaps) == 1 and gaps[0]["line"] == 2 and gaps[0]["attrs"]["gap_s"] == 89.0


@pytest.mark.parametrize("line, framework", [
    ("# Out of bounds values : 0 OK", "nccl-tests"),
    ("`Trainer.fit` stopped: `max_epochs=3` reached.", "lightning"),
    ("{'train_runtime': 5.8012, 'train_samples_per_second': 1.207, 'train_loss': 2.12, 'epoch': 1.0}", "hf_trainer"),
    ("[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.", "torchelastic"),
    # torch/distributed/elastic/agent/server/api.py _exit_barrier(), torch 1.9 (state name) and 2.x (enum repr)
    ("INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (SUCCEEDED). Waiting 300 seconds for other agents to finish", "torchelastic"),
    ("[2024-03-12 08:22:56,574] torch.distributed.elastic.agent.server.api: [INFO] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to finish", "torchelastic"),
    # torch/distributed/elastic/events: the worker status record
    ('{"name": "torchelastic.worker.status.SUCCEEDED", "source": "WORKER", "timestamp": 0, "metadata": {"run_id": "none", "global_rank": 0, "state": "SUCCEEDED", "raw_error": null}}', "torchelastic"),
])
def test_run_end_lines(line, framework):
    rows, _ = _rows(line + "\n")
    (end,) = _kind(rows, "run_end")
    assert end["attrs"] == {"outcome": "success", "framework": framework}


def test_a_failed_validation_is_not_a_run_end():
    rows, _ = _rows("# Out of bounds values : 3 FAILED\n")
    assert not _kind(rows, "run_end")


@pytest.mark.parametrize("line", [
    "INFO:torch.distributed.elastic.agent.server.api:Local worker group finished (FAILED). Waiting 300 seconds for other agents to finish",
    '{"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "timestamp": 0, "metadata": {"state": "FAILED"}}',
])
def test_a_failed_worker_group_is_not_a_run_end(line):
    rows, _ = _rows(line + "\n")
    assert not _kind(rows, "run_end")


def test_nccl_stamped_lines_are_not_selected():
    src = get_source("applog")
    import regex

    rx = regex.compile(src.prefilter)
    assert not rx.search("[2026-09-14 08:00:02.187000] node012:880:905 [1] NCCL INFO Channel 01/0 : 9[1] -> 10[2] via P2P")
    assert rx.search("[2026-09-14 08:00:02,187] [INFO] [engine.py:1:f] hi")


def test_sniff_claims_training_logs_not_nccl_or_pytorch_files():
    from crashscope.sources import sniff_scores

    train = "".join(f"2026-09-17 04:05:{i:02d},000 - train - INFO - step {i} loss 2.0\n" for i in range(40))
    top_score, top = sniff_scores(train, "rank3.log")[0]
    assert top.name == "applog" and top_score >= 0.7
    nccl = "".join(f"node001:1234:1234 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n" for i in range(40))
    assert sniff_scores(nccl + train[:200], "x.log")[0][1].name == "nccl"
    c10 = ("[rank3]:[E0917 04:21:41.160918398 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout\n" + train[:300])
    assert sniff_scores(c10, "x.log")[0][1].name == "pytorch"
    assert get_source("applog").sniff("hello\nworld\n", "x.txt") == 0


def test_rank_of_world_field_after_the_level_is_the_lines_rank():
    # logging.Formatter(f"%(asctime)s - %(levelname)s - [rank {RANK}/{WORLD}] [{NODE}] %(name)s - %(message)s")
    text = ("2026-12-01 12:11:17,426 - INFO - [rank 1/4] [n1] train - step 12 loss 0.6268 time 310.2 ms\n"
            "2026-12-01 12:11:17,430 - INFO - [Rank 3/4] train - step 12 loss 0.6268 time 311.0 ms\n")
    rows = [r for r in _rows(text)[0] if r["kind"] == "train_step"]
    assert [r["rank"] for r in rows] == [1, 3]
    assert rows[0]["message"].startswith("[n1] train - step 12")


def test_an_error_line_with_a_catalog_anchor_but_no_catalog_text_stays_an_error():
    # ' not responding' anchors the catalog's Slurm 'Nodes X not responding' text; this line is not it
    rows, _ = _rows("2026-09-17 04:05:01,100 - train - ERROR - metrics server not responding, retrying in 5 s\n")
    (err,) = _kind(rows, "log_error")
    assert err["severity"] == "error" and not err["attrs"].get("anchor")
    # a line the catalog does read stays the catalog's (an info anchor here, for the time)
    rows, _ = _rows("2026-09-17 04:05:01,100 - train - ERROR - RuntimeError: CUDA error: an illegal memory access was encountered\n")
    (err,) = _kind(rows, "log_error")
    assert err["attrs"].get("anchor") is True


def test_the_header_reader_sees_an_identity_field_before_the_stamp():
    # what the pytorch source asks for a record's continuation lines (gloo's 'Original exception:')
    from crashscope.sources.applog import HeaderReader
    from crashscope.sources.base import FileInfo, ParseContext

    reader = HeaderReader(ParseContext(FileInfo(path="logs/rank3.log", name="rank3.log"), "pytorch", UTC_OPTS))
    starts, rank, t, _ = reader.read("[rank 3] 2026-09-17 04:05:01,100 ERROR rank 3 failed: RuntimeError: boom")
    assert starts and rank == 3 and t is not None
    assert reader.read("[2026-09-17 04:05:01,100][rank3][ERROR] failed")[:2] == (True, 3)
    assert reader.read("  File \"train.py\", line 3, in <module>")[0] is False


def test_ddp_tutorial_epoch_lines_and_snapshots():
    # pytorch/examples distributed/ddp-tutorial-series/multinode.py, and a copy that prints the rank and loss
    rows, _ = _rows(
        "[GPU2] Epoch 4 | Batchsize: 32 | Steps: 64\n"
        "1: [RANK 5] Epoch 0 | Batchsize: 32 | Steps: 235 | Loss: 0.261846293271222\n"
        "0: Epoch 0 | Training snapshot saved at ./snapshot.ptEpoch 0 | Training snapshot saved at ./snapshot.pt\n"
    )
    a, b = _kind(rows, "train_step")
    assert a["attrs"]["framework"] == "ddp_tutorial" and (a["attrs"]["epoch"], a["attrs"]["steps_per_epoch"]) == (4, 64)
    assert b["rank"] == 5 and b["attrs"]["loss"] == 0.261846293271222 and "step" not in b["attrs"]
    (c,) = _kind(rows, "checkpoint")
    assert c["attrs"]["path"] == "./snapshot.pt" and c["attrs"]["epoch"] == 0
    assert _kind(_rows("Epoch 0 | Batchsize of the loader is 32\n")[0], "train_step") == []


def test_hydra_job_logging_header_gives_level_logger_and_message():
    # hydra/conf/hydra/job_logging/default.yaml: '[%(asctime)s][%(name)s][%(levelname)s] - %(message)s'
    rows, _ = _rows("[2026-09-17 04:05:13,337][__main__][INFO] - Epoch 1/3 | Step 20/60 | loss=2.2991\n"
                    "[2026-09-17 04:05:14,000][hydra.core.utils][ERROR] - Error executing job with overrides: []\n")
    (s,) = _kind(rows, "train_step")
    assert s["attrs"]["step"] == 20 and s["message"].startswith("Epoch 1/3 | Step 20/60")
    (e,) = [r for r in rows if r["severity"] == "error"]
    assert e["message"] == "Error executing job with overrides: []"
