"""A third training program for the recorded-incident lab, written unlike train.py and train_other.py.

What a Hydra/Lightning-style user script looks like, as far as the logs go:

  * configuration as Hydra-style ``key=value`` overrides on the command line (``trainer.max_steps=60
    fault.kind=exception``), no argparse flags;
  * Python ``logging`` with Hydra's default job-logging format (hydra/conf/hydra/job_logging/default.yaml:
    ``[%(asctime)s][%(name)s][%(levelname)s] - %(message)s``), **each rank to its own file written by the program
    itself** (``logs/train_rank{RANK}.log``, not Slurm's ``-o``); only rank 0 also logs to stdout, the other ranks
    put only warnings and errors on stderr; the lines carry no rank prefix (the file name is the rank);
  * **only rank 0 logs progress**, as ``Epoch 1/3 | Step 20/60 | loss=0.3123 | lr=1.00e-03 | 0.41s/it`` and an
    epoch summary ``Epoch 1/3 done | train_loss=0.3012 | 8.2s``;
  * identity only through ``init_method="env://"`` (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; launched one task
    per rank by srun it copies SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID into them first), a 45 s process-group
    timeout (``timeout=timedelta(seconds=45)``), a small CNN in DistributedDataParallel, no
    TORCH_DISTRIBUTED_DEBUG, no Flight Recorder, no torchelastic ``@record``;
  * checkpoints Lightning-named (``checkpoints/epoch=0-step=20.ckpt``) written by rank 0 with torch.save to a
    temp file and ``os.replace`` (atomic rename), then a ``dist.barrier()`` on every rank;
  * an error is handled as Hydra's ``run_and_report`` does: ``Error executing job with overrides: [...]`` (logged),
    the traceback on stderr, ``Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.`` and
    ``sys.exit(1)`` -- the exception never reaches ``sys.excepthook``, so torch's ``[rankN]:`` prefix is absent.

Faults that live in the program (the lab turns them on by override; the ones from outside are run.py's):
  fault.kind=exception: on fault.rank at fault.step a 3-channel (RGB) batch reaches the 1-channel conv
      (torch's own ``Given groups=1, weight of size ... expected input[...] to have 1 channels, but got 3
      channels instead``);
  fault.kind=leak: from fault.step on, that rank keeps fault.leak_mb MiB per step (for the memory cgroup);
  fault.kind=collmismatch: at fault.step that rank all_gathers the step's loss while its peers all_reduce it.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DEFAULTS = {
    "trainer.max_epochs": 3, "trainer.steps_per_epoch": 20, "trainer.save_every_n_steps": 20,
    "trainer.ckpt_dir": "checkpoints", "trainer.log_dir": "logs", "trainer.data_wait": 0.2,
    "trainer.timeout_s": 45.0, "optim.lr": 1e-3, "data.batch_size": 16,
    "fault.kind": "none", "fault.rank": 1, "fault.step": 15, "fault.leak_mb": 128,
}
log = logging.getLogger(__name__)


def parse_overrides(argv: list[str]) -> tuple[dict, list[str]]:
    cfg = dict(DEFAULTS)
    for a in argv:
        k, _, v = a.partition("=")
        if k not in cfg:
            sys.exit(f"Could not override '{k}'.\nKey '{k}' is not in struct")
        cfg[k] = type(cfg[k])(v) if not isinstance(cfg[k], bool) else v.lower() == "true"
    return cfg, argv


def setup_logging(log_dir: str, rank: int) -> None:
    os.makedirs(log_dir, exist_ok=True)
    fmt = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fh = logging.FileHandler(os.path.join(log_dir, f"train_rank{rank}.log"))
    fh.setFormatter(fmt)
    root.addHandler(fh)
    sh = logging.StreamHandler(sys.stdout if rank == 0 else sys.stderr)
    sh.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    sh.setFormatter(fmt)
    root.addHandler(sh)


class SmallCNN(nn.Module):
    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def save_checkpoint(cfg, model, opt, epoch: int, step: int, rank: int) -> None:
    if rank == 0:
        os.makedirs(cfg["trainer.ckpt_dir"], exist_ok=True)
        path = os.path.join(cfg["trainer.ckpt_dir"], f"epoch={epoch}-step={step}.ckpt")
        tmp = path + ".tmp"
        log.info("Saving checkpoint to %s", path)
        t0 = time.time()
        torch.save({"epoch": epoch, "global_step": step, "state_dict": model.module.state_dict(),
                    "optimizer_states": [opt.state_dict()]}, tmp)
        os.replace(tmp, path)  # atomic: a reader never sees half a checkpoint
        log.info("Checkpoint saved: %s (%.1f MB, %.2fs)", path, os.path.getsize(path) / 1e6, time.time() - t0)
    dist.barrier()


def train(cfg: dict) -> None:
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:  # srun, one task per rank
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    setup_logging(cfg["trainer.log_dir"], rank)
    torch.set_num_threads(1)
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # the lab's two "nodes" share a host
    dist.init_process_group(backend="gloo", init_method="env://",
                            timeout=timedelta(seconds=cfg["trainer.timeout_s"]))
    log.info("Initialized distributed: rank %d of %d (local rank %s) on %s, pid %d",
             rank, world, os.environ.get("LOCAL_RANK"), host, os.getpid())
    torch.manual_seed(0)
    model = DDP(SmallCNN())
    opt = torch.optim.Adam(model.parameters(), lr=cfg["optim.lr"])
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        log.info("Model: SmallCNN, %s trainable parameters", f"{n:,}")
    g = torch.Generator().manual_seed(100 + rank)
    epochs, spe, bs = cfg["trainer.max_epochs"], cfg["trainer.steps_per_epoch"], cfg["data.batch_size"]
    total = epochs * spe
    fk, fr, fs = cfg["fault.kind"], cfg["fault.rank"], cfg["fault.step"]
    kept = []
    step = 0
    for epoch in range(epochs):
        t_ep, losses = time.time(), []
        for _ in range(spe):
            step += 1
            t0 = time.time()
            time.sleep(cfg["trainer.data_wait"])  # the input pipeline
            x = torch.randn(bs, 1, 28, 28, generator=g)
            y = torch.randint(0, 10, (bs,), generator=g)
            if fk == "exception" and rank == fr and step == fs:
                x = torch.randn(bs, 3, 28, 28, generator=g)  # an RGB image in a grayscale dataset
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all_reduces the gradient buckets here
            opt.step()
            if fk == "leak" and rank == fr and step >= fs:
                kept.append(torch.ones(cfg["fault.leak_mb"] * 1024 * 1024 // 4))
            lt = loss.detach().clone()
            if fk == "collmismatch" and rank == fr and step == fs:
                parts = [torch.zeros_like(lt) for _ in range(world)]
                dist.all_gather(parts, lt)
                lt = torch.stack(parts).sum()
            else:
                dist.all_reduce(lt)
            lt /= world
            losses.append(lt.item())
            if rank == 0:
                log.info("Epoch %d/%d | Step %d/%d | loss=%.4f | lr=%.2e | %.2fs/it", epoch + 1, epochs, step, total,
                         lt.item(), cfg["optim.lr"], time.time() - t0)
            if cfg["trainer.save_every_n_steps"] and step % cfg["trainer.save_every_n_steps"] == 0:
                save_checkpoint(cfg, model, opt, epoch, step, rank)
        if rank == 0:
            log.info("Epoch %d/%d done | train_loss=%.4f | %.1fs", epoch + 1, epochs, sum(losses) / len(losses),
                     time.time() - t_ep)
    if rank == 0:
        log.info("Training complete: %d steps", step)
    dist.destroy_process_group()


def main() -> None:
    cfg, overrides = parse_overrides(sys.argv[1:])
    try:
        train(cfg)
    except Exception:  # what Hydra's run_and_report does with an exception from the task function
        log.error("Error executing job with overrides: %s", overrides)
        traceback.print_exc(file=sys.stderr)
        sys.stderr.write("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
        sys.stderr.flush()
        sys.exit(1)


if __name__ == "__main__":
    main()
