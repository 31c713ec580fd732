"""Application logs: every rank's own output (per-rank logs, ``srun -l`` job stdout, torchrun/mpirun output).

The training script's lines carry what the launcher and library logs do not: progress (which
step each rank reached and how long steps took), checkpoint saves, and when each rank last
said anything. Sample lines, each in the exact format its framework prints (source next to
each regex below)::

    [2026-09-17 04:10:02,123] [INFO] [logging.py:107:log_dist] [Rank 0] step=100, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]
     [2026-09-17 04:10:02.123456] iteration      100/    1000 | consumed samples:        12800 | elapsed time per iteration (ms): 812.3 | ...
    [titan] 2026-09-17 04:10:02,123 - root - INFO - step: 10  loss:  7.9000  grad_norm:  1.2000  memory: 30.20GiB(38.20%)  tps: 1,234  tflops: 56.78  mfu: 5.67%
    Epoch 0:  45%|████▌     | 450/1000 [01:02<01:16, 7.20it/s, loss=2.31, v_num=0]
    {'loss': 2.31, 'grad_norm': 1.04, 'learning_rate': 4.5e-05, 'epoch': 0.45}
    [NeMo I 2026-09-17 04:10:02 model_checkpoint:632] Scheduled async checkpoint save for /ckpt/step=100.ckpt
    09/17/2026 04:10:02 - INFO - transformers.trainer - Saving model checkpoint to /out/checkpoint-500
    3: [default3]:2026-09-17 04:10:02,123 - train - INFO - step 120 loss 2.31

Identity, first match wins: ``[rankN]:`` (global rank), mpirun ``--tag-output``
``[jobid,N]<stdout>:``, DeepSpeed ``[Rank N]`` / ``[rank N/W]`` (also right after the level:
``... - INFO - [rank 1/4] name - msg``) / a leading ``rank=N``, ``RANK N``,
``global_rank N`` field, Lightning's ``Initializing distributed: GLOBAL_RANK: N`` (learned for the
rest of an unprefixed file when it is the only rank such a line names), else the file name
(``rank3.log``) via ``FileInfo``. An ``srun -l`` task id is SLURM_PROCID, not a rank: it is kept
as ``srun_task`` on every event of the line, and the timeline makes it the rank when srun
started one task per rank, the node when a task is a node's launcher (torchrun).

Kinds and attrs:

* train_step: step, total, step_ms, throughput, throughput_unit, loss, lr, epoch, framework
  (megatron | nemo | deepspeed | lightning | hf_trainer | torchtitan | tqdm | ddp_tutorial | plain), sample
  (first | stride | outlier | last), seen (progress lines of this file and rank so far), plus
  framework extras (grad_norm, skipped, tflops, mfu, memory_gib, batch, consumed_samples).
  **Bounded** per (file, rank): the first ``FIRST_STEPS`` steps; then one every ``stride``
  steps, the stride doubling whenever more than ``STRIDE_CAP`` would be kept (so a 36k-step
  log keeps <= ``STRIDE_CAP`` evenly spaced samples); every step whose ``step_ms`` is at least
  ``OUTLIER_FACTOR`` x the median of the previous ``OUTLIER_WINDOW`` step times (at most
  ``MAX_OUTLIERS``); and always the last step. At most ~300 rows per file and rank.
* checkpoint: phase (start | end), framework, iteration (or step), path, tag, format,
  duration_s. A save whose framework prints no end line (HF Trainer, Lightning ModelCheckpoint,
  DeepSpeed >= 0.17) gets an end with ``implied: true`` at the next progress line of the same
  rank (training went on, so the save returned); Megatron-LM, torchtitan and NeMo async saves
  print their own end and never get an implied one (an async save may still hang after
  training resumed).
* identity: host. A line that leads with the rank's tag and then a host field, stamped or not
  (``[rank 2] hostname=n2 local_rank=0 dp_rank=1``, ``rank=3 host=gpu12``): the rank says where it
  runs; the timeline places it there when the host is a node of the job's NodeList.
* activity: one per (file, rank) at its LAST time-stamped line: first_time, last_time, lines
  (lines of this rank that reached this source), stamped (of them time-stamped), last_message
  (excerpt), last_step, steps (progress lines seen), framework. The timeline reads "who fell
  silent first" from these.
* log_error: a logging line at ERROR / CRITICAL / FATAL level that no other line source
  selects (tracebacks, NCCL and c10 lines are theirs): level, logger; at most
  ``MAX_ERRORS_PER_SIGNATURE`` per message shape and ``MAX_ERRORS`` per file.

Times: ISO stamps without a zone, ``MM/DD/YYYY`` (HF examples) and Megatron's bracketed local
wall time are local (``estimated`` unless the zone is known); glog/c10 ``I0917 04:21:41`` are
year-less; only the seconds of a c10 stamp are used (its fraction is CLOCK_MONOTONIC).
"""

from __future__ import annotations

import bisect
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

import regex

from crashscope.patterns import compile_pattern
from crashscope.schema import Kind, Severity, TimeQuality
from crashscope.sources.base import LineSource, ParseContext, feed_guarded, iso_to_ns, lazy_compile, split_prefix

# -- bounding of train_step rows (documented in the module docstring) ------------------------
FIRST_STEPS = 5
STRIDE_CAP = 240
OUTLIER_FACTOR = 2.5
OUTLIER_WINDOW = 50
OUTLIER_MIN_WINDOW = 5
MAX_OUTLIERS = 50
MERGE_LINES = 8  # lines of one step printed by separate calls (DeepSpeed step=/timers) are one step
MAX_ERRORS = 200
MAX_ERRORS_PER_SIGNATURE = 3
EXCERPT = 240
GAP_NS = 10 * 1_000_000_000  # a rank quiet this long between stamped lines left a mark
MAX_RUN_ENDS = 64  # per file
MAX_GAPS = 20  # per (file, rank): the first ones; a bounded record, never one row per line

# -- prefilter ------------------------------------------------------------------------------
# Time stamps are looked for in the first 64 characters only (launcher prefixes, a "[titan] "
# or "[NeMo I " tag, a bracket): anchored, so a line without a digit pair there fails fast.
# NCCL >= 2.26 stamps its lines too ("[2026-09-14 08:00:02] host:pid:tid [1] NCCL INFO ..."): the
# token after a stamp must not be NCCL's "host:pid:tid " (Rust regex has no look-ahead, so the
# alternatives below spell "not that"); those lines are NCCL's, and the INFO chatter among them
# is dropped before any prefilter runs.
_NOT_NCCL_TOKEN = (
    r"(?:[^\s:]*(?:\s|$)|[^\s:]*:[^\d]|[^\s:]*:\d+(?:[^\d:]|$)|[^\s:]*:\d+:(?:[^\d]|$)|[^\s:]*:\d+:\d+[^\d\s])"
)
# Launcher prefixes a stamp may follow, spelled out (a free ".{0,64}?" costs 4x more on chatter):
# srun -l "12: ", torchrun "[default3]:", "[rank3]:", mpirun "[1,3]<stdout>:", "[titan] ", "[NeMo I ", "[".
_STAMP_PREFIX = r"^(?:\s*\d{1,7}: )?(?:\[[\w,]+\](?:<\w+>)?: ?)*(?:\[titan\] |\[NeMo [DIWEC] |\s*\[)?"
# A run that says it finished: the success signals of the trainers and benchmarks (nccl-tests
# src/common.cu "# Out of bounds values : %d %s"; Lightning fit_loop "`Trainer.fit` stopped:
# `max_epochs=N` reached."; HF Trainer's final metrics dict and "Training completed."; torch
# elastic agent "worker group successfully finished", and in _exit_barrier() (torch 1.9 ... 2.x,
# torch/distributed/elastic/agent/server/api.py) "Local worker group finished (%s). Waiting %s
# seconds for other agents to finish" with the state SUCCEEDED (FAILED is no success), and its
# events/api.py record name f"torchelastic.worker.status.{state}"; Megatron
# print_datetime("after training is done"); ms-swift's SwiftPipeline.main() (swift/llm/base.py)
# logger.info(f'End time of running main: {datetime.now()...}') once self.run() has returned).
_RUN_END = (
    ("nccl-tests", lazy_compile(r"#\s*Out of bounds values\s*:\s*0 OK")),
    ("lightning", lazy_compile(r"`Trainer\.fit` stopped: `(?:max_epochs|max_steps|max_time)=[^`]*` reached")),
    ("hf_trainer", lazy_compile(r"^\{'train_runtime': [\d.]+,|Training completed\. Do not forget to share your model")),
    ("torchelastic", lazy_compile(r"worker group successfully finished|Local worker group finished \((?:WorkerState\.)?SUCCEEDED\)|\"name\": \"torchelastic\.worker\.status\.SUCCEEDED\"")),
    ("megatron", lazy_compile(r"\[after training is done\]")),
    ("ms-swift", lazy_compile(r"End time of running main: \d{4}-\d\d-\d\d")),
)

# the rank tags _MSG_RANK reads, for the prefilter (Rust and Python syntax alike)
_RANK_TAG = r"(?:[Gg]lobal[_ ]?[Rr]ank|GLOBAL_RANK|[Rr]ank|RANK)(?:\s*[=:]?\s*\d{1,7}(?:\s*/\s*\d{1,7})?)"

