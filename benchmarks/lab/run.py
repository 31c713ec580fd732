#!/usr/bin/env python3
"""Recorded-incident lab: real Slurm + real torch.distributed (gloo) + faults injected from outside.

    python benchmarks/lab/run.py [--only NAME[,NAME...]] [--out fixtures/recorded] [--keep-slurm]

Starts the throw-away Slurm of benchmarks/lab/slurm.sh (slurmctld, slurmd n1/n2, slurmdbd, MariaDB
on 127.0.0.1), runs every scenario below as a real `sbatch` job (4 ranks, 2 per node, under
`srun` one task per rank or `srun ... torchrun --nnodes 2 --nproc-per-node 2`), injects the fault
from outside at a chosen moment, waits for the job to end and copies the job's whole directory
plus Slurm's records into <out>/<id>/ with a truth.json. Every daemon it started is stopped by pid
at the end (try/finally, also on Ctrl-C); iptables rules and cgroups it made are removed.

Slow (about 40-50 minutes for all scenarios on 2 cores); NOT run in CI. Needs root.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAB = Path(os.environ.get("LAB_BASE", "/tmp/crashscope-lab"))
SLURM_BASE = LAB / "slurm"
JOBS = LAB / "jobs"
PY = str(REPO / ".venv" / "bin" / "python")
TORCHRUN = str(REPO / ".venv" / "bin" / "torchrun")
TRAIN = str(HERE / "train.py")
TRAIN_OTHER = str(HERE / "train_other.py")
TRAIN_THIRD = str(HERE / "train_third.py")
TRAIN_FOURTH = str(HERE / "train_fourth.py")
TRAIN_FIFTH = str(HERE / "train_fifth.py")
ENV = dict(os.environ, SLURM_CONF=str(SLURM_BASE / "etc" / "slurm.conf"))
MEMCG_PARENT = None  # set in main(): our own memory cgroup (cgroup v1 here)
CPUCG_PARENT = Path("/sys/fs/cgroup/cpu")
IPT_CHAIN = "CSLAB"
PG_TIMEOUT = 30
RANK_NODE = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def S(kind, launcher, cause, ranks=(), **kw):
    return dict(kind=kind, launcher=launcher, cause=cause, ranks=list(ranks), **kw)


# id -> scenario. ranks = culprit ranks (rank->node: 0,1 on n1; 2,3 on n2; checked against the logs).
SCENARIOS = {
    "sigstop_rank3_srun": S("sigstop", "srun", "node_failure", [3], at=12, fmt="megatron"),
    "sigstop_rank1_torchrun": S("sigstop", "torchrun", "node_failure", [1], at=12, fmt="plain", ddp=True),
    "sigstop_rank0_srun": S("sigstop", "srun", "node_failure", [0], at=15, fmt="hf"),
    "sigstop_late_cont_rank2_srun": S("sigstop_late_cont", "srun", "node_failure", [2], at=12, fmt="megatron"),
    "sigstop_late_cont_rank3_torchrun": S("sigstop_late_cont", "torchrun", "node_failure", [3], at=12, fmt="hf"),
    "nodekill_n2_srun": S("nodekill", "srun", "node_failure", [2, 3], at=12, fmt="megatron"),
    "nodekill_n2_torchrun": S("nodekill", "torchrun", "node_failure", [2, 3], at=12, fmt="plain", ddp=True),
    "nodekill_n1_srun": S("nodekill", "srun", "node_failure", [0, 1], at=15, fmt="hf"),
    "iptables_rank3_srun": S("iptables", "srun", "fabric_timeout", [3], at=12, fmt="megatron"),
    "iptables_rank1_torchrun": S("iptables", "torchrun", "fabric_timeout", [1], at=12, fmt="hf", ddp=True),
    "iptables_rank2_srun": S("iptables", "srun", "fabric_timeout", [2], at=18, fmt="plain"),
    "ckpt_fifo_rank0_srun": S("ckpt_fifo", "srun", "storage_stall", [0], at=20, fmt="megatron"),
    "ckpt_fifo_rank0_torchrun": S("ckpt_fifo", "torchrun", "storage_stall", [0], at=20, fmt="hf"),
    "oom_rank3_srun": S("oom", "srun", "oom", [3], at=8, fmt="megatron"),
    "oom_rank2_torchrun": S("oom", "torchrun", "oom", [2], at=8, fmt="plain"),
    "cpu_starve_mild_rank3_srun": S("cpu_starve", "srun", "gpu_throttle", [3], at=10, fmt="megatron",
                                    quota_us=5000, period_us=100000, iters=40),
    "cpu_starve_hard_rank2_srun": S("cpu_starve", "srun", "gpu_throttle", [2], at=12, fmt="plain",
                                    quota_us=1000, period_us=1000000, hog=True),
    "cpu_starve_hard_rank1_torchrun": S("cpu_starve", "torchrun", "gpu_throttle", [1], at=12, fmt="hf",
                                        quota_us=1000, period_us=1000000, hog=True),
    "scancel_srun": S("scancel", "srun", "preemption", at=12, fmt="megatron"),
    "scancel_torchrun": S("scancel", "torchrun", "preemption", at=12, fmt="hf"),
    "preempt_cancel_srun": S("preempt_cancel", "srun", "preemption", at=12, fmt="megatron"),
    "preempt_cancel_torchrun": S("preempt_cancel", "torchrun", "preemption", at=12, fmt="plain"),
    "preempt_requeue_srun": S("preempt_requeue", "srun", "preemption", at=14, fmt="megatron", iters=40,
                              save=10),
    "timelimit_srun": S("timelimit", "srun", "time_limit", fmt="megatron", iters=100000, save=50),
    "timelimit_torchrun": S("timelimit", "torchrun", "time_limit", fmt="hf", iters=100000, save=50),
    "exception_rank3_srun": S("exception", "srun", "software_error", [3], at=15, fmt="megatron"),
    "exception_rank3_torchrun": S("exception", "torchrun", "software_error", [3], at=15, fmt="hf"),
    "exception_rank1_srun": S("exception", "srun", "software_error", [1], at=25, fmt="plain"),
    "shape_rank2_srun": S("shape", "srun", "software_error", [2], at=14, fmt="megatron"),
    "shape_rank1_torchrun": S("shape", "torchrun", "software_error", [1], at=14, fmt="plain"),
    "collmismatch_rank3_srun": S("collmismatch", "srun", "software_error", [3], at=16, fmt="hf"),
    "collmismatch_rank0_torchrun": S("collmismatch", "torchrun", "software_error", [0], at=16, fmt="megatron"),
    "completed_srun": S("completed", "srun", "none", fmt="megatron"),
    "completed_torchrun": S("completed", "torchrun", "none", fmt="hf", ddp=True),
}

# Held-out round (recorded before any analysis change for them): each changes something a rule fitted to
# the first 34 could depend on -- the culprit's rank and node, the launcher, TORCH_DISTRIBUTED_DEBUG
# (debug=None: not set at all; "INFO"; DDP forces INFO), the progress format, the fault time, OOM by
# RLIMIT_AS (prlimit) instead of a memory cgroup, a checkpoint stall at another iteration, REQUEUE under
# torchrun, and the time limit striking while a (slow) checkpoint write is in flight.
HELD_OUT = {
    "sigstop_rank2_nodebug_torchrun": S("sigstop", "torchrun", "node_failure", [2], at=20, fmt="megatron",
                                        debug=None),
    "sigstop_rank1_ddp_srun": S("sigstop", "srun", "node_failure", [1], at=9, fmt="hf", ddp=True),
    "nodekill_n1_torchrun": S("nodekill", "torchrun", "node_failure", [0, 1], at=10, fmt="megatron"),
    "nodekill_n2_nodebug_srun": S("nodekill", "srun", "node_failure", [2, 3], at=22, fmt="plain", debug=None),
    "iptables_rank0_srun": S("iptables", "srun", "fabric_timeout", [0], at=10, fmt="hf"),
    "iptables_rank2_nodebug_torchrun": S("iptables", "torchrun", "fabric_timeout", [2], at=16, fmt="megatron",
                                         debug=None),
    "iptables_rank1_info_srun": S("iptables", "srun", "fabric_timeout", [1], at=14, fmt="plain", debug="INFO"),
    "oom_ulimit_rank1_srun": S("oom", "srun", "oom", [1], at=8, fmt="hf", limit="ulimit"),
    "oom_cgroup_rank0_nodebug_torchrun": S("oom", "torchrun", "oom", [0], at=10, fmt="megatron", debug=None),
    "ckpt_fifo_iter10_nodebug_torchrun": S("ckpt_fifo", "torchrun", "storage_stall", [0], at=10, fmt="plain",
                                           save=10, debug=None),
    "ckpt_fifo_iter30_ddp_srun": S("ckpt_fifo", "srun", "storage_stall", [0], at=30, fmt="hf", save=15,
                                   ddp=True),
    "preempt_requeue_torchrun": S("preempt_requeue", "torchrun", "preemption", at=14, fmt="hf", iters=40,
                                  save=10),
    "timelimit_ckpt_inflight_srun": S("timelimit", "srun", "time_limit", fmt="plain", iters=100000, save=5,
                                      save_slow=20, debug=None),
    "cpu_starve_mild_rank0_torchrun": S("cpu_starve", "torchrun", "gpu_throttle", [0], at=10, fmt="hf",
                                        quota_us=5000, period_us=100000, iters=40),
    "exception_rank0_ddp_torchrun": S("exception", "torchrun", "software_error", [0], at=12, fmt="plain",
                                      ddp=True),
    "shape_rank3_nodebug_srun": S("shape", "srun", "software_error", [3], at=11, fmt="hf", debug=None),
    "collmismatch_rank1_nodebug_srun": S("collmismatch", "srun", "software_error", [1], at=13, fmt="plain",
                                         debug=None),
    "completed_nodebug_srun": S("completed", "srun", "none", fmt="plain", debug=None),
}
# Second held-out round: recorded after the first round's fixes (silent-ranks' cut-off rules), to see
# whether they hold on cases they were not written from (the cut rank elsewhere in the ring, rank 0 --
# under srun also the TCPStore's host -- without DETAIL, the coordinator under torchrun, a stopped rank
# without DETAIL as the control that must stay node_failure).
HELD_OUT_2 = {
    "iptables_rank3_nodebug_srun": S("iptables", "srun", "fabric_timeout", [3], at=11, fmt="plain", debug=None),
    "iptables_rank0_nodebug_srun": S("iptables", "srun", "fabric_timeout", [0], at=13, fmt="megatron", debug=None),
    "iptables_rank0_torchrun": S("iptables", "torchrun", "fabric_timeout", [0], at=9, fmt="megatron"),
    "iptables_rank3_ddp_torchrun": S("iptables", "torchrun", "fabric_timeout", [3], at=15, fmt="hf", ddp=True),
    "sigstop_rank3_nodebug_srun": S("sigstop", "srun", "node_failure", [3], at=17, fmt="hf", debug=None),
}
# Third held-out round (iptables only): recorded to test, on runs nobody had looked at, what gloo's ring
# allreduce lets the waits say about the cut rank (docs/lab.md, "The iptables recordings"): the cut rank,
# the launcher, DDP vs a flat all_reduce, TORCH_DISTRIBUTED_DEBUG and the fault time all vary.
HELD_OUT_3 = {
    "iptables_rank1_nodebug_torchrun": S("iptables", "torchrun", "fabric_timeout", [1], at=20, fmt="plain",
                                         debug=None),
    "iptables_rank2_info_srun": S("iptables", "srun", "fabric_timeout", [2], at=7, fmt="hf", debug="INFO"),
    "iptables_rank0_ddp_srun": S("iptables", "srun", "fabric_timeout", [0], at=17, fmt="megatron", ddp=True),
    "iptables_rank3_nodebug_torchrun": S("iptables", "torchrun", "fabric_timeout", [3], at=23, fmt="megatron",
                                         debug=None),
    "iptables_rank1_ddp_nodebug_srun": S("iptables", "srun", "fabric_timeout", [1], at=13, fmt="plain",
                                         ddp=True, debug=None),
}
# Fourth held-out round: every fault kind but iptables had had only one or two rounds of variation. Each
# run changes what a rule fitted to the 62 could lean on: the world size (world=3: ranks 0,1 on n1 and rank 2
# alone on n2; world=6: --ntasks=6 --overcommit, three ranks per node on the 2-CPU nodes; --ntasks-per-node=3
# is refused even with --overcommit: 'Requested node configuration is not available'), the culprit's rank
# and node, the launcher, DDP, TORCH_DISTRIBUTED_DEBUG, the progress format, the fault time, and one new
# fault: scancel of the job's step only (the batch script lives on and exits with srun's code).
HELD_OUT_4 = {
    "sigstop_rank4_w6_srun": S("sigstop", "srun", "node_failure", [4], at=9, fmt="plain", world=6),
    "sigstop_late_cont_rank1_nodebug_srun": S("sigstop_late_cont", "srun", "node_failure", [1], at=16,
                                              fmt="megatron", debug=None),
    "nodekill_n1_ddp_torchrun": S("nodekill", "torchrun", "node_failure", [0, 1], at=13, fmt="hf", ddp=True),
    "ckpt_fifo_iter16_w3_info_srun": S("ckpt_fifo", "srun", "storage_stall", [0], at=16, fmt="megatron",
                                       save=8, debug="INFO", world=3),
    "oom_ulimit_rank2_torchrun": S("oom", "torchrun", "oom", [2], at=9, fmt="megatron", limit="ulimit"),
    "shape_rank0_info_torchrun": S("shape", "torchrun", "software_error", [0], at=12, fmt="hf", debug="INFO"),
    "exception_rank2_w3_srun": S("exception", "srun", "software_error", [2], at=11, fmt="hf", world=3),
    "timelimit_ddp_nodebug_torchrun": S("timelimit", "torchrun", "time_limit", fmt="plain", iters=100000,
                                        save=50, ddp=True, debug=None),
    "completed_ddp_megatron_srun": S("completed", "srun", "none", fmt="megatron", ddp=True, iters=40),
    "scancel_step_torchrun": S("scancel_step", "torchrun", "preemption", at=14, fmt="plain", debug=None),
}
# Fifth round: the two readings added after round 4 (a rank that reads its peers' close seconds late was
# not waiting; a step cancelled at a user's request), on runs they were not written from.
HELD_OUT_5 = {
    "sigstop_late_cont_rank3_info_torchrun": S("sigstop_late_cont", "torchrun", "node_failure", [3], at=11,
                                               fmt="hf", debug="INFO"),
    "sigstop_late_cont_rank2_ddp_nodebug_srun": S("sigstop_late_cont", "srun", "node_failure", [2], at=14,
                                                  fmt="plain", ddp=True, debug=None),
    "scancel_step_w3_srun": S("scancel_step", "srun", "preemption", at=10, fmt="megatron", world=3),
}
# Sixth round: fault kinds and combinations recorded once or never, on knobs a rule fitted to the 75 could
# lean on: a late SIGCONT under torchrun with DDP, a node killed while rank 0's (slow) checkpoint write is in
# flight (during_save: the kill waits for rank 0's 'saving checkpoint' line), an exception on the last rank of
# 6 (the one that prints Megatron's progress lines), RLIMIT_AS of rank 0 under torchrun, a REQUEUE preemption
# under torchrun without debug, a time limit mid-checkpoint under torchrun, a hang in a broadcast (train.py
# --broadcast-batch: rank 0 broadcasts each iteration's batch seed first, as Megatron's broadcast_data does;
# the stopped rank is that broadcast's root), a straggler in a completed job of 3 ranks (the slow rank alone on
# n2), and two iptables cuts whose broken link can lie inside one node (world 6: ranks 0-2 on n1).
HELD_OUT_6 = {
    "sigstop_late_cont_rank1_ddp_torchrun": S("sigstop_late_cont", "torchrun", "node_failure", [1], at=17,
                                              fmt="megatron", ddp=True),
    "nodekill_n1_ckpt_info_torchrun": S("nodekill", "torchrun", "node_failure", [0, 1], at=15, fmt="hf", save=15,
                                        save_slow=10, debug="INFO", during_save=True),
    "exception_rank5_w6_nodebug_srun": S("exception", "srun", "software_error", [5], at=13, fmt="megatron",
                                         world=6, debug=None),
    "oom_ulimit_rank0_info_torchrun": S("oom", "torchrun", "oom", [0], at=11, fmt="plain", limit="ulimit",
                                        debug="INFO"),
    "preempt_requeue_nodebug_torchrun": S("preempt_requeue", "torchrun", "preemption", at=18, fmt="megatron",
                                          iters=40, save=10, debug=None),
    "timelimit_ckpt_inflight_info_torchrun": S("timelimit", "torchrun", "time_limit", fmt="megatron",
                                               iters=100000, save=5, save_slow=20, debug="INFO"),
    "sigstop_rank0_bcast_nodebug_srun": S("sigstop", "srun", "node_failure", [0], at=14, fmt="plain",
                                          bcast=True, debug=None),
    "cpu_starve_mild_rank2_w3_srun": S("cpu_starve", "srun", "gpu_throttle", [2], at=10, fmt="hf",
                                       quota_us=5000, period_us=100000, iters=40, world=3),
    "iptables_rank1_w6_nodebug_srun": S("iptables", "srun", "fabric_timeout", [1], at=12, fmt="plain", world=6,
                                        debug=None),
    "iptables_rank2_info_torchrun": S("iptables", "torchrun", "fabric_timeout", [2], at=19, fmt="hf",
                                      debug="INFO"),
}
# Seventh round (3 runs): a straggler in a completed job WITHOUT DETAIL (no 'Running collective' lines, so no
# arrival order; steps are synchronous, so every rank prints the same step time), and a clean control.
HELD_OUT_7 = {
    "cpu_starve_mild_rank1_nodebug_srun": S("cpu_starve", "srun", "gpu_throttle", [1], at=12, fmt="megatron",
                                            quota_us=5000, period_us=100000, iters=40, debug=None),
    "cpu_starve_mild_rank3_info_torchrun": S("cpu_starve", "torchrun", "gpu_throttle", [3], at=9, fmt="hf",
                                             quota_us=5000, period_us=100000, iters=40, debug="INFO"),
    "completed_nodebug_torchrun": S("completed", "torchrun", "none", fmt="plain", iters=40, debug=None),
    # the two above barely slowed on a machine at load 10-12 (1.1x, 1.4x; check.py: the first 'did not slow down'):
    # the same at a 2% quota
    "cpu_starve_q2_rank1_nodebug_srun": S("cpu_starve", "srun", "gpu_throttle", [1], at=12, fmt="megatron",
                                          quota_us=2000, period_us=100000, iters=40, debug=None),
    "cpu_starve_q2_rank3_info_torchrun": S("cpu_starve", "torchrun", "gpu_throttle", [3], at=9, fmt="hf",
                                           quota_us=2000, period_us=100000, iters=40, debug="INFO"),
}
# Eighth round: the receiving-end reading of the iptables cuts (docs/lab.md, "The iptables recordings": the
# rank that sends to the cut rank blocks on its first send, the cut rank on its receive), on knobs it could
# lean on: world 3 (rank 2 alone on n2; rank 0, the TCPStore host under srun), world 6 (the last rank, whose
# ring neighbours are rank 4 and rank 0 across the nodes), DDP without debug under torchrun, rank 0 under
# torchrun without debug, a late iteration; and two controls of other kinds (a stopped rank without DETAIL,
# a clean run with INFO).
HELD_OUT_8 = {
    "iptables_rank2_w3_nodebug_srun": S("iptables", "srun", "fabric_timeout", [2], at=11, fmt="plain", world=3,
                                        debug=None),
    "iptables_rank0_w3_info_srun": S("iptables", "srun", "fabric_timeout", [0], at=15, fmt="hf", world=3,
                                     debug="INFO"),
    "iptables_rank5_w6_info_srun": S("iptables", "srun", "fabric_timeout", [5], at=9, fmt="megatron", world=6,
                                     debug="INFO"),
    "iptables_rank2_ddp_nodebug_torchrun": S("iptables", "torchrun", "fabric_timeout", [2], at=21, fmt="plain",
                                             ddp=True, debug=None),
    "iptables_rank0_nodebug_torchrun": S("iptables", "torchrun", "fabric_timeout", [0], at=14, fmt="hf", debug=None),
    "iptables_rank3_info_srun": S("iptables", "srun", "fabric_timeout", [3], at=26, fmt="megatron", debug="INFO"),
    "sigstop_rank1_nodebug_torchrun": S("sigstop", "torchrun", "node_failure", [1], at=12, fmt="megatron",
                                        debug=None),
    "completed_info_srun": S("completed", "srun", "none", fmt="hf", iters=40, debug="INFO"),
}
# Ninth round: a second program (train_other.py, nanoGPT-style: only rank 0 prints, plain `print`, no
# timestamps, no rank prefixes, DDP without TORCH_DISTRIBUTED_DEBUG), launched as users launch it: srun one
# task per rank with per-task output files (`srun -o slurm-%j-%t.out`), or torchrun with the c10d
# rendezvous (node ranks in join order, so which ranks run on which node is read from the processes).
# end="echo": the batch script ends with `echo "END TIME: ..."` and so exits 0 whatever srun returned
# (the job reads COMPLETED); end="rc": it exits with srun's code. kill=False: srun without -K.
HELD_OUT_9 = {
    "exception_rank2_other_srun": S("exception", "srun", "software_error", [2], at=14, prog="other", fmt="nanogpt",
                                    end="echo", kill=False),
    "exception_rank1_other_torchrun": S("exception", "torchrun", "software_error", [1], at=20, prog="other", fmt="nanogpt",
                                        end="rc"),
    "nodekill_n1_other_torchrun": S("nodekill", "torchrun", "node_failure", [], at=12, prog="other", fmt="nanogpt",
                                    end="echo", node="n1"),
    "sigstop_rank2_other_srun": S("sigstop", "srun", "node_failure", [2], at=16, prog="other", fmt="nanogpt", end="rc"),
    "oom_cgroup_rank1_other_srun": S("oom", "srun", "oom", [1], at=8, prog="other", fmt="nanogpt", end="echo", kill=False),
    "oom_ulimit_rank3_other_torchrun": S("oom", "torchrun", "oom", [3], at=9, prog="other", fmt="nanogpt", end="rc",
                                         limit="ulimit", per_task=True),
    "ckpt_fifo_other_torchrun": S("ckpt_fifo", "torchrun", "storage_stall", [0], at=10, prog="other", fmt="nanogpt",
                                  end="echo", save=10),
    "scancel_other_srun": S("scancel", "srun", "preemption", at=13, prog="other", fmt="nanogpt", end="rc"),
    "timelimit_other_torchrun": S("timelimit", "torchrun", "time_limit", prog="other", fmt="nanogpt", end="echo",
                                  iters=100000, save=50),
    "completed_other_srun": S("completed", "srun", "none", prog="other", fmt="nanogpt", end="echo", kill=False, iters=40),
    "iptables_rank1_other_srun": S("iptables", "srun", "fabric_timeout", [1], at=11, prog="other", fmt="nanogpt", end="rc",
                                   kill=False),
}
# Tenth round: fault kinds the lab never had. uneven: the target rank's data shard is shorter, so its
# loop ends early and it goes on to the final barrier while its peers are still in the next step's
# all_reduce (the uneven-inputs hang of DDP without Join); with DETAIL the ProcessGroupWrapper reports
# the mismatch, without it everyone waits out the timeout. enospc: the checkpoint directory is a tmpfs
# too small for a second checkpoint, so rank 0's torch.save fails with the real ENOSPC error.
HELD_OUT_10 = {
    "uneven_rank2_srun": S("uneven", "srun", "software_error", [2], at=13, fmt="megatron"),
    "uneven_rank1_nodebug_torchrun": S("uneven", "torchrun", "software_error", [1], at=16, fmt="hf", debug=None),
    "uneven_rank3_nodebug_srun": S("uneven", "srun", "software_error", [3], at=11, fmt="plain", debug=None),
    "enospc_rank0_srun": S("enospc", "srun", "storage_stall", [0], fmt="megatron", save=10),
    "enospc_rank0_nodebug_torchrun": S("enospc", "torchrun", "storage_stall", [0], fmt="hf", save=10, debug=None),
    "enospc_rank0_ddp_srun": S("enospc", "srun", "storage_stall", [0], fmt="plain", save=10, ddp=True),
}
# Eleventh round: round 10's full disk under the second program (train_other.py: nanoGPT overwrites
# out/ckpt.pt at each eval; a 2 MiB tmpfs is too small for the first one; the save's error is an uncaught
# traceback on rank 0's stderr, no logging, no stamps).
HELD_OUT_11 = {
    "enospc_other_srun": S("enospc", "srun", "storage_stall", [0], prog="other", fmt="nanogpt", end="echo", save=10),
    "enospc_other_torchrun": S("enospc", "torchrun", "storage_stall", [0], prog="other", fmt="nanogpt", end="rc",
                               save=10),
}
# Twelfth round: a DataLoader worker killed by the kernel's OOM killer (the memory cgroup holds the
# worker, not the rank: the kernel names the worker's pid, the rank raises "DataLoader worker (pid(s) N)
# exited unexpectedly"), a rank that segfaults in native code (no traceback), and an uneven shard whose
# early rank simply exits 0 (its peers then lose their connections to it).
HELD_OUT_12 = {
    "loader_oom_rank1_srun": S("oom", "srun", "oom", [1], at=8, fmt="megatron", loader=True),
    "loader_oom_rank2_nodebug_torchrun": S("oom", "torchrun", "oom", [2], at=10, fmt="hf", loader=True, debug=None),
    "segv_rank3_srun": S("segv", "srun", "software_error", [3], at=12, fmt="plain"),
    "segv_rank0_nodebug_torchrun": S("segv", "torchrun", "software_error", [0], at=14, fmt="megatron", debug=None),
    "uneven_exit_rank2_nodebug_srun": S("uneven_exit", "srun", "software_error", [2], at=12, fmt="hf", debug=None),
}
# Thirteenth round: a node crash as Slurm sees one. nodekill kills a node's processes but leaves its slurmd
# up, so Slurm never fails the node; here the node's slurmd and the step's slurmstepd die with its ranks,
# slurmctld stops hearing from it, marks it DOWN after SlurmdTimeout (60 s) and ends the job NODE_FAIL.
HELD_OUT_13 = {
    "nodecrash_n2_srun": S("nodecrash", "srun", "node_failure", [2, 3], at=12, fmt="megatron"),
    "nodecrash_n2_nodebug_torchrun": S("nodecrash", "torchrun", "node_failure", [2, 3], at=14, fmt="hf", debug=None),
}
# Fourteenth round: a third program (train_third.py, Hydra/Lightning-style: key=value overrides, Hydra's
# `[%(asctime)s][%(name)s][%(levelname)s] - %(message)s` log lines in per-rank files the program writes itself,
# progress from rank 0 only as `Epoch e/E | Step s/S | loss=...`, env:// init with a 45 s timeout, DDP, a
# temp-file+rename checkpoint then a barrier, errors reported as Hydra's run_and_report does and sys.exit(1)),
# under `srun --label` (one task per rank) or `srun torchrun` with the c10d rendezvous, stdout and stderr in
# separate Slurm files (%x-%j.out / %x-%j.err).
HELD_OUT_14 = {
    "sigstop_rank2_third_srun": S("sigstop", "srun", "node_failure", [2], at=14, prog="third", fmt="hydra"),
    "nodekill_n1_third_torchrun": S("nodekill", "torchrun", "node_failure", [], at=12, prog="third", fmt="hydra",
                                    node="n1"),
    "ckpt_fifo_third_srun": S("ckpt_fifo", "srun", "storage_stall", [0], at=20, prog="third", fmt="hydra", save=20),
    "oom_cgroup_rank3_third_torchrun": S("oom", "torchrun", "oom", [3], at=8, prog="third", fmt="hydra"),
    "exception_rank1_third_srun": S("exception", "srun", "software_error", [1], at=16, prog="third", fmt="hydra"),
    "collmismatch_rank2_third_torchrun": S("collmismatch", "torchrun", "software_error", [2], at=13, prog="third",
                                           fmt="hydra"),
    "timelimit_third_srun": S("timelimit", "srun", "time_limit", prog="third", fmt="hydra", iters=100000, save=50),
    "preempt_cancel_third_torchrun": S("preempt_cancel", "torchrun", "preemption", at=12, prog="third", fmt="hydra"),
    "completed_third_srun": S("completed", "srun", "none", prog="third", fmt="hydra", iters=40),
    "enospc_third_torchrun": S("enospc", "torchrun", "storage_stall", [0], prog="third", fmt="hydra", save=20),
}
# Fifteenth round: a fourth program (train_fourth.py, DeepSpeed/Megatron-style: DeepSpeed's logger format
# `[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] msg` with `[Rank 0]` log_dist progress,
# untimed unflushed `[rank N]` prints (python without -u), a dp x tp mesh of dist.new_group sub-groups,
# torch.distributed.checkpoint (dcp.save) shards, a 40 s timeout, uncaught errors), all output in one
# slurm-%j.out, under `srun` (one task per rank) or `srun torchrun` (c10d).
HELD_OUT_15 = {
    "sigstop_rank1_fourth_srun": S("sigstop", "srun", "node_failure", [1], at=12, prog="fourth", fmt="deepspeed"),
    "exception_rank2_fourth_torchrun": S("exception", "torchrun", "software_error", [2], at=14, prog="fourth",
                                         fmt="deepspeed"),
    "oom_cgroup_rank3_fourth_srun": S("oom", "srun", "oom", [3], at=8, prog="fourth", fmt="deepspeed"),
    "nodekill_n2_fourth_srun": S("nodekill", "srun", "node_failure", [2, 3], at=12, prog="fourth", fmt="deepspeed"),
    "scancel_fourth_torchrun": S("scancel", "torchrun", "preemption", at=12, prog="fourth", fmt="deepspeed"),
    "completed_fourth_torchrun": S("completed", "torchrun", "none", prog="fourth", fmt="deepspeed", iters=40),
    "exception_rank0_fourth_srun": S("exception", "srun", "software_error", [0], at=17, prog="fourth",
                                     fmt="deepspeed"),
}
# Sixteenth round: a fifth program (train_fifth.py: configuration by environment variables, loguru's default console
# format on stderr, Lightning's tqdm training bar with carriage returns on rank 0's stdout, per-rank JSON-lines logs in
# $LOG_DIR, FSDP2 fully_shard on gloo, a 50 s timeout, a checkpoint thread writing torch.save + os.replace, @record),
# the batch's stdout and stderr split into logs/%x-%j.out and .err, under `srun --label` one task per rank or `srun
# torchrun` (c10d) with --max-restarts=1 and --tee=3: the program's faults recur on the restart, so the first attempt's
# failure is the first failure. Kinds rounds 14-15 did not run on a new program.
HELD_OUT_16 = {
    "exception_rank3_fifth_torchrun": S("exception", "torchrun", "software_error", [3], at=14, prog="fifth",
                                        fmt="loguru", save=10),
    "segv_rank1_fifth_torchrun": S("segv", "torchrun", "software_error", [1], at=13, prog="fifth", fmt="loguru",
                                   save=10),
    "sigstop_late_cont_rank2_fifth_srun": S("sigstop_late_cont", "srun", "node_failure", [2], at=12, prog="fifth",
                                            fmt="loguru"),
    "preempt_requeue_fifth_srun": S("preempt_requeue", "srun", "preemption", at=14, prog="fifth", fmt="loguru",
                                    iters=40, save=10),
    "timelimit_fifth_torchrun": S("timelimit", "torchrun", "time_limit", prog="fifth", fmt="loguru", iters=100000,
                                  save=50),
    "enospc_fifth_srun": S("enospc", "srun", "storage_stall", [0], prog="fifth", fmt="loguru", save=10),
    "oom_ulimit_rank2_fifth_srun": S("oom", "srun", "oom", [2], at=9, prog="fifth", fmt="loguru", limit="ulimit"),
    "nodekill_n2_fifth_srun": S("nodekill", "srun", "node_failure", [2, 3], at=12, prog="fifth", fmt="loguru"),
    "completed_fifth_torchrun": S("completed", "torchrun", "none", prog="fifth", fmt="loguru", iters=40),
}
HELD_OUT.update(HELD_OUT_2)
# --held-out-N flag -> its round's scenarios, and the round number truth.json records
ROUNDS = {1: HELD_OUT, 3: HELD_OUT_3, 4: HELD_OUT_4, 5: HELD_OUT_5, 6: HELD_OUT_6, 7: HELD_OUT_7,
          8: HELD_OUT_8, 9: HELD_OUT_9, 10: HELD_OUT_10, 11: HELD_OUT_11, 12: HELD_OUT_12,
          13: HELD_OUT_13, 14: HELD_OUT_14, 15: HELD_OUT_15, 16: HELD_OUT_16}


def round_of(sid: str) -> int | None:
    if sid in HELD_OUT_2:
        return 2
    return next((n for n, r in ROUNDS.items() if sid in r), None)


SCENARIOS.update(HELD_OUT)
SCENARIOS.update(HELD_OUT_3)  # scored before being read, then checked in (docs/lab.md, third round)
SCENARIOS.update(HELD_OUT_4)
SCENARIOS.update(HELD_OUT_5)
SCENARIOS.update(HELD_OUT_6)
SCENARIOS.update(HELD_OUT_7)
SCENARIOS.update(HELD_OUT_8)
SCENARIOS.update(HELD_OUT_9)
SCENARIOS.update(HELD_OUT_10)
SCENARIOS.update(HELD_OUT_11)
SCENARIOS.update(HELD_OUT_12)
SCENARIOS.update(HELD_OUT_13)
SCENARIOS.update(HELD_OUT_14)
SCENARIOS.update(HELD_OUT_15)
SCENARIOS.update(HELD_OUT_16)


def world_of(sc) -> int:
    return int(sc.get("world", 4))


def rank_node(sc, k: int) -> str:
    """Node of rank k under Slurm's block distribution: world 4 and 6 put world/2 ranks on each node,
    world 3 (--ntasks=3 on two 2-CPU nodes) ranks 0,1 on n1 and rank 2 on n2."""
    w = world_of(sc)
    per = 2 if w == 3 else w // 2
    return "n1" if k < per else "n2"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(t: dt.datetime | None) -> str | None:
    return None if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sh(cmd, check=False, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=isinstance(cmd, str), env=ENV, capture_output=True, text=True,
                          check=check, timeout=timeout, **kw)


def say(msg):
    print(f"[lab {utcnow():%H:%M:%S}] {msg}", flush=True)


# ---------------------------------------------------------------- job script
def debug_of(sc) -> str | None:
    """TORCH_DISTRIBUTED_DEBUG of a scenario: DETAIL, INFO with DDP (DETAIL segfaults DDP here), or as set."""
    if "debug" in sc:
        return sc["debug"]
    if sc.get("prog", "train") != "train":  # the users' programs set no TORCH_DISTRIBUTED_DEBUG
        return None
    return "INFO" if sc.get("ddp") else "DETAIL"


def is_other(sc) -> bool:
    return sc.get("prog") == "other"


def prog_of(sc) -> dict:
    """The program a scenario runs (PROGRAMS below): train.py unless the scenario names another."""
    return PROGRAMS[sc.get("prog", "train")]


def other_job_script(sid, sc, jobdir: Path) -> str:
    """The batch script of a train_other.py run, as such scripts are written: no log-format or debug knobs,
    output per task (`srun -o slurm-%j-%t.out`) or merged, and an ending that may hide srun's code."""
    kind = sc["kind"]
    args = [f"--max_iters {sc.get('iters', 60)}", f"--eval_interval {sc.get('save', 20)}", "--out_dir out",
            f"--timeout {PG_TIMEOUT}"]
    if kind == "exception":
        args += ["--fault exception", f"--fault_rank {sc['ranks'][0]}", f"--fault_iter {sc['at']}"]
    if kind == "oom":
        args += ["--fault leak", f"--fault_rank {sc['ranks'][0]}", f"--fault_iter {sc['at']}", "--leak_mb 128"]
    a = " ".join(args)
    kflag = " --kill-on-bad-exit=1" if sc.get("kill", True) else ""
    per_task = sc.get("per_task", sc["launcher"] == "srun")
    oflag = " -o slurm-%j-%t.out" if per_task else ""
    if sc["launcher"] == "srun":
        tasks = "#SBATCH --ntasks-per-node=2"
        launch = f"srun{kflag}{oflag} {PY} -u {TRAIN_OTHER} {a}"
    else:
        tasks = "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2"
        launch = (f"srun{kflag}{oflag} {TORCHRUN} --nnodes 2 --nproc-per-node 2 --rdzv-id $SLURM_JOB_ID "
                  f"--rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:$MASTER_PORT {TRAIN_OTHER} {a}")
    extra = "#SBATCH --time=1\n" if kind == "timelimit" else ""
    if sc.get("end", "rc") == "echo":
        tail = f'{launch}\n\necho "END TIME: $(date)"\n'
    else:
        tail = f'{launch}\nrc=$?\necho "END TIME: $(date) (exit $rc)"\nexit $rc\n'
    return f"""#!/bin/bash
#SBATCH --job-name=nanogpt
#SBATCH --nodes=2
{tasks}
#SBATCH --partition=low
#SBATCH --output=slurm-%j.out
#SBATCH --chdir={jobdir}
{extra}
echo "START TIME: $(date)"
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=$((20000 + SLURM_JOB_ID * 7 % 20000))
export OMP_NUM_THREADS=1
{tail}"""


