"""A fourth training program for the recorded-incident lab, unlike train.py, train_other.py and train_third.py.

What a DeepSpeed/Megatron-style user script looks like, as far as the logs go:

  * Python ``logging`` with DeepSpeed's logger format (deepspeed/utils/logging.py, ``create_logger``:
    ``[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s``) on stdout, and
    progress only from rank 0 through a ``log_dist``-like helper that tags the message ``[Rank 0]``:
    ``[Rank 0] step=20, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]`` and a throughput line
    ``[Rank 0] epoch=0|step=20|loss=2.3012|samples/sec=81.23``;
  * every rank also ``print()``s untimed ``[rank N] ...`` lines WITHOUT flushing, and the job runs python
    without ``-u``/PYTHONUNBUFFERED, so a rank killed or stopped loses what it had buffered;
  * no per-rank log files: everything is the job's stdout/stderr (Slurm's ``-o``);
  * a 2-D mesh dp x tp (tp=2 inside a node: {0,1}, {2,3}; dp across: {0,2}, {1,3}) built with
    ``dist.new_group``: each step all_reduces the tensor-parallel partial output in the tp group, then the
    gradients in the dp group, so a stall leaves ranks waiting in different groups' collectives;
  * identity from env (``init_method="env://"``; under srun SLURM_PROCID/SLURM_NTASKS are copied into
    RANK/WORLD_SIZE), a 40 s timeout (``timeout=timedelta(seconds=40)``);
  * checkpoints with ``torch.distributed.checkpoint`` (``dcp.save``: every rank writes its shard
    ``checkpoints/global_step20/__N_0.distcp`` and rank 0 the ``.metadata``);
  * an error is not caught: the traceback goes to stderr through ``sys.excepthook`` (no torchelastic
    ``@record``).

Faults that live in the program (``--fault KIND --fault-rank R --fault-step S``):
  exception: rank R's tensor-parallel shard gets a wrongly sized input at step S (torch's own
      ``mat1 and mat2 shapes cannot be multiplied`` RuntimeError);
  leak: from step S on, rank R keeps --leak-mb MiB per step (for the memory cgroup).
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F

logger = logging.getLogger("DeepSpeed")


def create_logger() -> None:
    h = logging.StreamHandler(stream=sys.stdout)
    h.setFormatter(logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(h)


def log_dist(message: str, ranks=(0,)) -> None:
    r = dist.get_rank()
    if r in ranks:
        logger.info(f"[Rank {r}] {message}", stacklevel=2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-iters", type=int, default=60)
    ap.add_argument("--save-interval", type=int, default=20)
    ap.add_argument("--save", default="checkpoints")
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--data-wait", type=float, default=0.2)
    ap.add_argument("--fault", default="none")
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--fault-step", type=int, default=15)
    ap.add_argument("--leak-mb", type=int, default=128)
    a = ap.parse_args()
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    create_logger()
    torch.set_num_threads(1)
    timeout = timedelta(seconds=40)
    dist.init_process_group(backend="gloo", init_method="env://", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    tp = 2
    dp = world // tp
    tp_groups = [dist.new_group(list(range(i * tp, (i + 1) * tp)), timeout=timeout) for i in range(dp)]
    dp_groups = [dist.new_group(list(range(j, world, tp)), timeout=timeout) for j in range(tp)]
    tp_group, dp_group = tp_groups[rank // tp], dp_groups[rank % tp]
    print(f"[rank {rank}] hostname={host} local_rank={os.environ.get('LOCAL_RANK')} "
          f"dp_rank={rank // tp} tp_rank={rank % tp}")
    log_dist(f"world_size={world} data_parallel_size={dp} tensor_parallel_size={tp}")
    torch.manual_seed(1234)
    h = a.hidden
    w_in = torch.randn(h, h) * 0.02  # column-parallel: this tp rank's half of the output features
    w_in = w_in[(rank % tp) * (h // tp):(rank % tp + 1) * (h // tp)].clone().requires_grad_()
    w_out = (torch.randn(10, h) * 0.02).requires_grad_()
    params = [w_in, w_out]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999))
    g = torch.Generator().manual_seed(rank // tp)  # both tp ranks see the same batch
    kept = []
    for step in range(1, a.train_iters + 1):
        t0 = time.time()
        time.sleep(a.data_wait)
        x = torch.randn(a.micro_batch_size, h, generator=g)
        y = torch.randint(0, 10, (a.micro_batch_size,), generator=g)
        if a.fault == "exception" and rank == a.fault_rank and step == a.fault_step:
            x = x[:, : h // 2]  # a wrongly sharded input
        part = x @ w_in.t()  # [B, h/tp]
        full = [torch.zeros_like(part) for _ in range(tp)]
        dist.all_gather(full, part.detach(), group=tp_group)
        full[rank % tp] = part
        hid = torch.relu(torch.cat(full, dim=1))
        loss = F.cross_entropy(hid @ w_out.t(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p in params:
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= dp
        opt.step()
        if a.fault == "leak" and rank == a.fault_rank and step >= a.fault_step:
            kept.append(torch.ones(a.leak_mb * 1024 * 1024 // 4))
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        lt /= world
        print(f"[rank {rank}] step {step} done")  # buffered: lost if the rank dies
        if step % 10 == 0 or step <= 2:
            log_dist(f"step={step}, skipped=0, lr=[{a.lr}], mom=[(0.9, 0.999)]")
        log_dist(f"epoch=0|step={step}|loss={lt.item():.4f}|samples/sec={a.micro_batch_size * world / (time.time() - t0):.2f}")
        if a.save_interval and step % a.save_interval == 0:
            ck = os.path.join(a.save, f"global_step{step}")
            log_dist(f"Saving model checkpoint: {ck}")
            dcp.save({"w_in": w_in.detach(), "w_out": w_out.detach(), "step": torch.tensor(step)},
                     checkpoint_id=ck)
            log_dist(f"successfully saved checkpoint at step {step} to {ck}")
    log_dist(f"Training finished after {a.train_iters} steps")
    print(f"[rank {rank}] exiting")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