# JSON-lines logging: one JSON object a record, its time in a field (python-json-logger's "asctime" /
# "timestamp" (nhairs/python-json-logger pythonjsonlogger/core.py), structlog's TimeStamper "timestamp"
# (structlog/processors.py), loguru's serialize=True record.time (loguru/_handler.py _serialize_record),
# logstash "@timestamp", zap/slog style "ts"/"time"), ISO text or epoch seconds.
_JSON_TIME_KEYS = ("ts", "timestamp", "time", "@timestamp", "asctime", "datetime", "created")
_JSON_PREFILTER = (
    r'^(?:\s*\d{1,7}: )?\{"(?:[^\n]{0,400}?[,{] ?")?(?:ts|time|timestamp|@timestamp|asctime|datetime|created)": ?'
    r'(?:"\d{4}-\d\d-\d\d[T ]\d\d:\d\d|\d{10}(?:\.\d+)?[,}]|\{)'
)
_PREFILTER_PARTS = (
    r"Out of bounds values",
    r"`Trainer\.fit` stopped: ",
    r"Training completed\. ",
    r"worker group successfully finished",
    r"Local worker group finished \(",
    r"torchelastic\.worker\.status\.SUCCEEDED",
    r"\[after training is done\]",
    r"End time of running main: ",
    _STAMP_PREFIX + r"(?:"
    # ISO / python logging asctime / Megatron / loguru
    r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d[.,\d]*(?:Z|[+-]\d\d:?\d\d)?\]?(?:$|[^\s\].,\d]|\s+" + _NOT_NCCL_TOKEN + ")"
    r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d"  # HF examples datefmt="%m/%d/%Y %H:%M:%S"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d"  # glog / c10 (year-less)
    r")",
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^\s:]+:",  # logging.basicConfig() default
    r"elapsed time per iteration",
    r"iteration \d+/\d+ \|",
    r"skipped=\d+, lr=",
    r"SamplesPerSec=",
    r"samples/sec: ",
    r"time \(ms\) \| ",
    r"step: *\d+ ",
    r"\{'(?:loss|train_runtime|eval_loss)': ",
    r"/(?:\d+|\?) \[\d+:\d\d",  # tqdm "450/1000 [01:02"
    r"(?:[Ss]tep|STEP|[Ii]ter|ITER)\w* *[:=#]? *\d",
    r"(?:Epoch|Iter)(?:\((?:train|val|test)\))? *\[ *\d",  # mmengine / mmcv
    r"[Ss]aving (?:latest |model |a (?:full|model only) )?checkpoint",
    r"[Ss]aved (?:local )?checkpoint",
    r"[Ss]taging the checkpoint",
    r"is about to be saved!",
    r"is ready now!",
    r"saving model to ",
    r"checkpoint completed in",
    r"[Aa]sync checkpoint save",
    r"checkpoint of size ",
    r"Training snapshot saved at ",
    r"Epoch \d+ \| Batchsize: \d+",
    r"GLOBAL_RANK: \d",
    # An unstamped line that leads with the rank's tag and then a host field ("[rank 2] hostname=n2
    # local_rank=0", "rank=3 host=gpu12 ..."): where the rank runs (Kind.IDENTITY)
    r"^(?:\s*\d{1,7}: )?(?:\[[\w,]+\](?:<\w+>)?: ?)*\[?" + _RANK_TAG + r"\]?[\s:,|-]*\[?(?:hostname|host|nodename|node)\s*[=:]\s*[A-Za-z]",
    _JSON_PREFILTER,
)


# -- launcher prefixes and decoration ---------------------------------------------------------
# Open MPI --tag-output: "[%s,%s]<%s>:" (jobid, vpid, stdout|stderr|stddiag);
# open-mpi/ompi orte/mca/iof/base/iof_base_setup.c, openpmix/prrte src/mca/iof/base/iof_base_setup.c
_MPI_TAG = lazy_compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:\s?")
_ANSI = lazy_compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # torchtitan colours, tqdm cursor moves

# -- line headers (time, level, logger) --------------------------------------------------------
_ISO_TS = r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
# DeepSpeed: logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s")
# deepspeedai/DeepSpeed deepspeed/utils/logging.py (LoggerFactory.create_logger)
_H_DEEPSPEED = lazy_compile(
    rf"^\[(?P<ts>{_ISO_TS})\] \[(?P<lvl>[A-Z]+)\] \[(?P<src>[^\]\s]+:\d+:[^\]\s]*)\] ?(?P<msg>.*)$"
)
# torchtitan: "[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s"; pytorch/torchtitan torchtitan/tools/logging.py
_H_TITAN = lazy_compile(rf"^\[titan\] (?P<ts>{_ISO_TS}) - (?P<name>\S+) - (?P<lvl>[A-Z]+) - (?P<msg>.*)$")
# NeMo: "[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d] %(message)s", datefmt "%Y-%m-%d %H:%M:%S"
# NVIDIA/NeMo nemo/utils/formatters/base.py (BaseNeMoFormatter)
_H_NEMO = lazy_compile(rf"^\[NeMo (?P<l1>[DIWEC]) (?P<ts>{_ISO_TS}) (?P<src>[^\]]*)\] ?(?P<msg>.*)$")
# HF examples: basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", datefmt="%m/%d/%Y %H:%M:%S")
# huggingface/transformers examples/pytorch/*/run_*.py (older ones: "%(name)s -   %(message)s")
_H_US = lazy_compile(
    r"^(?P<mo>\d\d)/(?P<d>\d\d)/(?P<y>\d{4}) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<rest>.*)$"
)
# Any ISO stamp at the start, bare or in brackets (python logging asctime "%Y-%m-%d %H:%M:%S,mmm",
# Megatron-LM " [%Y-%m-%d %H:%M:%S.%f]" in megatron/training/training.py training_log, loguru
# "YYYY-MM-DD HH:mm:ss.SSS | LEVEL | ...", ISO 8601 with a zone)
_H_ISO = lazy_compile(rf"^\s*\[?(?P<ts>{_ISO_TS})\]?(?P<rest>.*)$")
# glog / c10 (torch >= 2.4 agent "I0917 04:21:41.718000 90211 path:line] msg", c10 "[E0917 04:21:41.160918398 File.cpp:632] msg")
_H_GLOG = lazy_compile(
    r"^\[?(?P<sev>[IWEFDV])(?P<mo>\d\d)(?P<d>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)\.\d{6,9}\s+(?P<rest>.*)$"
)
# python logging.basicConfig() default BASIC_FORMAT "%(levelname)s:%(name)s:%(message)s" (cpython Lib/logging/__init__.py)
_H_BASIC = lazy_compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<name>[^\s:]+):(?P<msg>.*)$")

_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|SUCCESS"
# What follows a stamp: " - name - LEVEL - msg" (logging cookbook), " - LEVEL - name - msg" (HF examples),
# " [LEVEL] msg", " | LEVEL    | where - msg" (loguru default), " LEVEL msg", " name: [LEVEL] msg",
# "[name][LEVEL] - msg" (Hydra's default job logging, '[%(asctime)s][%(name)s][%(levelname)s] - %(message)s':
# facebookresearch/hydra hydra/conf/hydra/job_logging/default.yaml, formatter simple).
_REST = (
    lazy_compile(rf"^\[(?P<name>[^\]\s]+)\]\[(?P<lvl>{_LEVELS})\] - (?P<msg>.*)$"),
    lazy_compile(rf"^\s*[-|]\s*(?P<name>[^\s|]+)\s*[-|]\s*(?P<lvl>{_LEVELS})\s*[-|]\s*(?P<msg>.*)$"),
    lazy_compile(rf"^\s*[-|]\s*(?P<lvl>{_LEVELS})\s*[-|]\s*(?P<name>[^\s|]+)\s+[-|]\s*(?P<msg>.*)$"),
    lazy_compile(rf"^\s*\|\s*(?P<lvl>{_LEVELS})\s*\|\s*(?P<name>\S+)\s+-\s(?P<msg>.*)$"),
    lazy_compile(rf"^\s*\[(?P<lvl>{_LEVELS})\]\s*(?:\[(?P<name>[^\]]*)\]\s*)?(?P<msg>.*)$"),
    lazy_compile(rf"^\s*(?P<name>[\w.]+): \[(?P<lvl>{_LEVELS})\]\s*(?P<msg>.*)$"),
    lazy_compile(rf"^\s*[-:]?\s*(?P<lvl>{_LEVELS})\b:?\s*(?P<msg>.*)$"),
)
_SEV = {"DEBUG": Severity.DEBUG, "TRACE": Severity.DEBUG, "INFO": Severity.INFO, "SUCCESS": Severity.INFO,
        "WARNING": Severity.WARNING, "WARN": Severity.WARNING, "ERROR": Severity.ERROR,
        "CRITICAL": Severity.CRITICAL, "FATAL": Severity.CRITICAL,
        "D": Severity.DEBUG, "V": Severity.DEBUG, "I": Severity.INFO, "W": Severity.WARNING, "E": Severity.ERROR,
        "C": Severity.CRITICAL, "F": Severity.CRITICAL}