def third_job_script(sid, sc, jobdir: Path) -> str:
    """The batch script of a train_third.py run: Hydra-style overrides, `srun --label` or `srun torchrun` (c10d),
    the batch's stdout and stderr in separate files named after the job (%x-%j.out, %x-%j.err)."""
    kind = sc["kind"]
    save = sc.get("save", 20)
    iters = sc.get("iters", 60)
    ov = [f"trainer.max_epochs={max(1, iters // 20)}", "trainer.steps_per_epoch=20",
          f"trainer.save_every_n_steps={save}"]
    if kind in ("exception", "collmismatch"):
        ov += [f"fault.kind={kind}", f"fault.rank={sc['ranks'][0]}", f"fault.step={sc['at']}"]
    if kind == "oom":
        ov += ["fault.kind=leak", f"fault.rank={sc['ranks'][0]}", f"fault.step={sc['at']}", "fault.leak_mb=128"]
    return _users_job_script(sc, jobdir, name="cnn-hydra", program=TRAIN_THIRD, args=" ".join(ov), srun_flags="--label --kill-on-bad-exit=1",
                             outputs="#SBATCH --output=%x-%j.out\n#SBATCH --error=%x-%j.err", setup="mkdir -p logs checkpoints\n")


def fourth_job_script(sid, sc, jobdir: Path) -> str:
    """The batch script of a train_fourth.py run: Megatron-style flags, python WITHOUT -u (stdout block-buffered
    when it is a file), `srun` one task per rank or `srun torchrun` (c10d), everything in slurm-%j.out."""
    kind = sc["kind"]
    args = [f"--train-iters {sc.get('iters', 60)}", f"--save-interval {sc.get('save', 20)}", "--save checkpoints"]
    if kind == "exception":
        args += ["--fault exception", f"--fault-rank {sc['ranks'][0]}", f"--fault-step {sc['at']}"]
    if kind == "oom":
        args += ["--fault leak", f"--fault-rank {sc['ranks'][0]}", f"--fault-step {sc['at']}", "--leak-mb 128"]
    return _users_job_script(sc, jobdir, name="gpt-ds", program=TRAIN_FOURTH, args=" ".join(args), srun_flags="--kill-on-bad-exit=1",
                             outputs="#SBATCH --output=slurm-%j.out", setup="")