# -- identity in the message -------------------------------------------------------------------
# DeepSpeed get_dist_msg(): "[Rank {}] {}" (deepspeed/utils/logging.py); custom formats: "rank=3",
# "[RANK 3]", "global_rank: 3", f"[rank {rank}/{world_size}]" leading the message, or leading what
# a logging format puts after the level ("%(asctime)s - %(levelname)s - [rank 1/4] %(name)s - ...").
_RANK_WORD = r"(?:[Gg]lobal[_ ]?[Rr]ank|GLOBAL_RANK|[Rr]ank|RANK)"
_MSG_RANK = lazy_compile(
    rf"^(?:[-|]\s+(?=\[))?(?:\[{_RANK_WORD}\s*[=:]?\s*(?P<r1>\d{{1,7}})(?:\s*/\s*\d{{1,7}})?\]"
    rf"|{_RANK_WORD}\s*[=:]\s*(?P<r2>\d{{1,7}})\b|{_RANK_WORD}\s+(?P<r3>\d{{1,7}})\s*[:|])"
    r"[\s:,|-]*"
)
# Lightning: log.info(f"Initializing distributed: GLOBAL_RANK: {global_rank}, MEMBER: {global_rank + 1}/{world_size}")
# Lightning-AI/pytorch-lightning src/lightning/fabric/utilities/distributed.py (_init_dist_connection)
_LIGHTNING_INIT = lazy_compile(r"Initializing distributed: GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)")
# A process stating its own pid ("started pid=7621 node=n1 ..."): a key=value field. Not "(pid: N)", which
# torchrun's summaries and agents print about a worker ("exitcode  : 1 (pid: 52533)").
_OWN_PID = lazy_compile(r"(?:^|[\s\[,;|])pid=(\d{1,9})(?=[\s,;\]]|$)")
_MSG_HOST_FIELD = lazy_compile(r"^\[?(?:hostname|host|nodename|node)\s*[=:]\s*(?P<host>[A-Za-z][\w.-]{0,62})(?=[\]\s,;|]|$)")
_MSG_HOST = lazy_compile(r"^\[?(?:hostname|host)\s*[=:]\s*(?P<host>[A-Za-z][\w.-]{0,62})\]?[\s:,|-]*")

# -- progress lines ---------------------------------------------------------------------------
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|NaN"
# Megatron-LM megatron/training/training.py training_log(): ' iteration {:8d}/{:8d} |' ...
# ' elapsed time per iteration (ms): {:.1f} |', ' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |',
# ' learning rate: {learning_rate:.6E} |', ' global batch size: {batch_size:5d} |', ' {key}: {avg:.6E} |' (lm loss)
_MEG_ITER = lazy_compile(r"iteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|")
_MEG_MS = lazy_compile(r"elapsed time per iteration \(ms\): (?P<ms>[\d.]+)")
_MEG_TPUT = lazy_compile(r"throughput per GPU \(TFLOP/s/GPU\): (?P<tp>[\d.]+)")
_MEG_LR = lazy_compile(r"learning rate: (?P<lr>[-+\d.Ee]+)")
_MEG_LOSS = lazy_compile(rf"\|\s*(?P<name>[\w ]*?loss): (?P<v>{_NUM}) \|")
_MEG_GBS = lazy_compile(r"global batch size:\s*(?P<gbs>\d+)")
# NeMo 2 ProgressPrinter: prefix = f"Training epoch {epoch}, iteration {n-1}/{total-1}", then
# f' | {metric}: {val}' per metric; NVIDIA/NeMo nemo/lightning/pytorch/callbacks/progress_printer.py
_NEMO_PRINTER = lazy_compile(r"^Training epoch (?P<epoch>\d+), iteration (?P<it>\d+)/(?P<total>\d+)(?P<rest>(?: \| [^|]+)*)\s*$")
# DeepSpeed engine._report_progress: log_dist(f"step={step}, skipped={self.skipped_steps}, lr={lr}, mom={mom}")
# deepspeedai/DeepSpeed deepspeed/runtime/engine.py
_DS_STEP = lazy_compile(r"^step=(?P<step>\d+), skipped=(?P<skipped>\d+), lr=\[?(?P<lr>[-+\d.eE]+)")
# DeepSpeed ThroughputTimer.stop(): "epoch={}/micro_step={}/global_step={}, RunningAvgSamplesPerSec={}, CurrSamplesPerSec={}, ..."
# deepspeed/utils/timer.py
_DS_TPUT = lazy_compile(
    r"epoch=(?P<epoch>\d+)/micro_step=(?P<micro>\d+)/global_step=(?P<step>\d+), RunningAvgSamplesPerSec=(?P<avg>[\d.eE+-]+), "
    r"CurrSamplesPerSec=(?P<cur>[\d.eE+-]+)"
)
# DeepSpeed PipelineEngine.train_batch: f'steps: {self.global_steps} loss: {loss:0.4f} ' ... f'iter time (s): {iter_time:0.3f} samples/sec: {tput:0.3f}'
# deepspeed/runtime/pipe/engine.py
_DS_PIPE = lazy_compile(rf"^steps: (?P<step>\d+) loss: (?P<loss>{_NUM}) .*?iter time \(s\): (?P<s>[\d.]+) samples/sec: (?P<tp>[\d.]+)")
# DeepSpeed SynchronizedWallClockTimer.log: "time (ms)" + " | {name}: {:.2f}" per timer (deepspeed/utils/timer.py);
# global timers 'fwd', 'bwd', 'step' (FORWARD_GLOBAL_TIMER ... in deepspeed/utils/timer.py; 'forward'/'backward' before 0.9)
_DS_TIMERS = lazy_compile(r"^time \(ms\)(?P<rest>(?: \| [\w ]+: [\d.]+)+)")
_DS_TIMER_ITEM = lazy_compile(r" \| (?P<k>[\w ]+?): (?P<v>[\d.]+)")
# torchtitan MetricsProcessor.log(): f"step: {step:2}  loss: {loss:8.5f}  grad_norm: {grad_norm:7.4f}  memory: {gib:5.2f}GiB({pct:.2f}%)
#   tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}%"  (torchtitan/components/metrics.py; 2024: "wps:", no grad_norm/tflops)
_TITAN = lazy_compile(rf"^step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>{_NUM})")
_TITAN_FIELDS = lazy_compile(r"(?P<k>grad_norm|memory|tps|wps|tflops|mfu):\s*(?P<v>[\d,.]+|N/A)(?:GiB\((?P<pct>[\d.]+)%\))?")
# HF Trainer ProgressCallback.on_log: self.training_bar.write(str(logs)); PrinterCallback: print(logs)
# huggingface/transformers src/transformers/trainer_callback.py
_HF_DICT = lazy_compile(r"^\{'(?:loss|train_runtime|eval_loss)': ")
_HF_ITEM = lazy_compile(r"'(?P<k>[\w/]+)': (?P<v>[^,}]+)")
# tqdm format_meter: '{l_bar}{bar}{r_bar}', l_bar='{desc}: {percentage:3.0f}%|',
# r_bar='| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]' (tqdm/tqdm tqdm/std.py);
# Lightning TQDMProgressBar.BAR_FORMAT "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"
# (src/lightning/pytorch/callbacks/progress/tqdm_progress.py), desc f"Epoch {trainer.current_epoch}";
# NeMo MegatronProgressBar "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
# (nemo/lightning/pytorch/callbacks/progress_bar.py)
_TQDM = lazy_compile(
    r"""^(?:(?P<desc>[^|\[\]]*?):\s*)?                 # "Epoch 0: " (desc)
        (?:(?P<pct>\d{1,3})%)?\|?[^|]*?\|?\s*            # " 45%|████▌     |" or "|" (no total) or ": "
        (?P<n>\d+)/(?P<total>\d+|\?)\s
        \[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[\d:?]+))?
        (?:,\s*(?P<rate>[\d.]+|\?)\s?(?P<unit>it/s|s/it))?
        (?P<post>,[^\]]*)?\]""",
    regex.VERBOSE,
)
_EPOCH_DESC = lazy_compile(r"^Epoch (?P<epoch>\d+)$")
# mmengine mmengine/runner/log_processor.py LogProcessor.get_log_after_iter: f'Epoch({mode}) [{cur_epoch}][{cur_iter}/{len}]  '
#   or f'Iter({mode}) [{cur_iter}/{max_iters}]  ', then '  '.join(f'{k}: {v}') with 'time: <s per iter>', 'loss: ...';
# mmcv 1.x TextLoggerHook: f'Epoch [{epoch}][{inner_iter}/{len}]\t' / f'Iter [{iter}/{max_iters}]\t' ('time: ', 'loss: ')
_MM = lazy_compile(
    r"(?:^|\s)(?:Epoch(?:\((?P<mode>train|val|test)\))? *\[(?P<epoch>\d+)\]|Iter(?:\((?P<imode>train|val|test)\))? *)"
    r"\[ *(?P<it>\d+)/(?P<total>\d+)\](?P<rest>.*)$"
)
_MM_TIME = lazy_compile(r"(?:^|\s)time: (?P<v>\d+(?:\.\d+)?)(?:\s|$)")
_MM_LOSS = lazy_compile(rf"(?:^|\s)loss: (?P<v>{_NUM})(?:\s|,|$)")
# PyTorch's DDP tutorial series (pytorch/examples distributed/ddp-tutorial-series/multinode.py Trainer._run_epoch):
# print(f"[GPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}") at the start of
# each epoch (Steps: batches per epoch); copies add fields after it (" | Loss: 0.25"). "[RANK n]" is read as identity.
_DDP_TUTORIAL = lazy_compile(r"^(?:\[GPU\d+\]\s*)?Epoch (?P<epoch>\d+) \| Batchsize: (?P<bs>\d+) \| Steps: (?P<steps>\d+)(?P<rest>.*)$")
# plain scripts: "step 120 loss 2.31", "Step 120/1000", "iter 120 | loss 2.31", "Epoch 1 Step 120 ..."
_PLAIN = lazy_compile(
    r"""^(?:[Ee]poch\s*[:=]?\s*(?P<epoch>\d+)(?:\s*/\s*\d+)?[\s,|:\]-]*)?
        \[?(?:[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER(?:ATION)?)\s*[:=#]?\s*(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?\]?
        (?P<rest>(?:[\s,|:\]-].*)?)$""",
    regex.VERBOSE,
)
_PLAIN_LOSS = lazy_compile(rf"\b(?:[Ll]oss|LOSS)\s*[:=]?\s*(?P<v>{_NUM})")
_PLAIN_TIME = lazy_compile(r"\b(?:step_time|time|dt|elapsed)\s*[:=]?\s*(?P<v>\d+(?:\.\d+)?)\s*(?P<u>ms|s)\b")
_PLAIN_LR = lazy_compile(r"\b(?:lr|learning[_ ]rate)\s*[:=]?\s*(?P<v>[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?)")

# -- checkpoint lines (framework, phase, regex, implied-end allowed) -----------------------------
_CKPT = (
    # Megatron-LM megatron/training/checkpointing.py save_checkpoint():
    #   f'[{ts}] saving checkpoint at iteration {iteration:7d} to {save_dir} in {ckpt_format} format' (older: no stamp)
    #   f'  [{ts}] successfully saved checkpoint from iteration {int(iteration):7d} to {args.save} [ t 0/8, p 0/4 ]'
    #   ('at iteration' before 2023; 'successfully saved local checkpoint from iteration' for local ckpts)
    ("megatron", "start", lazy_compile(r"saving checkpoint at iteration\s+(?P<it>\d+) to (?P<path>\S+?)(?: in (?P<fmt>\S+) format)?\s*$"), False),
    # NeMo nemo/lightning/io/pl.py: logging.info(f'Successfully saved checkpoint from iteration {int(iteration):7d} to {path}')
    ("megatron", "end", lazy_compile(r"[Ss]uccessfully saved (?:local )?checkpoint (?:from|at) iteration\s+(?P<it>\d+)(?: to (?P<path>\S+))?"), False),
    # DeepSpeed TorchCheckpointEngine.create: log_dist(f"[Torch] Checkpoint {tag} is about to be saved!", ranks=[0]);
    # commit (0.7 - 0.16): logger.info(f"[Torch] Checkpoint {tag} is ready now!")  (commented out since 0.17)
    # deepspeed/runtime/checkpoint_engine/torch_checkpoint_engine.py
    ("deepspeed", "start", lazy_compile(r"\[Torch\] Checkpoint (?P<tag>\S+) is about to be saved!"), True),
    ("deepspeed", "end", lazy_compile(r"\[Torch\] Checkpoint (?P<tag>\S+) is ready now!"), False),
    # DeepSpeed engine._save_checkpoint: log_dist(message=f'Saving model checkpoint: {save_path}', ...) (deepspeed/runtime/engine.py)
    ("deepspeed", "start", lazy_compile(r"Saving model checkpoint: (?P<path>\S+)"), True),
    # HF Trainer._save: logger.info(f"Saving model checkpoint to {output_dir}") (src/transformers/trainer.py)
    ("hf_trainer", "start", lazy_compile(r"Saving model checkpoint to (?P<path>\S+)"), True),
    # Lightning ModelCheckpoint._update_best_and_save: f"Epoch {epoch:d}, global step {step:d}: {self.monitor!r} reached
    #   {current:0.5f} (best {best:0.5f}), saving model to {filepath!r} as top {k}" (src/lightning/pytorch/callbacks/model_checkpoint.py)
    ("lightning", "start", lazy_compile(r"Epoch (?P<epoch>\d+), global step (?P<step>\d+): .*?saving model to (?P<q>['\"])(?P<path>.+?)(?P=q)"), True),
    # pytorch_lightning <= 1.5 ModelCheckpoint.on_train_end: rank_zero_info("Saving latest checkpoint...")
    ("lightning", "start", lazy_compile(r"^Saving latest checkpoint\.\.\.$"), True),
    # mmengine mmengine/hooks/checkpoint_hook.py CheckpointHook: runner.logger.info(f'Saving checkpoint at
    #   {runner.epoch + 1} epochs') / f'Saving checkpoint at {runner.iter + 1} iterations' (no end line)
    ("mmengine", "start", lazy_compile(r"Saving checkpoint at (?:(?P<epoch>\d+) epochs|(?P<step>\d+) iterations)\s*$"), True),
    # ai2cm/ace fme/core/generics/trainer.py _save_restart_checkpoints: logging.info(f"Saving latest checkpoint model
    #   trained for {epochs} complete epochs and {n} additional batches, or {total} total batches, with ...") (no end line)
    ("ace", "start", lazy_compile(r"Saving latest checkpoint model trained for \d+ complete epochs and \d+ additional batches, or (?P<step>\d+) total batches"), True),
    # torchtitan CheckpointManager: logger.info(f"{checkpoint_phase.capitalize()} the checkpoint.") / f"Finished {phase} the
    #   checkpoint in {s:.2f} seconds." (torchtitan/components/checkpointer/dcp.py); 2025: "Saving the checkpoint (or staging if
    #   async is enabled)." / "Finished saving the checkpoint (or staging if async is enabled) in {s:.2f} seconds."
    #   (torchtitan/components/checkpoint.py); last step: "Saving a full checkpoint at last step, step {n}." / "Last step
    #   checkpoint completed in {s:.2f}s"
    ("torchtitan", "start", lazy_compile(r"^(?:Saving|Staging) the checkpoint(?: \(or staging if async is enabled\))?\.\s*$"), False),
    ("torchtitan", "start", lazy_compile(r"^Saving a (?:full|model only) checkpoint .*?at last step, step (?P<step>\d+)\."), False),
    ("torchtitan", "end", lazy_compile(r"^Finished (?:saving|staging) the checkpoint(?: \(or staging if async is enabled\))? in (?P<sec>[\d.]+) seconds"), False),
    ("torchtitan", "end", lazy_compile(r"^Last step checkpoint completed in (?P<sec>[\d.]+)s"), False),
    # NeMo ModelCheckpoint (async): logging.info(f'Scheduled async checkpoint save for {filepath}') / f'Async checkpoint save for
    #   step {global_step} ({filepath}) finalized successfully.' (nemo/lightning/pytorch/callbacks/model_checkpoint.py)
    ("nemo", "start", lazy_compile(r"Scheduled async checkpoint save for (?P<path>\S+)"), False),
    ("nemo", "end", lazy_compile(r"Async checkpoint save for step (?P<step>\d+) \((?P<path>[^)]*)\) finalized successfully"), False),
    # torchtune checkpointers (torchtune/training/checkpointing/_checkpointer.py save_checkpoint): after each file is
    #   written, logger.info(f"Model checkpoint of size {size / 1024**3:.2f} GiB saved to {output_path}") ("GB" and
    #   1000**3 before 0.5, "MB" in the early recipes), then "Adapter checkpoint of size ..." / "Recipe checkpoint of
    #   size ..."; no start line, one end per shard file
    ("torchtune", "end", lazy_compile(r"(?:Model|Adapter|Recipe) checkpoint of size [\d.]+ ?(?:GiB|GB|MiB|MB) saved to (?P<path>\S+)"), False),
    # nanoGPT (karpathy/nanoGPT@005475c4 train.py, and the many scripts copied from it): after an eval the master
    #   process prints f"saving checkpoint to {out_dir}" and calls torch.save(checkpoint, os.path.join(out_dir,
    #   'ckpt.pt')); no end line (the next "iter N: loss ..." line implies it)
    ("nanogpt", "start", lazy_compile(r"^saving checkpoint to (?P<path>\S+)\s*$"), True),
    # litgpt (Lightning-AI/litgpt litgpt/pretrain.py save_checkpoint, and the finetune scripts): fabric.print(f"Saving
    #   checkpoint to {str(checkpoint_file)!r}") then fabric.save(checkpoint_file, state); lit-llama and the scripts
    #   copied from both print f"Saving checkpoint to {out_dir}" unquoted. Fabric.print prints on each machine's
    #   local rank 0, so the line names no global rank by itself; no end line (the next step line implies it)
    ("litgpt", "start", lazy_compile(r"^Saving checkpoint to (?P<q>['\"]?)(?P<path>[^'\"\s]+)(?P=q)\s*$"), True),
    # PyTorch's DDP tutorial series (pytorch/examples distributed/ddp-tutorial-series multigpu.py, multinode.py,
    #   multigpu_torchrun.py; pytorch/tutorials beginner_source/ddp_series_fault_tolerance.rst), widely copied:
    #   torch.save(snapshot, self.snapshot_path); print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")
    ("ddp_tutorial", "end", lazy_compile(r"^(?:Epoch (?P<ep>\d+) \|? ?)?Training snapshot saved at (?P<path>\S+?)(?=Epoch \d|\s|$)"), False),
)
_CKPT_HINT = ("checkpoint", "Checkpoint", "saving model to", "snapshot saved at")
# A trainer's own end-of-training words (HF Trainer "Training completed.", Megatron "after
# training is done", Lightning "`Trainer.fit` stopped", scripts' "training finished/done/complete"),
# not the end of an epoch or a step ("Training epoch 3 finished" is a progress line). Read here for
# saves that print no end line (a save before them returned) and by analyses/silence.py.
TRAINING_ENDED = compile_pattern(
    r"(?i)\b(?:training|train loop|fit)\b(?:(?!\b(?:epoch|step|iter\w*|batch|phase|stage|round)\b)[^\n]){0,40}?"
    r"\b(?:finished|completed?|done|ended|is over)\b"
    r"|\b(?:finished|completed|done with|end of) (?:the )?training\b|`Trainer\.fit` stopped"
)
_STEP_IN_PATH = lazy_compile(r"(?:global_step|checkpoint-|iter_|step[-_=]?)(?P<n>\d+)")


@dataclass
class _Row:
    kind: Kind
    line: int
    message: str
    attrs: dict[str, Any]
    time: int | None
    tq: Any
    rank: int | None
    local_rank: int | None
    host: str | None
    severity: Severity = Severity.INFO
    task: int | None = None  # the srun --label task of the line (attrs.srun_task)