def fifth_job_script(sid, sc, jobdir: Path) -> str:
    """The batch script of a train_fifth.py run: configuration by environment variables (no arguments), the batch's
    stdout and stderr split into logs/%x-%j.out and logs/%x-%j.err, `srun --label` one task per rank, or `srun
    torchrun` (c10d) with one elastic restart (--max-restarts=1), each worker's output teed with torchrun's
    `[default<local rank>]:` prefix and its error.json under torchelastic/ (--log-dir)."""
    kind = sc["kind"]
    env = [f"MAX_STEPS={sc.get('iters', 60)}", f"CKPT_EVERY={sc.get('save', 20)}", "CKPT_DIR=$PWD/checkpoints",
           "LOG_DIR=$PWD/logs"]
    fault = {"exception": "exception", "segv": "segv", "oom": "leak"}.get(kind)
    if fault:
        env += [f"FAULT_KIND={fault}", f"FAULT_RANK={sc['ranks'][0]}", f"FAULT_STEP={sc['at']}"]
    if kind == "oom":
        env.append("LEAK_MB=128")
    return _users_job_script(sc, jobdir, name="fsdp-mlp", program=TRAIN_FIFTH, args="",
                             srun_flags="--label --kill-on-bad-exit=1",
                             outputs="#SBATCH --output=logs/%x-%j.out\n#SBATCH --error=logs/%x-%j.err",
                             setup="".join(f"export {e}\n" for e in env),
                             torchrun_flags="--max-restarts=1 --tee=3 --log-dir=$PWD/torchelastic")