class _Series:
    """The bounded train_step sample of one (file, rank); see the module docstring."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[_Row] = []
        self.regular: dict[int, _Row] = {}
        self.stride = 1
        self.outliers: list[_Row] = []
        self.last: _Row | None = None
        self.window: deque[float] = deque()
        self.sorted: list[float] = []

    def add(self, row: _Row) -> None:
        i = self.count
        self.count += 1
        row.attrs["seen"] = self.count
        ms = row.attrs.get("step_ms")
        outlier = False
        if isinstance(ms, (int, float)) and ms == ms:  # not NaN
            if len(self.sorted) >= OUTLIER_MIN_WINDOW:
                med = self.sorted[len(self.sorted) // 2]
                outlier = med > 0 and ms >= OUTLIER_FACTOR * med
            self.window.append(ms)
            bisect.insort(self.sorted, ms)
            if len(self.window) > OUTLIER_WINDOW:
                old = self.window.popleft()
                del self.sorted[bisect.bisect_left(self.sorted, old)]
        self.last = row
        if i < FIRST_STEPS:
            row.attrs["sample"] = "first"
            self.first.append(row)
        elif outlier and len(self.outliers) < MAX_OUTLIERS:
            row.attrs["sample"] = "outlier"
            self.outliers.append(row)
        elif (i - FIRST_STEPS) % self.stride == 0:
            row.attrs["sample"] = "stride"
            self.regular[i] = row
            if len(self.regular) > STRIDE_CAP:
                self.stride *= 2
                self.regular = {k: v for k, v in self.regular.items() if (k - FIRST_STEPS) % self.stride == 0}

    def rows(self) -> list[_Row]:
        out = {id(r): r for r in (*self.first, *self.regular.values(), *self.outliers)}
        if self.last is not None and id(self.last) not in out:
            self.last.attrs["sample"] = "last"
            out[id(self.last)] = self.last
        return list(out.values())


@dataclass
class _Stream:
    """One rank's lines in one file."""

    series: _Series = field(default_factory=_Series)
    pending: _Row | None = None  # the current step, still open to lines that complete it
    last_step: int | None = None
    framework: str | None = None
    open_saves: list[_Row] = field(default_factory=list)
    lines: int = 0
    seen_line: int = -1
    stamped: int = 0
    first_time: int | None = None
    last_time: int | None = None
    last_tq: Any = None
    last_line: int = 0
    last_message: str = ""
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    task: int | None = None
    gaps: int = 0
    pids: set[int] = field(default_factory=set)  # pid= fields this rank's lines state (two are enough to know it is not one)


@dataclass
class _Line:
    """What the header of one (segment of a) line says."""

    msg: str
    time: int | None = None
    tq: Any = None
    level: str | None = None
    logger: str | None = None
    glog: bool = False  # c10/glog: "[Rank N]" in the message is a process-group rank, not the process's
    rank: int | None = None  # a structured record's own rank field (JSON lines)
    host: str | None = None  # and its host field


class _CatalogReads:
    """Whether the catalog source reads a line: one of its texts matches there, not only one
    of their anchors (an ERROR line with 'Processor' or 'Killed' in it that no catalog text
    matches is still this source's error)."""

    def __init__(self, cats: Any):
        self.cats = cats

    def search(self, raw: str) -> bool:
        from crashscope import catalogs

        return bool(self.cats.quick.search(raw)) and bool(catalogs.match_text(raw[:8192], self.cats))


class ApplogSource(LineSource):
    name = "applog"
    description = "Application logs: per-rank progress (train steps), checkpoint saves, last activity, app errors"
    filename_hints = ("*rank*", "*.log", "*.out", "*.txt")

    prefilter = "|".join(f"(?:{p})" for p in _PREFILTER_PARTS)

    def sniff(self, head: str, name: str) -> float:
        lines = [ln for ln in head.splitlines()[:2000] if ln.strip()]
        if not lines:
            return 0.0
        n = progress = 0
        for ln in lines:
            if "NCCL " in ln or "ProcessGroupNCCL" in ln:
                continue
            _, text = _strip_prefixes(ln)
            seg = text.rsplit("\r", 1)[-1] if "\r" in text else text
            seg = _ANSI.sub("", seg)
            if _is_progress(seg):
                n += 1
                progress += 1
            elif _H_ISO.match(seg) or _H_US.match(seg) or _H_TITAN.match(seg) or _H_NEMO.match(seg) or _H_BASIC.match(seg):
                n += 1
            elif ("checkpoint of size " in seg or "snapshot saved at " in seg) and _checkpoint_line(seg):
                n += 1  # a trainer's own unstamped save lines (torchtune, the DDP tutorial)
        if n == 0:
            return 0.0
        ratio = n / len(lines)
        if ratio >= 0.5 and n >= 3:
            return 0.75 if progress else 0.65
        return min(0.55, 0.15 + 0.6 * ratio + (0.1 if progress else 0.0))

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        p = _Parser(ctx)
        feed_guarded(ctx, lines, p.line, p.finish)
        for r in sorted(p.out, key=lambda r: r.line):
            if r.task is not None:
                r.attrs.setdefault("srun_task", r.task)
            ctx.emit(r.kind, r.line, r.message, severity=r.severity, time=r.time, time_quality=r.tq,
                     host=r.host, rank=r.rank, local_rank=r.local_rank, attrs=r.attrs)


def _who(st: _Stream) -> str:
    if st.rank is not None:
        return f"rank {st.rank}"
    return f"srun task {st.task}" if st.task is not None else "this file"


def _strip_prefixes(raw: str) -> tuple[tuple[int | None, int | None, int | None, int | None], str]:
    """(rank, local_rank, srun task, mpi rank) from launcher prefixes, and the rest."""
    mpi = None
    if raw.startswith("[") and (m := _MPI_TAG.match(raw)):
        mpi, raw = int(m.group("rank")), raw[m.end():]
    pre, text = split_prefix(raw)
    if mpi is None and text.startswith("[") and (m := _MPI_TAG.match(text)):
        mpi, text = int(m.group("rank")), text[m.end():]
    return (pre.rank, pre.local_rank, pre.task, mpi), text


def _is_progress(seg: str) -> bool:
    s = seg.strip()
    if "elapsed time per iteration" in s or "SamplesPerSec=" in s or "skipped=" in s:
        return True
    if s.startswith("{'") or "/" in s and " [" in s and _TQDM.search(s):
        return True
    if " | Batchsize: " in s:
        return bool(_DDP_TUTORIAL.match(_MSG_RANK.sub("", s, count=1)))
    m = _H_ISO.match(s)
    body = m.group("rest") if m else s
    return bool(_TITAN.search(_ANSI.sub("", body).split(" - ")[-1].strip()) or _plain(body.strip()))


def _checkpoint_line(seg: str) -> bool:
    s = seg.strip()
    return any(rx.search(s) for fw, _, rx, _ in _CKPT if fw in ("torchtune", "ddp_tutorial"))


def _plain(msg: str):  # type: ignore[no-untyped-def]
    m = _PLAIN.match(msg)
    if m is None:
        # "[rank 0/4] [n1] train - step 18 loss 0.62": fields a logging format put before
        # the message, up to its last " - " separator.
        head, sep, tail = msg[:160].rpartition(" - ")
        if not sep or not (m := _PLAIN.match(msg[len(head) + 3:])):
            return None
    rest = m.group("rest") or ""
    if m.group("total") is None and not (_PLAIN_LOSS.search(rest) or _PLAIN_TIME.search(rest)):
        return None  # "step 3 of the recipe": no total, loss or time, not a progress line
    return m


def _hf_dict(msg: str) -> str | None:
    """The HF Trainer logs dict, bare (``print(logs)``) or as the message of a logging format
    that put fields before it (``[rank 0/4] [n1] train - {'loss': ...}``)."""
    if msg.startswith("{'"):
        return msg if _HF_DICT.match(msg) else None
    i = msg.find(" - {'", 0, 200)
    if i < 0:
        return None
    body = msg[i + 3:]
    return body if _HF_DICT.match(body) else None


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if t.startswith("tensor(") and t.endswith(")"):
        t = t[7:-1]
    try:
        return float(t)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    v = _num(text)
    return int(v) if v is not None and v == v and abs(v) < 2**62 else None