def _users_job_script(sc, jobdir: Path, *, name: str, program, args: str, srun_flags: str, outputs: str, setup: str,  # type: ignore[no-untyped-def]
                      torchrun_flags: str = "") -> str:
    """The batch script of a users'-style program: `srun` one task per rank (2 a node) or `srun torchrun` (c10d, one
    agent a node, plus the program's own torchrun flags), outputs as the program's users name them, a time limit for
    the timelimit kind, the requeueing partition for preempt_requeue, and no --kill-on-bad-exit for the late SIGCONT
    (the resumed rank must live on to meet its dead peers)."""
    kind = sc["kind"]
    if kind == "sigstop_late_cont":
        srun_flags = " ".join(f for f in srun_flags.split() if f != "--kill-on-bad-exit=1")
    if sc["launcher"] == "srun":
        tasks = "#SBATCH --ntasks-per-node=2"
        launch = " ".join(filter(None, ["srun", srun_flags, PY, program, args]))
    else:
        tasks = "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2"
        launch = " ".join(filter(None, [
            f"srun {TORCHRUN} --nnodes=2 --nproc_per_node=2 --rdzv_id=$SLURM_JOB_ID --rdzv_backend=c10d "
            f"--rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT", torchrun_flags, program, args]))
    extra = "#SBATCH --time=1\n" if kind == "timelimit" else ""
    if kind == "preempt_requeue":
        extra += "#SBATCH --requeue\n#SBATCH --open-mode=append\n"
    part = "lowrq" if kind == "preempt_requeue" else "low"
    return f"""#!/bin/bash
#SBATCH --job-name={name}
#SBATCH --nodes=2
{tasks}
#SBATCH --partition={part}
{outputs}
#SBATCH --chdir={jobdir}
{extra}
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=$((20000 + SLURM_JOB_ID * 7 % 20000))
export OMP_NUM_THREADS=1
{setup}{launch}
"""


def job_script(sid, sc, jobdir: Path) -> str:
    if sc.get("prog", "train") != "train":
        return prog_of(sc)["job_script"](sid, sc, jobdir)
    args = [f"--iters {sc.get('iters', 60)}", f"--save-interval {sc.get('save', 20)}",
            f"--log-format {sc['fmt']}", f"--timeout {PG_TIMEOUT}", "--save ckpt", "--logdir logs"]
    kind = sc["kind"]
    if kind in ("exception", "shape", "collmismatch", "uneven", "segv", "uneven_exit"):
        args += [f"--fault {kind}", f"--fault-rank {sc['ranks'][0]}", f"--fault-step {sc['at']}"]
    if kind == "oom":
        args += ["--fault loader_leak" if sc.get("loader") else "--fault leak", f"--fault-rank {sc['ranks'][0]}",
                 f"--fault-step {sc['at']}", "--leak-mb 128"]
    if sc.get("loader"):
        args.append("--loader-workers 1")
    if sc.get("ddp"):
        args.append("--ddp")
    if sc.get("save_slow"):
        args.append(f"--save-slow {sc['save_slow']}")
    if sc.get("bcast"):
        args.append("--broadcast-batch")
    debug = debug_of(sc)
    part = {"preempt_requeue": "lowrq"}.get(kind, "low")
    extra = []
    if kind == "timelimit":
        extra.append("#SBATCH --time=1")
    if kind == "preempt_requeue":
        extra += ["#SBATCH --requeue", "#SBATCH --open-mode=append"]
    # -K (--kill-on-bad-exit) is what most real multi-node scripts pass; the late-SIGCONT scenario
    # runs without it so the resumed rank lives on to meet its dead peers.
    kflag = "" if kind == "sigstop_late_cont" else " --kill-on-bad-exit=1"
    a = " ".join(args)
    world = world_of(sc)
    if world != 4 and sc["launcher"] != "srun":
        raise ValueError("world sizes other than 4 are for the srun launcher only")
    tasks = {4: "#SBATCH --ntasks-per-node=2", 6: "#SBATCH --ntasks=6\n#SBATCH --overcommit",
             3: "#SBATCH --ntasks=3"}[world]
    if sc["launcher"] == "srun":
        launch = f"srun{kflag} {PY} -u {TRAIN} {a}"
    else:
        launch = (f"srun{kflag} --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=2 bash -c "
                  f"'exec {TORCHRUN} --nnodes 2 --nproc-per-node 2 --node-rank $SLURM_NODEID "
                  f"--master-addr $MASTER_ADDR --master-port $MASTER_PORT "
                  f"--log-dir $PWD/elastic/$SLURMD_NODENAME {TRAIN} {a}'")
    return f"""#!/bin/bash
#SBATCH --job-name={sid}
#SBATCH --nodes=2
{tasks}
#SBATCH --partition={part}
#SBATCH --output=slurm-%j.out
#SBATCH --chdir={jobdir}
{chr(10).join(extra)}
echo "[$(date -u +%Y-%m-%dT%H:%M:%S)] job $SLURM_JOB_ID ($SLURM_JOB_NAME) restart ${{SLURM_RESTART_COUNT:-0}} on $SLURM_JOB_NODELIST, $SLURM_NTASKS tasks"
export MASTER_ADDR=127.0.0.1
export MASTER_PORT=$((20000 + SLURM_JOB_ID * 7 % 20000))
export TORCH_FR_BUFFER_SIZE=2000
export TORCH_FR_DUMP_TEMP_FILE=$PWD/fr/nccl_trace_rank_
{f"export TORCH_DISTRIBUTED_DEBUG={debug}" if debug else "unset TORCH_DISTRIBUTED_DEBUG"}
export TORCH_CPP_LOG_LEVEL=INFO
export PYTHONUNBUFFERED=1
mkdir -p fr logs ckpt
{launch}
rc=$?
echo "[$(date -u +%Y-%m-%dT%H:%M:%S)] srun exited with $rc"
exit $rc
"""


# ---------------------------------------------------------------- observing the job
def job_state(jid) -> dict:
    r = sh(["scontrol", "show", "job", "-o", str(jid)])
    d = {}
    for m in re.finditer(r"(\w+)=(\S*)", r.stdout):
        d.setdefault(m.group(1), m.group(2))
    return d


def rank_log(jobdir, r, name: str = "rank{r}.log") -> str:
    p = jobdir / "logs" / name.format(r=r)
    try:
        return p.read_text(errors="replace")
    except FileNotFoundError:
        return ""


PROG = re.compile(r"iteration\s+(\d+)/|step (\d+) loss|\{'loss'")


def progress_count(text) -> int:
    """Iterations logged in a rank log (megatron/plain give the number; hf lines are counted)."""
    last = 0
    n_hf = 0
    for m in PROG.finditer(text):
        if m.group(1):
            last = int(m.group(1))
        elif m.group(2):
            last = int(m.group(2))
        else:
            n_hf += 1
    return max(last, n_hf)


# train_other.py logs no pids: the lab finds each rank's process itself (the job id in its environment;
# RANK under torchrun -- the agent has none -- or SLURM_PROCID under srun), remembering them for the truth.
OTHER_PIDS: dict[str, dict] = {}  # str(jobdir) -> {"jid", "launcher", "ranks": {rank: (pid, node)}}