class _Parser:
    def __init__(self, ctx: ParseContext):
        self.ctx = ctx
        self.out: list[_Row] = []
        self.streams: dict[tuple, _Stream] = {}
        self.learned_rank: int | None = None
        self.learned_ranks: set[int] = set()
        self.errors = 0
        self.run_ends = 0
        self.error_sigs: dict[str, int] = {}
        self._others = None

    # -- dispatch ---------------------------------------------------------------------------
    def line(self, n: int, raw: str) -> None:
        (p_rank, p_lr, task, mpi), text = _strip_prefixes(raw.rstrip("\n"))
        segments = [s for s in text.split("\r")] if "\r" in text else [text]
        last_seg = None
        for seg in segments:
            seg = _ANSI.sub("", seg) if "\x1b" in seg else seg
            if seg.strip():
                last_seg = seg
                self._segment(n, raw, seg, p_rank, p_lr, task, mpi, glued=len(segments) > 1)
        if last_seg is None:
            return

    def _segment(self, n: int, raw: str, seg: str, p_rank, p_lr, task, mpi, glued: bool) -> None:  # type: ignore[no-untyped-def]
        hdr, msg, line_rank, host = self._identity(self._header(seg))
        if "GLOBAL_RANK: " in msg and (m := _LIGHTNING_INIT.search(msg)):
            self.learned_ranks.add(int(m.group("rank")))
            self.learned_rank = int(m.group("rank")) if len(self.learned_ranks) == 1 else None
        # identity: launcher prefix > mpirun tag > message field > learned; an srun task is
        # kept as attrs.srun_task (the timeline makes it the rank under plain srun, the node
        # under torchrun, where one task is a node's agent and its ranks print unprefixed)
        rank = p_rank if p_rank is not None else mpi if mpi is not None else line_rank
        if rank is None and p_lr is None and task is None and self.learned_rank is not None:
            rank = self.learned_rank
        key = (rank, p_lr, task, host)
        st = self.streams.get(key)
        if st is None:
            st = self.streams[key] = _Stream(rank=rank, local_rank=p_lr, host=host, task=task)
        if st.seen_line != n:
            st.seen_line = n
            st.lines += 1
        excerpt = msg.strip()
        if hdr.time is not None:
            if st.last_line != n:
                st.stamped += 1
            if st.first_time is None:
                st.first_time = hdr.time
            if st.last_time is not None and hdr.time - st.last_time >= GAP_NS and st.gaps < MAX_GAPS:
                # The line before a silence: where a rank that stopped and came back (or whose
                # peers stopped answering) was when it went quiet.
                st.gaps += 1
                who = _who(st)
                self.out.append(_Row(Kind.ACTIVITY, st.last_line,
                                     f"last line of {who} before {(hdr.time - st.last_time) / 1e9:.0f} s of silence: {st.last_message[:160]}",
                                     {"gap_s": round((hdr.time - st.last_time) / 1e9, 3), "resumed_at": _iso(hdr.time), "resumed_line": n},
                                     st.last_time, st.last_tq, st.rank, st.local_rank, st.host, task=st.task))
            st.last_time, st.last_tq, st.last_line = hdr.time, hdr.tq, n
            st.last_message = excerpt[:EXCERPT]
        if "pid=" in excerpt and len(st.pids) < 2 and (pm := _OWN_PID.search(excerpt[:240])):
            st.pids.add(int(pm.group(1)))
        base = dict(time=hdr.time, tq=hdr.tq, rank=rank, local_rank=p_lr, host=host, task=task)
        if st.open_saves and TRAINING_ENDED.search(excerpt):
            # the process went on past a save that prints no end line to the end of its training
            self._implied_save_ends(st, _Row(Kind.ACTIVITY, n, excerpt, {}, **base), f"end of training at line {n}")
        if self.run_ends < MAX_RUN_ENDS:
            for framework, rx in _RUN_END:
                if rx.search(excerpt):
                    self.run_ends += 1
                    self.out.append(_Row(Kind.RUN_END, n, excerpt[:EXCERPT], {"outcome": "success", "framework": framework}, **base))
                    return
        if line_rank is not None and host is None and excerpt[:1] in "[hHnN" and (hm := _MSG_HOST_FIELD.match(excerpt)):
            # "[rank 2] hostname=n2 local_rank=0 ...": the rank says where it runs
            self.out.append(_Row(Kind.IDENTITY, n, excerpt[:EXCERPT], {"host": hm.group("host")}, **base))
            return
        if self._progress(n, excerpt, st, base):
            return
        if any(h in excerpt for h in _CKPT_HINT) or excerpt.startswith(("Saving", "Staging", "Finished", "Last step")):
            if self._checkpoint(n, excerpt, st, base):
                return
        if hdr.level in ("ERROR", "CRITICAL", "FATAL", "E", "C", "F") and not glued:
            self._error(n, raw, excerpt, hdr, st, base)

    # -- headers ------------------------------------------------------------------------------
    def _header(self, seg: str) -> _Line:
        s = seg.lstrip()
        c = s[:1]
        ctx = self.ctx
        if c == "{" and s.startswith('{"') and (rec := _json_record(s.rstrip(), ctx)) is not None:
            return rec
        if c == "[":
            if s.startswith("[titan] ") and (m := _H_TITAN.match(s)):
                t, tq = iso_to_ns(m.group("ts"), ctx)
                return _Line(m.group("msg"), t, tq, m.group("lvl"), m.group("name"))
            if s.startswith("[NeMo ") and (m := _H_NEMO.match(s)):
                t, tq = iso_to_ns(m.group("ts"), ctx)
                return _Line(m.group("msg"), t, tq, m.group("l1"), m.group("src"))
            if (m := _H_DEEPSPEED.match(s)):
                t, tq = iso_to_ns(m.group("ts"), ctx)
                return _Line(m.group("msg"), t, tq, m.group("lvl"), m.group("src"))
        if c.isdigit() or c == "[":
            if (m := _H_ISO.match(s)):
                t, tq = iso_to_ns(m.group("ts"), ctx)
                return self._rest(m.group("rest"), t, tq)
            if c.isdigit() and (m := _H_US.match(s)):
                mo, d = int(m.group("mo")), int(m.group("d"))
                if mo > 12 >= d:  # a day-first datefmt
                    mo, d = d, mo
                frac = m.group("frac") or ""
                ns = int((frac + "000000000")[:9]) if frac else 0
                t = ctx.local_ns(int(m.group("y")), mo, d, int(m.group("hh")), int(m.group("mi")), int(m.group("ss")), ns)
                return self._rest(m.group("rest"), t, ctx.local_quality() if t is not None else None)
        if c in "IWEFDV[" and (m := _H_GLOG.match(s)):
            t = ctx.yearless_ns(int(m.group("mo")), int(m.group("d")), int(m.group("hh")), int(m.group("mi")), int(m.group("ss")))
            rest = m.group("rest")
            # glog "pid path:line] msg" / c10 "File.cpp:632] msg"
            cut = rest.find("] ")
            msg = rest[cut + 2:] if cut >= 0 else rest
            return _Line(msg, t, ctx.local_quality() if t is not None else None, m.group("sev"), glog=True)
        if c in "DIWEC" and (m := _H_BASIC.match(s)):
            return _Line(m.group("msg"), None, None, m.group("lvl"), m.group("name"))
        return _Line(s)

    def _identity(self, hdr: _Line) -> tuple[_Line, str, int | None, str | None]:
        """The header, the message, and the rank or host field the message leads with."""
        msg = hdr.msg
        if hdr.rank is not None or hdr.host is not None:  # a structured record names them in fields
            return hdr, msg, hdr.rank, hdr.host
        line_rank = host = None
        if not hdr.glog and msg.startswith(("[", "r", "R", "g", "G", "h", "- [", "| [")):
            if (m := _MSG_RANK.match(msg)) and m.end() < len(msg):
                line_rank, msg = int(m.group("r1") or m.group("r2") or m.group("r3")), msg[m.end():]
            elif (m := _MSG_HOST.match(msg)) and m.end() < len(msg):
                host, msg = m.group("host"), msg[m.end():]
            if line_rank is not None or host is not None:
                # the identity field may come before the stamp or the level: "[rank 3] 2026-.. INFO msg",
                # "[%(asctime)s][rank%(rank)s][%(levelname)s] msg"
                hdr, msg = self._header_after_identity(hdr, msg)
        elif not hdr.glog and hdr.logger and (m := _MSG_RANK.fullmatch(f"[{hdr.logger}]")):
            line_rank = int(m.group("r1") or m.group("r2") or m.group("r3"))  # "[%(levelname)s][rank%(rank)s] msg"
        return hdr, msg, line_rank, host

    def _header_after_identity(self, hdr: _Line, msg: str) -> tuple[_Line, str]:
        """The stamp and level that follow a leading rank or host field, when the line's
        start gave none."""
        if hdr.time is None and (msg[:1].isdigit() or msg.startswith("[")):
            inner = self._header(msg)
            if inner.time is not None:
                return _Line(inner.msg, inner.time, inner.tq, hdr.level or inner.level, hdr.logger or inner.logger), inner.msg
        if hdr.level is None:
            peeled = self._rest(msg, hdr.time, hdr.tq)
            if peeled.level is not None:
                return _Line(peeled.msg, hdr.time, hdr.tq, peeled.level, hdr.logger or peeled.logger), peeled.msg
        return hdr, msg

    @staticmethod
    def _rest(rest: str, t: int | None, tq: Any) -> _Line:
        for rx in _REST:
            if (m := rx.match(rest)):
                lvl = m.group("lvl")
                name = m.groupdict().get("name")
                return _Line(m.group("msg"), t, tq, "WARNING" if lvl == "WARN" else lvl, name)
        return _Line(rest.lstrip(" -|:]"), t, tq)

    # -- progress -------------------------------------------------------------------------------
    def _progress(self, n: int, msg: str, st: _Stream, base: dict[str, Any]) -> bool:
        a: dict[str, Any] | None = None
        if "elapsed time per iteration" in msg and (m := _MEG_ITER.search(msg)):
            a = {"framework": "megatron", "step": int(m.group("it")), "total": int(m.group("total"))}
            if mm := _MEG_MS.search(msg):
                a["step_ms"] = float(mm.group("ms"))
            if mm := _MEG_TPUT.search(msg):
                a["throughput"], a["throughput_unit"] = float(mm.group("tp")), "TFLOP/s/GPU"
            if mm := _MEG_LR.search(msg):
                a["lr"] = _num(mm.group("lr"))
            if mm := _MEG_LOSS.search(msg):
                a["loss"], a["loss_name"] = _num(mm.group("v")), mm.group("name").strip()
            if mm := _MEG_GBS.search(msg):
                a["global_batch_size"] = int(mm.group("gbs"))
        elif msg.startswith("Training epoch ") and (m := _NEMO_PRINTER.match(msg)):
            a = {"framework": "nemo", "step": int(m.group("it")), "total": int(m.group("total")), "epoch": int(m.group("epoch"))}
            for item in (m.group("rest") or "").split(" | ")[1:]:
                k, _, v = item.partition(": ")
                self._nemo_metric(a, k.strip(), v)
        elif msg.startswith("step=") and (m := _DS_STEP.match(msg)):
            a = {"framework": "deepspeed", "step": int(m.group("step")), "skipped": int(m.group("skipped")),
                 "lr": _num(m.group("lr"))}
        elif "SamplesPerSec=" in msg and (m := _DS_TPUT.search(msg)):
            a = {"framework": "deepspeed", "step": int(m.group("step")), "epoch": int(m.group("epoch")),
                 "throughput": _num(m.group("cur")), "throughput_unit": "samples/s"}
        elif msg.startswith("steps: ") and (m := _DS_PIPE.match(msg)):
            a = {"framework": "deepspeed", "step": int(m.group("step")), "loss": _num(m.group("loss")),
                 "step_ms": round(float(m.group("s")) * 1000.0, 3), "throughput": float(m.group("tp")),
                 "throughput_unit": "samples/s"}
        elif msg.startswith("time (ms) | ") and (m := _DS_TIMERS.match(msg)):
            self._ds_timers(n, m.group("rest"), st)
            return True
        elif msg.startswith("step:") and (m := _TITAN.match(msg)):
            a = {"framework": "torchtitan", "step": int(m.group("step")), "loss": _num(m.group("loss"))}
            for f in _TITAN_FIELDS.finditer(msg[m.end():]):
                k, v = f.group("k"), f.group("v")
                if k == "memory":
                    a["memory_gib"] = _num(v)
                    if f.group("pct"):
                        a["memory_pct"] = _num(f.group("pct"))
                elif k in ("tps", "wps"):
                    a["throughput"], a["throughput_unit"] = _num(v), "tokens/s/GPU"
                elif k == "mfu":
                    a["mfu"] = _num(v)
                else:
                    a[k] = _num(v)
        elif (hf := _hf_dict(msg)) is not None:
            items = {mm.group("k"): mm.group("v").strip() for mm in _HF_ITEM.finditer(hf)}
            if "loss" not in items:
                return True  # end-of-train / eval summary: not a step
            a = {"framework": "hf_trainer", "loss": _num(items.get("loss"))}
            for k in ("grad_norm", "learning_rate", "epoch"):
                if k in items:
                    a["lr" if k == "learning_rate" else k] = _num(items[k])
            if st.last_step is not None and st.framework in ("tqdm", "hf_trainer"):
                a["step"] = st.last_step
        elif "/" in msg and " [" in msg and (m := _TQDM.search(msg)):
            a = self._tqdm(m)
        elif ("Epoch" in msg or "Iter" in msg) and (m := _MM.search(msg)):
            mode = m.group("mode") or m.group("imode") or "train"
            a = {"framework": "mmengine", "step": int(m.group("it")), "total": int(m.group("total")), "mode": mode}
            if m.group("epoch"):
                a["epoch"] = int(m.group("epoch"))
            rest = m.group("rest") or ""
            if mode == "train" and (mm := _MM_TIME.search(rest)):
                a["step_ms"] = round(float(mm.group("v")) * 1000.0, 3)
            if mm := _MM_LOSS.search(rest):
                a["loss"] = _num(mm.group("v"))
        elif " | Batchsize: " in msg and (m := _DDP_TUTORIAL.match(msg)):
            a = {"framework": "ddp_tutorial", "epoch": int(m.group("epoch")), "batch_size": int(m.group("bs")),
                 "steps_per_epoch": int(m.group("steps"))}
            if mm := _PLAIN_LOSS.search(m.group("rest") or ""):
                a["loss"] = _num(mm.group("v"))
        elif m := _plain(msg):
            a = {"framework": "plain", "step": int(m.group("step"))}
            if m.group("total"):
                a["total"] = int(m.group("total"))
            if m.group("epoch"):
                a["epoch"] = int(m.group("epoch"))
            rest = m.group("rest") or ""
            if mm := _PLAIN_LOSS.search(rest):
                a["loss"] = _num(mm.group("v"))
            if mm := _PLAIN_TIME.search(rest):
                v = float(mm.group("v"))
                a["step_ms"] = v if mm.group("u") == "ms" else round(v * 1000.0, 3)
            if mm := _PLAIN_LR.search(rest):
                a["lr"] = _num(mm.group("v"))
        if a is None:
            return False
        a = {k: v for k, v in a.items() if v is not None}
        row = _Row(Kind.TRAIN_STEP, n, msg[:EXCERPT], a, **base)
        self._add_step(st, row)
        return True

    @staticmethod
    def _nemo_metric(a: dict[str, Any], k: str, v: str) -> None:
        if k == "global_step":
            a["step"] = _int(v) if _int(v) is not None else a.get("step")
        elif k == "reduced_train_loss":
            a["loss"] = _num(v)
        elif k == "train_step_timing in s":
            sec = _num(v)
            if sec is not None:
                a["step_ms"] = round(sec * 1000.0, 3)
        elif k == "lr":
            a["lr"] = _num(v)
        elif k == "consumed_samples":
            a["consumed_samples"] = _int(v)

    def _tqdm(self, m) -> dict[str, Any] | None:  # type: ignore[no-untyped-def]
        desc = (m.group("desc") or "").strip()
        epoch = None
        if desc:
            em = _EPOCH_DESC.match(desc)
            if em is None:
                return None  # a validation / test / data loading bar, not training progress
            epoch = int(em.group("epoch"))
        a: dict[str, Any] = {"framework": "lightning" if desc else "tqdm", "step": int(m.group("n"))}
        if m.group("total") != "?":
            a["total"] = int(m.group("total"))
        if epoch is not None:
            a["epoch"], a["batch"] = epoch, int(m.group("n"))
        rate = _num(m.group("rate")) if m.group("rate") not in (None, "?") else None
        if rate:
            a["step_ms"] = round(1000.0 / rate, 3) if m.group("unit") == "it/s" else round(rate * 1000.0, 3)
        for item in (m.group("post") or "").split(", "):
            k, eq, v = item.rpartition("=")
            k = k.strip(", ")
            if not eq or not k:
                continue
            if k in ("loss", "train_loss", "reduced_train_loss"):
                a["loss"] = _num(v)
            elif k == "global_step":
                a["framework"] = "nemo"
                a["step"] = _int(v) if _int(v) is not None else a["step"]
            elif k == "train_step_timing in s":
                a["framework"] = "nemo"
                sec = _num(v)
                if sec is not None:
                    a["step_ms"] = round(sec * 1000.0, 3)
            elif k == "consumed_samples":
                a["consumed_samples"] = _int(v)
            elif k == "lr":
                a["lr"] = _num(v)
        return a

    def _ds_timers(self, n: int, rest: str, st: _Stream) -> None:
        vals = {mm.group("k").strip(): float(mm.group("v")) for mm in _DS_TIMER_ITEM.finditer(rest)}
        parts = [vals[k] for k in ("fwd", "forward", "bwd", "backward", "step") if k in vals]
        p = st.pending
        if parts and p is not None and p.attrs.get("framework") == "deepspeed" and n - p.line <= MERGE_LINES:
            p.attrs.setdefault("step_ms", round(sum(parts), 3))

    def _add_step(self, st: _Stream, row: _Row) -> None:
        a = row.attrs
        p = st.pending
        # one step printed by several calls (DeepSpeed step= then global_step=; the HF Trainer's
        # log dict after its bar): one row
        same_fw = p is not None and (p.attrs.get("framework") == a.get("framework")
                                     or (p.attrs.get("framework") == "tqdm" and a.get("framework") == "hf_trainer"))
        if p is not None and same_fw and p.attrs.get("step") == a.get("step") \
                and a.get("step") is not None and row.line - p.line <= MERGE_LINES:
            if a.get("framework") == "hf_trainer":
                p.attrs["framework"] = st.framework = "hf_trainer"
            for k, v in a.items():
                p.attrs.setdefault(k, v)
            if p.time is None and row.time is not None:
                p.time, p.tq = row.time, row.tq
            # the step's second line came after a save (nanoGPT's "step N: train loss" eval line, the save,
            # then "iter N: loss"): training went on past the save
            self._implied_save_ends(st, row)
            return
        # a tqdm bar re-drawn without progress is not a new step
        if p is not None and a.get("framework") in ("tqdm", "lightning", "nemo") and p.attrs.get("step") == a.get("step") \
                and p.attrs.get("framework") == a.get("framework") and p.attrs.get("epoch") == a.get("epoch"):
            return
        if p is not None:
            st.series.add(p)
        st.pending = row
        if a.get("step") is not None:
            st.last_step = a["step"]
        st.framework = a.get("framework")
        self._implied_save_ends(st, row)

    def _implied_save_ends(self, st: _Stream, row: _Row, why: str | None = None) -> None:
        # a save that prints no end returned if training went on (a step line, or the end of training)
        if st.open_saves:
            still = []
            implied = [s for s in st.open_saves if s.attrs.pop("_implied_ok", False) and s.line < row.line]
            for s in st.open_saves:
                if s not in implied:
                    still.append(s)
            if implied:
                s0 = implied[-1]
                attrs = {"phase": "end", "framework": s0.attrs.get("framework"), "implied": True,
                         "evidence": why or f"training step at line {row.line}"}
                for k in ("iteration", "step", "path", "tag"):
                    if k in s0.attrs:
                        attrs[k] = s0.attrs[k]
                # the save's identity when the step line has none (nanoGPT's save is rank 0's by who prints)
                ident = (row.rank, row.local_rank, row.host) if row.rank is not None or row.local_rank is not None \
                    else (s0.rank, s0.local_rank, row.host or s0.host)
                self.out.append(_Row(Kind.CHECKPOINT, row.line, f"checkpoint save returned (training went on): {s0.message[:160]}",
                                     attrs, row.time, row.tq, *ident, task=row.task))
            st.open_saves = still

    # -- checkpoints -----------------------------------------------------------------------------
    def _checkpoint(self, n: int, msg: str, st: _Stream, base: dict[str, Any]) -> bool:
        for fw, phase, rx, implied_ok in _CKPT:
            m = rx.search(msg)
            if m is None:
                continue
            g = m.groupdict()
            attrs: dict[str, Any] = {"phase": phase, "framework": fw}
            if g.get("it"):
                attrs["iteration"] = int(g["it"])
            if g.get("step"):
                attrs["step"] = int(g["step"])
            if g.get("path"):
                attrs["path"] = g["path"]
            if g.get("tag"):
                attrs["tag"] = g["tag"]
            if g.get("fmt"):
                attrs["format"] = g["fmt"]
            if g.get("sec"):
                attrs["duration_s"] = float(g["sec"])
            if g.get("ep"):
                attrs["epoch"] = int(g["ep"])
            if "iteration" not in attrs and "step" not in attrs:
                sm = _STEP_IN_PATH.search(attrs.get("path") or attrs.get("tag") or "")
                if sm:
                    attrs["step"] = int(sm.group("n"))
                elif st.last_step is not None:
                    attrs["step"], attrs["step_from"] = st.last_step, "last_step"
            if fw == "megatron" and st.framework == "nemo":
                attrs["framework"] = "nemo"  # NeMo's io/pl.py prints Megatron's wording
            row = _Row(Kind.CHECKPOINT, n, msg[:EXCERPT], attrs, **base)
            if fw == "nanogpt" and row.rank is None and row.local_rank is None:
                # nanoGPT prints only `if master_process` (master_process = ddp_rank == 0): global rank 0's save
                row.rank, attrs["rank_from"] = 0, "nanoGPT's master process"
            self.out.append(row)
            if phase == "start":
                if implied_ok:
                    row.attrs["_implied_ok"] = True
                st.open_saves.append(row)
            elif st.open_saves:
                st.open_saves = []
            elif base["rank"] is None and base["local_rank"] is None and base["task"] is None and (owner := self._save_owner(attrs, st)) is not None:
                # An end printed without any identity (DeepSpeed's "is ready now!" is a plain
                # logger.info) that names the save one other rank of this file opened: that rank's.
                row.rank, row.local_rank, row.host, row.task = owner.rank, owner.local_rank, owner.host, owner.task
                attrs["rank_from"] = "matching start"
                owner.open_saves = []
            return True
        return False

    def _save_owner(self, attrs: dict[str, Any], st: _Stream) -> _Stream | None:
        keys = [(k, attrs[k]) for k in ("tag", "iteration", "path") if k in attrs]
        if not keys:
            return None
        owners = [o for o in self.streams.values() if o is not st and o.open_saves
                  and any(s.attrs.get(k) == v for s in o.open_saves for k, v in keys)]
        return owners[0] if len(owners) == 1 else None

    # -- errors ----------------------------------------------------------------------------------
    def _error(self, n: int, raw: str, msg: str, hdr: _Line, st: _Stream, base: dict[str, Any]) -> None:
        if self.errors >= MAX_ERRORS:
            return
        if self._others is None:
            from crashscope import catalogs
            from crashscope.sources import LINE_SOURCES

            # The catalog's prefilter is a trie of literals: the catalogs' stdlib ``re`` copy
            # (built for their own matching) says the same as ``regex`` and compiles 4x faster.
            # The others: the stdlib's engine too, as the ingest splits its hits by source with
            # (``ingest._PER_SOURCE``), whose compiled copies ``re``'s cache hands back here
            # for nothing (``regex`` compiled them again: 0.03 s of a 12-file job).
            self._others = [_CatalogReads(catalogs.load()) if s.name == "catalog" else compile_pattern(s.prefilter)
                            for s in LINE_SOURCES if s.name != "applog"]
        sig = hdr.level + ":" + regex.sub(r"\d+", "#", msg[:120])
        if any(rx.search(raw) for rx in self._others):
            # A traceback, NCCL or c10 line: its own source reports it. The stamp is kept as an
            # info anchor, so the unstamped traceback lines after it get this line's time.
            if hdr.time is not None and self.error_sigs.get("anchor:" + sig, 0) < MAX_ERRORS_PER_SIGNATURE:
                self.error_sigs["anchor:" + sig] = self.error_sigs.get("anchor:" + sig, 0) + 1
                self.errors += 1
                self.out.append(_Row(Kind.LOG_ERROR, n, msg[:EXCERPT], {"anchor": True}, severity=Severity.INFO, **base))
            return
        seen = self.error_sigs.get(sig, 0)
        if seen >= MAX_ERRORS_PER_SIGNATURE:
            return
        self.error_sigs[sig] = seen + 1
        self.errors += 1
        lvl = hdr.level or "ERROR"
        attrs = {"level": {"E": "ERROR", "C": "CRITICAL", "F": "FATAL"}.get(lvl, lvl)}
        if hdr.logger:
            attrs["logger"] = hdr.logger
        self.out.append(_Row(Kind.LOG_ERROR, n, msg[:EXCERPT], attrs, severity=_SEV.get(lvl, Severity.ERROR), **base))

    # -- end of file ------------------------------------------------------------------------------
    def finish(self) -> None:
        for st in self.streams.values():
            if st.pending is not None:
                st.series.add(st.pending)
                st.pending = None
            for r in st.series.rows():
                self.out.append(r)
            for s in st.open_saves:
                s.attrs.pop("_implied_ok", None)
            if st.last_time is not None:
                attrs: dict[str, Any] = {"first_time": _iso(st.first_time), "last_time": _iso(st.last_time),
                                         "lines": st.lines, "stamped": st.stamped, "last_message": st.last_message,
                                         "steps": st.series.count}
                if st.last_step is not None:
                    attrs["last_step"] = st.last_step
                if st.framework:
                    attrs["framework"] = st.framework
                if st.task is not None:
                    attrs["srun_task"] = st.task
                if len(st.pids) == 1:
                    attrs["pid"] = next(iter(st.pids))
                who = _who(st)
                self.out.append(_Row(Kind.ACTIVITY, st.last_line, f"last time-stamped line of {who}: {st.last_message[:160]}",
                                     attrs, st.last_time, st.last_tq, st.rank, st.local_rank, st.host, task=st.task))
        for r in self.out:
            r.attrs.pop("_implied_ok", None)


class HeaderReader:
    """What the header of one logging record says, for a source whose lines continue such a
    record: a multi-line message (``logger.error("failed: %s", exc)`` with an exception text of
    several lines) prints its header, time and rank field once, on its first line only."""

    def __init__(self, ctx: ParseContext):
        self._parser = _Parser(ctx)

    def read(self, text: str) -> tuple[bool, int | None, int | None, Any]:
        """``(starts_record, rank, time, time_quality)`` of one line, launcher prefixes stripped:
        whether it starts a record (a time stamp or a level header of its own), the rank its
        message names first (``[rank 1/4]``, ``rank=1``, ...) and its time."""
        seg = text.rsplit("\r", 1)[-1]
        seg = _ANSI.sub("", seg) if "\x1b" in seg else seg
        hdr, _, rank, _ = self._parser._identity(self._parser._header(seg))
        if hdr.time is None and hdr.level is None:
            return False, None, None, None
        return True, rank, hdr.time, hdr.tq


def _json_record(s: str, ctx: ParseContext) -> _Line | None:
    """The header of a JSON-lines logging record: its time (ISO text, or epoch seconds), level, logger,
    message, and the rank and host fields when it has them; None when the line is no such record (no
    JSON object, or neither a time nor a level in it). loguru's ``serialize=True`` nests the record
    under ``"record"`` (``time.timestamp``, ``level.name``, ``message``, ``extra``)."""
    if not s.endswith("}") or len(s) > 65536:
        return None
    try:
        rec = json.loads(s)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    if isinstance(rec.get("record"), dict):  # loguru serialize=True
        inner = rec["record"]
        tm, lv = inner.get("time"), inner.get("level")
        extra = inner.get("extra") if isinstance(inner.get("extra"), dict) else {}
        rec = {**extra, "timestamp": tm.get("timestamp") if isinstance(tm, dict) else tm,
               "level": lv.get("name") if isinstance(lv, dict) else lv, "message": inner.get("message"),
               "name": inner.get("name")}
    t = tq = None
    for k in _JSON_TIME_KEYS:
        v = rec.get(k)
        if isinstance(v, str) and v[:1].isdigit():
            t, tq = iso_to_ns(v, ctx)
            if t is None:
                tq = None
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and 1e9 <= v < 7.2e9:  # epoch seconds
            t, tq = round(v * 1_000_000) * 1000, TimeQuality.EXACT  # a float holds microseconds, not ns
        if t is not None:
            break
    level = next((v for k in ("level", "levelname", "severity", "lvl") if isinstance(v := rec.get(k), str)), None)
    level = level.upper() if level else None
    if level not in _SEV:
        level = None
    if t is None and level is None:
        return None
    msg = next((v for k in ("msg", "message", "event", "text") if isinstance(v := rec.get(k), str)), "")
    logger = next((v for k in ("name", "logger", "logger_name") if isinstance(v := rec.get(k), str)), None)
    rank = next((v for k in ("rank", "global_rank", "RANK") if isinstance(v := rec.get(k), int) and not isinstance(v, bool)
                 and 0 <= v < 1_000_000), None)
    host = next((v for k in ("host", "hostname", "node") if isinstance(v := rec.get(k), str) and v), None)
    return _Line(msg, t, tq, "WARNING" if level == "WARN" else level, logger, rank=rank, host=host)


def _iso(t: int | None) -> str | None:
    if t is None:
        return None
    from datetime import datetime, timezone

    s, ns = divmod(t, 1_000_000_000)
    return datetime.fromtimestamp(s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


SOURCE = ApplogSource()