def scan_other_ranks(jobdir) -> None:
    st = OTHER_PIDS[str(jobdir)]
    script = st.get("script", "train_other.py").encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            if not any(c.endswith(script) for c in cmd) or any(c.endswith(b"torchrun") for c in cmd):
                continue
            env = dict(kv.split(b"=", 1) for kv in (d / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"SLURM_JOB_ID", b"").decode() != st["jid"]:
            continue
        rk = env.get(b"RANK") if st["launcher"] == "torchrun" else env.get(b"SLURM_PROCID")
        if rk is None:
            continue
        st["ranks"].setdefault(int(rk), (int(d.name), env.get(b"SLURMD_NODENAME", b"").decode() or None))


def other_iters(jobdir) -> int:
    """Iterations done, from rank 0's nanoGPT `iter N:` lines in any of the job's output files (+1: from 0)."""
    last = -1
    for f in Path(jobdir).glob("*.out"):
        for m in re.finditer(r"^iter (\d+): loss", f.read_text(errors="replace"), re.M):
            last = max(last, int(m.group(1)))
    return last + 1


def third_iters(jobdir) -> int:
    """Steps done, from rank 0's own log file (`Epoch e/E | Step s/S | loss=...`; only rank 0 logs progress)."""
    steps = re.findall(r"\| Step (\d+)/\d+ \| loss=", rank_log(jobdir, 0, "train_rank{r}.log"))
    return int(steps[-1]) if steps else 0


def fourth_iters(jobdir) -> int:
    """Steps done, from rank 0's DeepSpeed-style `[Rank 0] epoch=0|step=N|loss=...` lines in the job's output."""
    steps = re.findall(r"\[Rank 0\] epoch=\d+\|step=(\d+)\|", other_output(jobdir))
    return int(steps[-1]) if steps else 0


def jsonl_records(text: str) -> list[dict]:
    """The records of a JSON-lines log (train_fifth.py's logs/rank{R}.jsonl); lines cut by a kill are skipped."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def fifth_steps(jobdir) -> int:
    """Steps done, from rank 0's JSON-lines `train_step` records (every rank writes one a step)."""
    steps = [r.get("step", 0) for r in jsonl_records(rank_log(jobdir, 0, "rank{r}.jsonl")) if r.get("msg") == "train_step"]
    return max(steps, default=0)


def fifth_first_failure(sc, logs: dict) -> dict | None:
    """First failure of a fault whose line train_fifth.py writes itself, from its JSON-lines records (stamped):
    the rank's first ERROR record (the exception, the allocation failure of RLIMIT_AS, the checkpoint thread's
    failed write on rank 0), or, for a segfault (no line at all), the rank's last record before it in the first
    attempt."""
    kind = sc["kind"]
    if kind not in ("exception", "segv", "enospc") and not (kind == "oom" and sc.get("limit") == "ulimit"):
        return None
    r0 = 0 if kind == "enospc" else sc["ranks"][0]
    recs = jsonl_records(logs[r0])
    if kind == "segv":
        # its step at-1 record, and the records it wrote after it in that step (an epoch's end, a save) -- not the
        # restart's (the first attempt's records end there; a restarted rank may fail before it logs again)
        i = next((i for i, r in enumerate(recs) if r.get("msg") == "train_step" and r.get("step") == sc["at"] - 1), None)
        while i is not None and i + 1 < len(recs) and recs[i + 1].get("level") in ("INFO", "SUCCESS") \
                and not re.match(r"Rank \d+/\d+ up on", recs[i + 1].get("msg", "")):
            i += 1
        rec = recs[i] if i is not None else None
        what = f"rank {r0} segfaults (ctypes.string_at(0)) at step {sc['at']}, right after its record: {rec and rec['msg']}"
    else:
        rec = next((r for r in recs if r.get("level") == "ERROR"), None)
        exc = (rec or {}).get("exc", "").strip().splitlines()
        what = f"rank {r0}'s own error record: {rec['msg']}: {exc[-1][:160] if exc else ''}" if rec else "NOT FOUND"
    t = dt.datetime.fromisoformat(rec["ts"]).astimezone(dt.timezone.utc) if rec else None
    fault = {"exception": f"FAULT_KIND=exception: rank {r0} gets a label one past the classes for F.one_hot at step "
                          f"{sc.get('at')} (on every attempt)",
             "segv": f"FAULT_KIND=segv: rank {r0} reads address 0 through ctypes at step {sc.get('at')} (on every attempt)"}
    return {"ff": (t, r0, what), "fault": fault.get(kind)}


def other_output(jobdir) -> str:
    return "".join(f.read_text(errors="replace") for f in sorted(Path(jobdir).glob("*.out")))


# The programs the lab runs: their script, where their checkpoints go (ckpt: the directory the lab lists, makes
# a FIFO in, or mounts a small tmpfs on), the file name of their per-rank logs (None: they write none), how the
# lab finds their ranks' pids ("log": the program's `started pid=N node=X` line; "proc": /proc, by job id and
# RANK/SLURM_PROCID) and when rank 0 has logged step n (reached); the checkpoint file a step's save opens first
# (fifo) and a tmpfs size in MiB the first checkpoint fits in and the second not, or none at all (enospc_mib).
PROGRAMS = {
    "train": {"script": TRAIN, "ckpt": "ckpt", "rank_log": "rank{r}.log", "pids": "log", "timeout": PG_TIMEOUT,
              "fifo": lambda sc: f"iter_{sc['at']:07d}/mp_rank_00/model_optim_rng.pt", "enospc_mib": 16},
    "other": {"script": TRAIN_OTHER, "ckpt": "out", "rank_log": None, "pids": "proc", "timeout": PG_TIMEOUT,
              "job_script": other_job_script, "reached": lambda jobdir, n: other_iters(jobdir) > n,
              "fifo": lambda sc: "ckpt.pt", "enospc_mib": 2},
    "third": {"script": TRAIN_THIRD, "ckpt": "checkpoints", "rank_log": "train_rank{r}.log", "pids": "proc",
              "timeout": 45, "job_script": third_job_script, "reached": lambda jobdir, n: third_iters(jobdir) >= n,
              # Lightning's name, epoch counted from 0, 20 steps an epoch; torch.save opens the temp file first
              "fifo": lambda sc: f"epoch={(sc['at'] - 1) // 20}-step={sc['at']}.ckpt.tmp", "enospc_mib": 4,
              "truth": lambda sc: {
                  "output": ("srun --label (task-number prefixes); " if sc["launcher"] == "srun" else "")
                  + "batch stdout in cnn-hydra-%j.out, stderr in cnn-hydra-%j.err; per-rank logs/train_rank{R}.log",
                  "log_format": "hydra", "ddp": True, "torch_distributed_debug": None, "pg_timeout_s": 45}},
    # watch: patterns of untimed lines whose first sight the lab's clock stamps (OutputWatch)
    "fourth": {"script": TRAIN_FOURTH, "ckpt": "checkpoints", "rank_log": None, "pids": "proc", "timeout": 40,
               "job_script": fourth_job_script, "reached": lambda jobdir, n: fourth_iters(jobdir) >= n,
               "watch": {"exception": r"^.*mat1 and mat2 shapes cannot be multiplied.*$"},
               "fifo": lambda sc: f"global_step{sc['at']}/.metadata", "enospc_mib": 1,
               "truth": lambda sc: {
                   "output": "all ranks' stdout and stderr in slurm-%j.out; python without -u (unflushed prints can be lost)",
                   "mesh": "dp=2 x tp=2: tp groups [0,1],[2,3]; dp groups [0,2],[1,3]",
                   "log_format": "deepspeed", "ddp": False, "torch_distributed_debug": None, "pg_timeout_s": 40}},
    # failed: what a rank's error looks like in its own log (the late SIGCONT waits for a peer's); first_failure: the
    # program's own reading of the first failure of its faults (collect)
    "fifth": {"script": TRAIN_FIFTH, "ckpt": "checkpoints", "rank_log": "rank{r}.jsonl", "pids": "proc", "timeout": 50,
              "job_script": fifth_job_script, "reached": lambda jobdir, n: fifth_steps(jobdir) >= n,
              "failed": r'"level": "ERROR"', "first_failure": fifth_first_failure,
              # the full state dict (4.2 MB) written to step-N.pt.tmp, then renamed: one fits in 6 MiB, two do not
              "fifo": lambda sc: f"step-{sc['at']}.pt.tmp", "enospc_mib": 6,
              "truth": lambda sc: {
                  "output": ("srun --label (task-number prefixes)" if sc["launcher"] == "srun" else
                             "torchrun --tee=3 ([default<local rank>]: prefixes), --max-restarts=1, error.json under "
                             "torchelastic/") + "; batch stdout in logs/fsdp-mlp-%j.out, stderr in logs/fsdp-mlp-%j.err;"
                            " per-rank JSON lines logs/rank{R}.jsonl (LOG_DIR)",
                  "log_format": "loguru+lightning-tqdm+jsonl", "ddp": False, "fsdp": "fully_shard (FSDP2)",
                  "torch_distributed_debug": None, "pg_timeout_s": 50}},
}


def rank_pid(jobdir, r, after: float = 0.0):
    if str(jobdir) in OTHER_PIDS:
        st = OTHER_PIDS[str(jobdir)]
        if r not in st["ranks"]:
            scan_other_ranks(jobdir)
        return st["ranks"].get(r, (None, None))
    m = None
    for m in re.finditer(r"started pid=(\d+) node=(\S+)", rank_log(jobdir, r)):
        pass
    if not m:
        return None, None
    return int(m.group(1)), m.group(2)


def memcg_confine(sid: str, pid: int, mib: int, cleanup: list) -> str:
    """Move ``pid`` into a new memory cgroup of ``mib`` MiB (removed by ``cleanup``); its name."""
    cg = cg_make(MEMCG_PARENT, f"cslab_{sid}", {"memory.limit_in_bytes": mib * 1024 * 1024})
    cleanup.append(lambda cg=cg: cg_remove(cg, MEMCG_PARENT))
    cg_move(cg, pid)
    return cg.name


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a rank's DataLoader workers)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(k) for k in kids]


def wait_for(pred, timeout, step=0.1):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def wait_progress(jobdir, r, n, timeout=180):
    if str(jobdir) in OTHER_PIDS:  # only rank 0 prints; the steps are synchronous
        reached = PROGRAMS[OTHER_PIDS[str(jobdir)]["prog"]]["reached"]
        return wait_for(lambda: reached(jobdir, n), timeout, 0.05)  # rank 0's progress line of step n
    return wait_for(lambda: progress_count(rank_log(jobdir, r)) >= n, timeout, 0.05)


def log_time(line: str) -> dt.datetime | None:
    """The %(asctime)s stamp that opens a logging line (train.py's, or Hydra's `[stamp][name][LEVEL] - `)."""
    m = re.match(r"\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})", line)
    if not m:
        return None
    return dt.datetime.strptime(m.group(1) + "." + m.group(2), "%Y-%m-%d %H:%M:%S.%f").replace(
        tzinfo=dt.timezone.utc)  # the lab machine's local time is UTC (checked in main)


def first_line(text, pattern):
    for line in text.splitlines():
        if re.search(pattern, line):
            return line
    return None


def last_progress_line(text):
    last = None
    for line in text.splitlines():
        if PROG.search(line):
            last = line
    return last


def program_fault_first(logs: dict, r0: int, at: int) -> tuple:
    """First failure of a bug in the program on rank r0 at iteration `at`: its own error line when
    the error is raised at once (the exception; DETAIL's fingerprint check of a shape or op
    mismatch), else -- a mismatched collective without DETAIL just hangs until the process-group
    timeout -- the moment the rank began the step in which it issued it: its progress line of
    iteration at-1 (every rank logs one progress line per iteration)."""
    line = first_line(logs[r0], r" failed: ")
    prog = [ln for ln in logs[r0].splitlines() if PROG.search(ln)]
    prev = prog[at - 2] if 2 <= at <= len(prog) + 1 else None
    t_err, t_prev = (log_time(line) if line else None), (log_time(prev) if prev else None)
    if t_err is not None and (t_prev is None or (t_err - t_prev).total_seconds() <= PG_TIMEOUT / 2):
        return t_err, r0, f"rank {r0}'s own error line: {line.split(' - ', 3)[-1][:160]}"
    if t_prev is not None:
        return (t_prev, r0, f"rank {r0} began iteration {at}, where it issues the faulty collective, right after this "
                f"progress line (its peers then hang until the {PG_TIMEOUT} s timeout; its error line comes at "
                f"{iso(t_err) if t_err else 'no time'})")
    return None, r0, "NOT FOUND"


# ---------------------------------------------------------------- fault helpers
def ports_of(pid) -> list[int]:
    r = subprocess.run(["ss", "-tanpH"], capture_output=True, text=True)
    ports = set()
    for line in r.stdout.splitlines():
        if f"pid={pid}," not in line:
            continue
        cols = line.split()
        local = cols[3]
        ports.add(int(local.rsplit(":", 1)[1]))
    return sorted(ports)


def ipt(*a):
    return subprocess.run(["iptables", "-w", *a], capture_output=True, text=True)


def ipt_setup():
    ipt("-N", IPT_CHAIN)
    for ch in ("INPUT", "OUTPUT"):
        if ipt("-C", ch, "-j", IPT_CHAIN).returncode != 0:
            ipt("-I", ch, "1", "-j", IPT_CHAIN)


def ipt_cleanup():
    for ch in ("INPUT", "OUTPUT"):
        while ipt("-D", ch, "-j", IPT_CHAIN).returncode == 0:
            pass
    ipt("-F", IPT_CHAIN)
    ipt("-X", IPT_CHAIN)


def cg_make(parent: Path, name: str, settings: dict) -> Path:
    p = parent / name
    p.mkdir(exist_ok=True)
    for k, v in settings.items():
        (p / k).write_text(str(v))
    return p


def cg_move(cg: Path, pid: int):
    (cg / "cgroup.procs").write_text(str(pid))  # v1: moves every thread of the process


def cg_remove(cg: Path, back: Path):
    if not cg.exists():
        return
    for pid in (cg / "cgroup.procs").read_text().split():
        try:
            (back / "cgroup.procs").write_text(pid)
        except OSError:
            pass
    time.sleep(0.2)
    try:
        cg.rmdir()
    except OSError as e:
        say(f"could not remove cgroup {cg}: {e}")


def agent_pid_of(pid) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def stepd_of(pid) -> int | None:
    """The slurmstepd above a rank's process (its parent under srun, its agent's under torchrun)."""
    for _ in range(6):
        pid = agent_pid_of(pid)
        if not pid or pid <= 1:
            return None
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmstepd":
                return pid
        except OSError:
            return None
    return None


def restart_slurmd(node: str) -> bool:
    """Start a node's slurmd again (as slurm.sh does) and wait until Slurm has the node back."""
    conf = str(SLURM_BASE / "etc" / "slurm.conf")
    sh(["/usr/sbin/slurmd", "-f", conf, "-N", node])
    def back() -> bool:
        out = sh(["sinfo", "-h", "-N", "-n", node, "-o", "%t"]).stdout.split()
        return bool(out) and out[0].rstrip("*") in ("idle", "mix", "alloc")
    if not wait_for(back, 90, 1.0):
        sh(["scontrol", "update", f"nodename={node}", "state=resume"])
        return wait_for(back, 60, 1.0)
    return True


# ---------------------------------------------------------------- one scenario
class OutputWatch:
    """The lab's clock on lines of a program that stamps none: polls the job's output files and keeps the
    first time each pattern was seen (at most ~0.1 s late, plus srun's forwarding)."""

    def __init__(self, jobdir, patterns: dict):
        import threading
        self.jobdir, self.patterns, self.seen = jobdir, {k: re.compile(v, re.M) for k, v in patterns.items()}, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set() and len(self.seen) < len(self.patterns):
            text = other_output(self.jobdir)
            t = utcnow()
            for k, pat in self.patterns.items():
                if k not in self.seen and (m := pat.search(text)):
                    self.seen[k] = (t, m.group(0))
            time.sleep(0.1)

    def close(self):
        self.stop.set()
        self.thread.join(5)


OTHER_WATCH = {"exception": r"^.*index out of range in self.*$", "ulimit": r"^.*can't allocate memory.*$",
               "save": r"^saving checkpoint to .*$",
               "writefail": r"^.*(?:unexpected pos|PytorchStreamWriter failed|basic_ios::clear|No space left).*$"}


def run_scenario(sid, sc, out: Path, versions: dict) -> dict:
    sc = dict(sc, ranks=list(sc["ranks"]))  # nodekill of a torchrun c10d job fills its ranks in
    jobdir = JOBS / sid
    if jobdir.exists():
        shutil.rmtree(jobdir)
    jobdir.mkdir(parents=True)
    prog = prog_of(sc)
    if prog["rank_log"]:  # train_other.py writes no rank logs
        (jobdir / "logs").mkdir()
    (jobdir / prog["ckpt"]).mkdir()
    (jobdir / "job.sh").write_text(job_script(sid, sc, jobdir))
    kind = sc["kind"]
    fault = None
    ff = None  # (time, rank, what)
    notes = []
    cleanup = []
    t_submit = utcnow()
    if kind == "ckpt_fifo":
        # the storage that blocks: the file the save of iteration `at` opens first is a FIFO nobody reads, so
        # rank 0's torch.save() blocks in open() like a write to a hung NFS/Lustre mount (nanoGPT overwrites
        # out/ckpt.pt at every eval: its first save blocks; train_third.py writes a temp file, then renames it)
        f = jobdir / prog["ckpt"] / prog["fifo"](sc)
        f.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(f)
        fault = f"mkfifo {f} before the job started (nobody ever reads it)"
    unmount = None
    if kind == "enospc":
        # a checkpoint disk that fills up: train.py's first checkpoint (MLP + AdamW state, 11 MB) fits in
        # 16 MiB, the second does not, and torch.save fails on rank 0 with the kernel's ENOSPC;
        # train_other.py's (TinyGPT + AdamW, ~6 MB) does not fit in 2 MiB at all
        ck, size = jobdir / prog["ckpt"], prog["enospc_mib"]
        sh(["mount", "-t", "tmpfs", "-o", f"size={size}m,mode=1777", "cslab-enospc", str(ck)], check=True)
        unmount = ck
        fault = (f"{ck} is a {size} MiB tmpfs (mount -t tmpfs -o size={size}m) mounted before the job started: "
                 + ("the first checkpoint does not fit" if is_other(sc) else
                    f"the first checkpoint (iteration {sc.get('save', 20)}) fits, the second does not"))
    r = sh(["sbatch", "--parsable", str(jobdir / "job.sh")], check=True)
    jid = r.stdout.strip().split(";")[0]
    say(f"{sid}: submitted job {jid}")
    high_jid = None
    watch = None
    if prog["pids"] == "proc":
        OTHER_PIDS[str(jobdir)] = {"jid": jid, "launcher": sc["launcher"], "ranks": {}, "prog": sc["prog"],
                                   "script": Path(prog["script"]).name}
    if is_other(sc) or prog.get("watch"):
        watch = OutputWatch(jobdir, OTHER_WATCH if is_other(sc) else prog["watch"])
        cleanup.append(watch.close)
    try:
        world = world_of(sc)
        ok = wait_for(lambda: all(rank_pid(jobdir, k)[0] for k in range(world)), 120, 0.2)
        if not ok:
            notes.append("not all ranks started within 120 s")
        pids = {k: rank_pid(jobdir, k) for k in range(world)}
        for k, (pid, node) in pids.items():
            if node and node != rank_node(sc, k) and not (prog["pids"] == "proc" and sc["launcher"] == "torchrun"):
                notes.append(f"rank {k} ran on {node}, expected {rank_node(sc, k)}")
        tgt = sc["ranks"][0] if sc["ranks"] else None
        tpid = pids[tgt][0] if tgt is not None else None
        at = sc.get("at", 0)

        if kind == "oom" and sc.get("limit") == "ulimit":
            # RLIMIT_AS from outside (what `ulimit -v` in the job script would set): the leak's next
            # 128 MiB mmap fails, so torch's allocator raises in the rank itself (no kernel OOM killer)
            if not wait_progress(jobdir, tgt, 2):
                notes.append(f"rank {tgt} never reached iteration 2")
            vm = int(re.search(r"VmSize:\s+(\d+) kB", Path(f"/proc/{tpid}/status").read_text()).group(1)) * 1024
            lim = vm + 640 * 1024 * 1024
            pr = subprocess.run(["prlimit", "--pid", str(tpid), f"--as={lim}:{lim}"], capture_output=True, text=True)
            if pr.returncode != 0:
                notes.append(f"prlimit failed: {pr.stderr.strip()}")
            fault = (f"prlimit --pid {tpid} --as={lim}:{lim} (rank {tgt}: VmSize {vm // 2**20} MiB + 640 MiB) at "
                     f"{iso(utcnow())}; the program leaks 128 MiB/step from iteration {at} on that rank")
        elif kind == "oom" and sc.get("loader"):
            # the rank's DataLoader worker: the rank's one child process running python
            wid = None
            if wait_for(lambda: bool(children_of(tpid)), 60, 0.1):
                wid = children_of(tpid)[0]
            if wid is None:
                notes.append(f"rank {tgt} (pid {tpid}) started no DataLoader worker within 60 s")
            else:
                cg = memcg_confine(sid, wid, 600, cleanup)
                fault = (f"rank {tgt}'s DataLoader worker (pid {wid}, child of the rank's pid {tpid}) moved into memory "
                         f"cgroup {cg} with memory.limit_in_bytes=600MiB at {iso(utcnow())}; the worker keeps "
                         f"128 MiB per batch from iteration {at} on")
        elif kind == "oom":
            cg = memcg_confine(sid, tpid, 1200, cleanup)
            fault = (f"rank {tgt} (pid {tpid}) moved into memory cgroup {cg} with "
                     f"memory.limit_in_bytes=1200MiB at {iso(utcnow())}; the program leaks 128 MiB/step "
                     f"from iteration {at} on that rank")
        elif kind in ("sigstop", "sigstop_late_cont", "nodekill", "nodecrash", "iptables", "cpu_starve",
                      "scancel", "scancel_step", "preempt_cancel", "preempt_requeue"):
            wr = tgt if tgt is not None else world - 1
            if not wait_progress(jobdir, wr, at):
                notes.append(f"rank {wr} never reached iteration {at}")
            if sc.get("during_save"):
                # strike while rank 0's checkpoint write of iteration `at` is in flight (--save-slow)
                pat = re.compile(r"saving checkpoint at iteration\s+%d\b" % at)
                if not wait_for(lambda: pat.search(rank_log(jobdir, 0)), 60, 0.05):
                    notes.append(f"rank 0 never began saving iteration {at}")
                time.sleep(min(3.0, sc.get("save_slow", 0) / 3))
            t_inj = utcnow()
            if kind in ("sigstop", "sigstop_late_cont"):
                os.kill(tpid, signal.SIGSTOP)
                fault = f"kill -STOP {tpid} (rank {tgt}) at {iso(t_inj)} (after iteration {at})"
                ff = (t_inj, tgt, f"SIGSTOP of rank {tgt} right after its progress line for iteration {at}")
                if kind == "sigstop_late_cont":
                    peers = [k for k in range(world) if k != tgt]
                    failed, name = prog.get("failed", " failed: "), prog["rank_log"] or "rank{r}.log"
                    hit = wait_for(lambda: any(re.search(failed, rank_log(jobdir, k, name)) for k in peers),
                                   prog["timeout"] + 60, 0.2)
                    time.sleep(3)
                    os.kill(tpid, signal.SIGCONT)
                    fault += f"; kill -CONT {tpid} at {iso(utcnow())} ({'3 s after the first peer timed out' if hit else 'no peer error seen'})"
            elif kind == "nodekill":
                if sc.get("node"):  # c10d rendezvous: the node's ranks are whatever ranks ran there
                    sc["ranks"] = sorted(k for k, (_, n) in pids.items() if n == sc["node"])
                    tgt = sc["ranks"][0]
                node = sc.get("node") or rank_node(sc, tgt)
                victims = [pids[k][0] for k in sc["ranks"]]
                if sc["launcher"] == "torchrun":
                    ag = agent_pid_of(victims[0])
                    if ag:
                        victims.append(ag)
                for v in victims:
                    try:
                        os.kill(v, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                fault = (f"kill -KILL {' '.join(map(str, victims))} (every rank process"
                         f"{' and the torchrun agent' if sc['launcher'] == 'torchrun' else ''} on {node}) at {iso(t_inj)}")
                ff = (t_inj, tgt, f"all processes of {node} SIGKILLed after iteration {at}"
                      + (" while rank 0's checkpoint write was in flight" if sc.get("during_save") else ""))
            elif kind == "nodecrash":
                # the host goes away: its ranks, its launchers, the step's slurmstepd and its slurmd all
                # die at once, so Slurm stops hearing from the node and, after SlurmdTimeout, fails it
                node = rank_node(sc, tgt)
                victims = [pids[k][0] for k in sc["ranks"]]
                stepd = stepd_of(victims[0])
                if sc["launcher"] == "torchrun":
                    ag = agent_pid_of(victims[0])
                    if ag and ag != stepd:
                        victims.append(ag)
                if stepd:
                    victims.append(stepd)
                else:
                    notes.append(f"no slurmstepd found above rank {tgt} (pid {tpid})")
                slurmd_pid = int((SLURM_BASE / "run" / f"slurmd.{node}.pid").read_text().split()[0])
                victims.append(slurmd_pid)
                for v in victims:
                    try:
                        os.kill(v, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                cleanup.append(lambda node=node: restart_slurmd(node) or say(f"slurmd {node} did not come back"))
                fault = (f"kill -KILL {' '.join(map(str, victims))} (every rank process"
                         f"{' and the torchrun agent' if sc['launcher'] == 'torchrun' else ''} on {node}, the step's "
                         f"slurmstepd there and slurmd {node}) at {iso(t_inj)}: the node is gone to Slurm")
                ff = (t_inj, tgt, f"{node} crashed (all its processes and its slurmd killed) after iteration {at}")
            elif kind == "iptables":
                ports = ports_of(tpid)
                ipt_setup()
                cleanup.append(ipt_cleanup)
                for p in ports:
                    for flag in ("--sport", "--dport"):
                        ipt("-A", IPT_CHAIN, "-p", "tcp", flag, str(p), "-j", "DROP")
                t_inj = utcnow()
                fault = (f"iptables DROP (INPUT+OUTPUT, tcp sport/dport) on the {len(ports)} TCP ports of "
                         f"rank {tgt} (pid {tpid}): {ports} at {iso(t_inj)} (after iteration {at})")
                ff = (t_inj, tgt, f"all TCP ports of rank {tgt} dropped by iptables")
            elif kind == "cpu_starve":
                q, per = sc["quota_us"], sc["period_us"]
                cg = cg_make(CPUCG_PARENT, f"cslab_{sid}", {"cpu.cfs_period_us": per, "cpu.cfs_quota_us": q})
                cleanup.append(lambda cg=cg: cg_remove(cg, CPUCG_PARENT))
                cg_move(cg, tpid)
                fault = (f"rank {tgt} (pid {tpid}) moved into cpu cgroup with cpu.cfs_quota_us={q} "
                         f"cpu.cfs_period_us={per} ({100 * q / per:.1f}% of one CPU) at {iso(t_inj)} (after iteration {at})")
                if sc.get("hog"):
                    # 0.1% alone still lets a step through in < 30 s (the rank needs ~35 ms CPU a step);
                    # a nice -20 busy loop in the same cgroup takes ~99% of that quota from it
                    hog = subprocess.Popen(["nice", "-n", "-20", "sh", "-c", "while :; do :; done"])
                    time.sleep(0.2)
                    cg_move(cg, hog.pid)
                    cleanup.insert(0, lambda hog=hog: (hog.kill(), hog.wait()))
                    fault += f"; plus a nice -20 busy-loop hog (pid {hog.pid}) in the same cgroup"
                ff = (t_inj, tgt, f"rank {tgt} CPU-throttled to {100 * q / per:.1f}% of a CPU")
            elif kind == "scancel":
                sh(["scancel", jid])
                fault = f"scancel {jid} at {iso(t_inj)} (after iteration {at})"
                ff = (t_inj, None, "user scancel")
            elif kind == "scancel_step":
                sh(["scancel", f"{jid}.0"])
                fault = f"scancel {jid}.0 (the job's step only; the batch script goes on) at {iso(t_inj)} (after iteration {at})"
                ff = (t_inj, None, "user scancel of the job's step")
            elif kind in ("preempt_cancel", "preempt_requeue"):
                hj = sh(["sbatch", "--parsable", "-p", "high", "-N2", "--ntasks-per-node=2", "-J", "urgent",
                         "-o", str(LAB / "jobs" / f"urgent-{sid}-%j.out"), "--wrap", "srun sleep 15"], check=True)
                high_jid = hj.stdout.strip()
                fault = (f"sbatch -p high (PriorityTier=10) job {high_jid} needing both nodes at {iso(t_inj)} "
                         f"(after iteration {at}); partition {'lowrq PreemptMode=REQUEUE' if kind == 'preempt_requeue' else 'low PreemptMode=CANCEL'}")
                ff = (t_inj, None, f"higher-priority job {high_jid} submitted")

        # wait for the end
        limit = {"timelimit": 240, "preempt_requeue": 420, "cpu_starve": 300}.get(kind, 240)
        t0 = time.time()
        st = {}
        saw_requeue = False
        while time.time() - t0 < limit:
            st = job_state(jid)
            if int(st.get("Restarts", "0") or 0) > 0:
                saw_requeue = True
            s = st.get("JobState", "")
            if s in TERMINAL and (kind != "preempt_requeue" or saw_requeue):
                break
            time.sleep(1)
        else:
            notes.append(f"job still {st.get('JobState')} after {limit} s: lab ran scancel")
            sh(["scancel", jid])
            wait_for(lambda: job_state(jid).get("JobState") in TERMINAL, 60, 1)
        t_end = utcnow()
    finally:
        for c in cleanup:
            try:
                c()
            except Exception as e:  # noqa: BLE001
                say(f"cleanup failed: {e!r}")
    # a stopped rank that survived (no -K) must not linger
    for k in range(world_of(sc)):
        pid = rank_pid(jobdir, k)[0]
        if pid and Path(f"/proc/{pid}").exists():
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
                if f"SLURM_JOB_ID={jid}".encode() in env:
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    try:
        return collect(sid, sc, jid, jobdir, out, t_submit, t_end, fault, ff, notes, versions, high_jid,
                       watch.seen if watch else {})
    finally:
        if unmount is not None:  # after collect, which lists the checkpoint directory
            sh(["umount", str(unmount)])


# ---------------------------------------------------------------- collection
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?\]")


def window_lines(path: Path, t0: dt.datetime, t1: dt.datetime) -> str:
    """Lines of a Slurm daemon log whose [YYYY-mm-ddTHH:MM:SS.mmm] stamp lies in [t0, t1]."""
    if not path.exists():
        return ""
    keep, out = False, []
    for line in path.read_text(errors="replace").splitlines(keepends=True):
        m = STAMP.match(line)
        if m:
            t = dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
            keep = t0 <= t <= t1
        if keep:
            out.append(line)
    return "".join(out)


def dmesg_window(t0, t1) -> str:
    r = subprocess.run(["dmesg", "--time-format", "iso"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines(keepends=True):
        m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d+)([+-]\d\d:?\d\d)", line)
        if not m:
            continue
        t = dt.datetime.fromisoformat(m.group(1) + m.group(3)).astimezone(dt.timezone.utc)
        if t0 <= t <= t1:
            out.append(line)
    return "".join(out)


SACCT_FMT = ("JobID,JobName,Partition,State,ExitCode,DerivedExitCode,Submit,Start,End,Elapsed,"
             "Timelimit,NodeList,NNodes,NTasks,Reason,MaxRSS")


def trim_big(path: Path, limit=700_000) -> str | None:
    """Trim a text file over `limit` bytes to its first 200 and last lines (verbatim, no marker)."""
    data = path.read_bytes()
    if len(data) <= limit:
        return None
    lines = data.splitlines(keepends=True)
    head = lines[:200]
    tail, size = [], sum(map(len, head))
    for line in reversed(lines[200:]):
        if size + len(line) > limit:
            break
        tail.append(line)
        size += len(line)
    tail.reverse()
    dropped = len(lines) - len(head) - len(tail)
    path.write_bytes(b"".join(head + tail))
    return f"{path.name}: kept lines 1-200 and the last {len(tail)} of {len(lines)} ({dropped} dropped)"


def collect(sid, sc, jid, jobdir, out, t_submit, t_end, fault, ff, notes, versions, high_jid, seen):
    dest = out / sid
    scon = sh(["scontrol", "show", "job", "-d", jid]).stdout  # right at the end
    # wait until the accounting record is final
    sacct_txt = ""
    for _ in range(30):
        r = sh(["sacct", "-j", jid, "-P", f"--format={SACCT_FMT}"])
        sacct_txt = r.stdout
        states = [ln.split("|")[3] for ln in sacct_txt.splitlines()[1:] if ln.count("|") > 3]
        if states and not any(s in ("RUNNING", "PENDING", "COMPLETING", "REQUEUED") for s in states[:1]):
            break
        time.sleep(1)
    sacct_json = sh(["sacct", "-j", jid, "--json"]).stdout
    time.sleep(2)  # let slurmd/slurmctld finish writing their lines about this job
    t_hi = utcnow()
    t_lo = t_submit - dt.timedelta(seconds=1)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(jobdir, dest, ignore=shutil.ignore_patterns("ckpt", "out", prog_of(sc)["ckpt"]),
                    symlinks=False)
    listing = subprocess.run(["find", prog_of(sc)["ckpt"], "-printf", "%M %10s %TY-%Tm-%TdT%TH:%TM:%.2TS %p\n"],
                             cwd=jobdir, capture_output=True, text=True).stdout
    (dest / "ckpt_listing.txt").write_text(listing)
    (dest / "scontrol_show_job.txt").write_text(scon)
    (dest / "sacct.txt").write_text(sacct_txt)
    (dest / "sacct.json").write_text(sacct_json)
    slog = dest / "slurm"
    slog.mkdir()
    for name in ("slurmctld.log", "slurmd.n1.log", "slurmd.n2.log"):
        (slog / name).write_text(window_lines(SLURM_BASE / "log" / name, t_lo, t_hi))
    for n in ("n1", "n2"):
        ep = SLURM_BASE / "log" / f"epilog.{jid}.{n}.scontrol"
        if ep.exists():
            shutil.copy(ep, slog / f"epilog.{n}.scontrol.txt")
    dm = dmesg_window(t_lo, t_hi)
    if dm:
        (dest / "dmesg.txt").write_text(dm)
    if high_jid:
        (dest / "sacct_preemptor.txt").write_text(
            sh(["sacct", "-j", high_jid, "-P", f"--format={SACCT_FMT}"]).stdout)
    trims = [t for p in sorted(dest.rglob("*")) if p.is_file() and (t := trim_big(p))]

    # ---- truth
    kind = sc["kind"]
    logs = {k: rank_log(jobdir, k, prog_of(sc)["rank_log"]) if prog_of(sc)["rank_log"] else ""
            for k in range(world_of(sc))}
    ranks = sc["ranks"]
    # the node each rank really ran on (its own `started pid=N node=X` line), else the planned layout
    ran_on = {k: rank_pid(jobdir, k)[1] or rank_node(sc, k) for k in range(world_of(sc))}
    nodes = sorted({ran_on[k] for k in ranks})
    own = prog_of(sc).get("first_failure")
    own = own and own(sc, logs)
    if own:  # the program reads the first failure of its own faults from its own lines
        ff, fault = own["ff"], own["fault"] or fault
        if ff[0] is None:
            notes.append(f"no line found for the first failure of {kind}")
    elif is_other(sc) and kind in ("exception", "ckpt_fifo", "enospc") or is_other(sc) and sc.get("limit") == "ulimit":
        # no line of train_other.py carries a time: the first failure is when the lab first saw its line
        key = {"exception": "exception", "ckpt_fifo": "save", "enospc": "writefail"}.get(kind, "ulimit")
        r0 = ranks[0]
        t, line = seen.get(key, (None, "NOT SEEN"))
        ff = (t, r0, f"rank {r0}: {line.strip()[:160]} (time: when the lab first saw the line)")
        if key == "exception":
            fault = (f"--fault exception: rank {r0} feeds a token id one past the vocabulary to the embedding at "
                     f"iteration {sc['at']}")
        if t is None:
            notes.append(f"the lab never saw the {key} line")
    elif sc.get("prog") == "fourth" and kind == "exception":
        # the traceback carries no time: the first failure is when the lab first saw torch's error line
        r0 = ranks[0]
        t, line = seen.get("exception", (None, "NOT SEEN"))
        ff = (t, r0, f"rank {r0}: {line.strip()[:160]} (time: when the lab first saw the line)")
        fault = (f"--fault exception: rank {r0} feeds a half-width input to its tensor-parallel matmul at step "
                 f"{sc['at']}")
        if t is None:
            notes.append("the lab never saw the exception line")
    elif sc.get("prog") == "third" and kind in ("exception", "collmismatch", "enospc", "ckpt_fifo"):
        # train_third.py's lines carry Hydra's %(asctime)s; only rank 0 logs progress and saves
        r0 = ranks[0]
        if kind == "collmismatch":
            # no debug, so the mismatched collective just hangs: the fault begins with step `at`, right after
            # rank 0's progress line of step at-1 (the steps are synchronous: DDP all_reduces every step)
            line = first_line(logs[0], r"\| Step %d/\d+ \| loss=" % (sc["at"] - 1))
            what = (f"rank {r0} began step {sc['at']}, where it all_gathers the loss while its peers all_reduce it, "
                    f"right after rank 0's progress line of step {sc['at'] - 1}")
        elif kind == "ckpt_fifo":
            line = first_line(logs[0], r"Saving checkpoint to .*step=%d\.ckpt" % sc["at"])
            what = f"rank 0 begins saving the checkpoint of step {sc['at']} into the FIFO (never returns)"
        else:
            line = first_line(logs[r0], r"\]\[ERROR\] - ")
            what = f"rank {r0}'s own error line: {line.split('] - ', 1)[-1][:160] if line else 'NOT FOUND'}"
        ff = (log_time(line) if line else None, r0, what)
        if kind == "exception":
            fault = f"fault.kind=exception: rank {r0} feeds a 3-channel batch to the 1-channel conv at step {sc['at']}"
        elif kind == "collmismatch":
            fault = (f"fault.kind=collmismatch: rank {r0} calls all_gather while its peers call all_reduce at step "
                     f"{sc['at']}")
        if not line:
            notes.append(f"no line found for the first failure of {kind}")
    elif kind in ("exception", "shape", "collmismatch"):
        r0 = ranks[0]
        ff = program_fault_first(logs, r0, sc["at"])
        fault = {"exception": f"--fault exception: rank {r0} feeds a target batch one row short to "
                              f"F.cross_entropy at iteration {sc['at']}",
                 "shape": f"--fault shape: rank {r0} all_reduces a 3-element metrics tensor (peers: 2) "
                          f"at iteration {sc['at']}",
                 "collmismatch": f"--fault collmismatch: rank {r0} calls all_gather while its peers call "
                                 f"all_reduce at iteration {sc['at']}"}[kind]
    elif kind == "segv":
        r0 = ranks[0]
        prog = [ln for ln in logs[r0].splitlines() if PROG.search(ln) or "train -" in ln]
        line = prog[-1] if prog else None
        ff = (log_time(line) if line else None, r0,
              f"rank {r0} segfaults (ctypes.string_at(0)) at iteration {sc['at']}, right after its last log line")
        fault = f"--fault segv: rank {r0} reads address 0 through ctypes at iteration {sc['at']} (SIGSEGV)"
    elif kind in ("uneven", "uneven_exit"):
        r0 = ranks[0]
        line = first_line(logs[r0], r"training finished after")
        then = "the script ended (exit 0)" if kind == "uneven_exit" else "it left the loop for the final barrier"
        ff = (log_time(line) if line else None, r0,
              f"rank {r0}'s data ran out after iteration {sc['at']}: {then} while its peers went on to iteration "
              f"{sc['at'] + 1}")
        fault = (f"--fault {kind}: rank {r0}'s data shard holds {sc['at']} batches, its peers' {sc.get('iters', 60)}"
                 + (", and its script then returns" if kind == "uneven_exit" else ""))
        if not line:
            notes.append(f"rank {r0} logged no 'training finished' line")
    elif kind == "enospc":
        line = first_line(logs[0], r" failed: ")
        ff = (log_time(line) if line else None, 0,
              f"rank 0's checkpoint write failed: {line.split(' - ', 3)[-1][:160] if line else 'NOT FOUND'}")
        if not line:
            notes.append("rank 0 logged no failure")
    elif kind == "ckpt_fifo":
        line = first_line(logs[0], r"saving checkpoint at iteration\s+%d\b" % sc["at"])
        ff = (log_time(line) if line else None, 0,
              f"rank 0 begins saving checkpoint iteration {sc['at']} into the FIFO (never returns)")
    elif kind == "oom" and sc.get("limit") == "ulimit":
        r0 = ranks[0]
        line = first_line(logs[r0], r" failed: ")
        ff = (log_time(line) if line else None, r0,
              f"rank {r0}'s own allocation failure: {line.split(' - ', 3)[-1][:160] if line else 'NOT FOUND'}")
        if not line:
            notes.append("the limited rank logged no failure")
    elif kind == "oom":
        r0 = ranks[0]
        m = re.search(r"^(\S+).*(Memory cgroup out of memory|oom-kill|Killed process).*$", dm, re.M)
        if m:
            t = dt.datetime.fromisoformat(m.group(1).replace(",", ".")).astimezone(dt.timezone.utc)
            ff = (t, r0, "kernel OOM killer: " + m.group(0)[m.group(0).find(" ") + 1:][:160])
        else:
            line = last_progress_line(logs[r0])
            ff = (log_time(line) if line else None, r0, "last progress line of the leaking rank (no dmesg line)")
            notes.append("no OOM line in dmesg")
    elif kind == "timelimit":
        m = re.search(r"^\[(\S+)\] Time limit exhausted for JobId=%s" % jid,
                      (slog / "slurmctld.log").read_text(), re.M)
        ff = (dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.timezone.utc) if m else None, None,
              "slurmctld: Time limit exhausted" if m else "time limit (no slurmctld line found)")
        fault = "sbatch --time=1 on a job whose training needs far longer"
        if sc.get("save_slow"):
            fault += (f"; every checkpoint write is throttled to take {sc['save_slow']} s (slow storage, "
                      f"train.py --save-slow), one every {sc['save']} iterations")
            begins = [m.start() for m in re.finditer(r"saving checkpoint at iteration", logs[0])]
            ends = [m.start() for m in re.finditer(r"successfully saved checkpoint", logs[0])]
            inflight = bool(begins) and (not ends or begins[-1] > ends[-1])
            notes.append("a checkpoint write was in flight when the job was killed" if inflight
                         else "NO checkpoint write was in flight when the job was killed")
    elif kind == "completed":
        ff = None
        fault = None
    first_failure = None
    if ff:
        t, r0, what = ff
        first_failure = {"node": ran_on[r0] if r0 is not None else None, "rank": r0, "time": iso(t),
                         "tolerance_s": 30, "what": what}
    st = job_state(jid)
    truth = {
        "id": sid, "scenario": kind, "launcher": sc["launcher"], "cause": sc["cause"],
        "culprit": {"nodes": nodes, "ranks": ranks}, "first_failure": first_failure, "fault": fault,
        "job_id": jid, "job_state": st.get("JobState"), "exit_code": st.get("ExitCode"),
        "restarts": st.get("Restarts"), "log_format": sc["fmt"], "ddp": bool(sc.get("ddp")),
        "window": {"submit": iso(t_submit), "end": iso(t_end)},
        "torch_distributed_debug": debug_of(sc), "world_size": world_of(sc),
        "held_out": round_of(sid) is not None,
        "held_out_round": round_of(sid),
        "recorded_with": versions, "notes": " ".join(notes), "trimmed": trims,
    }
    if is_other(sc):
        truth.update({
            "program": "train_other.py",
            "batch_script_end": {"echo": "echo END TIME (exit 0 whatever srun returned)",
                                 "rc": "exit with srun's code"}[sc.get("end", "rc")],
            "srun_kill_on_bad_exit": sc.get("kill", True),
            "output": "per task (srun -o slurm-%j-%t.out)" if sc.get("per_task", sc["launcher"] == "srun")
                      else "merged (slurm-%j.out)",
            "rendezvous": "c10d" if sc["launcher"] == "torchrun" else None,
            "rank_layout": {str(k): ran_on[k] for k in range(world_of(sc))},
            "log_format": "nanogpt", "ddp": True, "torch_distributed_debug": None})
    if prog_of(sc).get("truth"):  # what the users'-style programs are: their files, launch and layout
        t = prog_of(sc)["truth"](sc)
        truth.update({"program": Path(prog_of(sc)["script"]).name, "output": t.pop("output"),
                      "rendezvous": "c10d" if sc["launcher"] == "torchrun" else None,
                      "rank_layout": {str(k): ran_on[k] for k in range(world_of(sc))}, **t})
    (dest / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    say(f"{sid}: job {jid} ended {st.get('JobState')} exit {st.get('ExitCode')}; recorded to {dest}"
        + (f" NOTES: {' '.join(notes)}" if notes else ""))
    return truth


def versions() -> dict:
    sl = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, env=ENV).stdout.split()
    tv = subprocess.run([PY, "-c", "import torch,platform;print(torch.__version__, platform.python_version())"],
                        capture_output=True, text=True).stdout.split()
    return {"slurm": sl[-1] if sl else None, "torch": tv[0] if tv else None,
            "python": tv[1] if len(tv) > 1 else None}


def main():
    global MEMCG_PARENT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated scenario ids (default: all)")
    ap.add_argument("--out", default=str(REPO / "fixtures" / "recorded"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--held-out", action="store_true", help="only the held-out rounds (HELD_OUT)")
    ap.add_argument("--held-out-2", action="store_true", help="only the second held-out round (HELD_OUT_2)")
    ap.add_argument("--held-out-3", action="store_true", help="only the third held-out round (HELD_OUT_3)")
    ap.add_argument("--held-out-4", action="store_true", help="only the fourth held-out round (HELD_OUT_4)")
    ap.add_argument("--held-out-5", action="store_true", help="only the fifth held-out round (HELD_OUT_5)")
    ap.add_argument("--held-out-6", action="store_true", help="only the sixth held-out round (HELD_OUT_6)")
    ap.add_argument("--held-out-7", action="store_true", help="only the seventh held-out round (HELD_OUT_7)")
    ap.add_argument("--held-out-8", action="store_true", help="only the eighth held-out round (HELD_OUT_8)")
    ap.add_argument("--held-out-9", action="store_true",
                    help="only the ninth round: the second program, train_other.py (HELD_OUT_9)")
    ap.add_argument("--held-out-10", action="store_true",
                    help="only the tenth round: uneven data shards and a full checkpoint disk (HELD_OUT_10)")
    ap.add_argument("--held-out-11", action="store_true",
                    help="only the eleventh round: the full checkpoint disk under train_other.py (HELD_OUT_11)")
    ap.add_argument("--held-out-12", action="store_true",
                    help="only the twelfth round: a DataLoader worker's OOM kill, segfaults, an early clean exit (HELD_OUT_12)")
    ap.add_argument("--held-out-13", action="store_true",
                    help="only the thirteenth round: a node crash that Slurm fails the job for (HELD_OUT_13)")
    ap.add_argument("--held-out-14", action="store_true",
                    help="only the fourteenth round: a third program, train_third.py (HELD_OUT_14)")
    ap.add_argument("--held-out-15", action="store_true",
                    help="only the fifteenth round: a fourth program, train_fourth.py (HELD_OUT_15)")
    ap.add_argument("--held-out-16", action="store_true",
                    help="only the sixteenth round: a fifth program, train_fifth.py (HELD_OUT_16)")
    args = ap.parse_args()
    if args.list:
        for k, v in SCENARIOS.items():
            print(f"{k:36s} {v['kind']:18s} {v['launcher']:9s} {v['cause']}")
        return
    if os.geteuid() != 0:
        sys.exit("the lab needs root (slurmd, cgroups, iptables)")
    if time.localtime().tm_gmtoff != 0:
        sys.exit("the lab assumes the machine's local time is UTC (rank logs use %(asctime)s)")
    chosen = {n: ROUNDS[n] for n in sorted(ROUNDS, reverse=True) if getattr(args, f"held_out_{n}", False)}
    if not chosen and args.held_out_2:
        chosen = {2: HELD_OUT_2}
    if not chosen and args.held_out:
        chosen = {1: HELD_OUT}
    ids = args.only.split(",") if args.only else list(next(iter(chosen.values()), SCENARIOS))
    unknown = [i for i in ids if i not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s): {unknown}; see --list")
    mem = [ln.split(":", 2)[2] for ln in Path("/proc/self/cgroup").read_text().splitlines()
           if ln.split(":")[1] == "memory"][0]
    MEMCG_PARENT = Path("/sys/fs/cgroup/memory") / mem.lstrip("/")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    JOBS.mkdir(parents=True, exist_ok=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    say("starting slurm")
    r = subprocess.run(["bash", str(HERE / "slurm.sh"), "start"], env=dict(ENV, BASE=str(SLURM_BASE)),
                       capture_output=True, text=True)
    try:
        if r.returncode != 0:
            sys.exit(f"slurm.sh start failed:\n{r.stdout}\n{r.stderr}")
        vers = versions()
        say(f"versions {vers}")
        results = []
        for sid in ids:
            t0 = time.time()
            try:
                results.append(run_scenario(sid, SCENARIOS[sid], out, vers))
            except Exception as e:  # noqa: BLE001 -- record the failure, go on with the next
                say(f"{sid}: lab error {e!r}")
            say(f"{sid}: {time.time() - t0:.0f} s")
        say(f"recorded {len(results)} of {len(ids)}")
    finally:
        ipt_cleanup()
        subprocess.run(["bash", str(HERE / "slurm.sh"), "stop"], env=dict(ENV, BASE=str(SLURM_BASE)))


if __name__ == "__main__":
    main()
