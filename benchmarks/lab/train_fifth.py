"""A fifth training program for the recorded-incident lab, written unlike train.py, train_other.py,
train_third.py and train_fourth.py.

What a loguru/Lightning-style user script with FSDP2 looks like, as far as the logs go:

  * configuration only from environment variables (``MAX_STEPS``, ``CKPT_EVERY``, ``CKPT_DIR``, ``LOG_DIR``,
    ``FAULT_KIND``/``FAULT_RANK``/``FAULT_STEP``/``LEAK_MB``), no command-line arguments;
  * console logging in loguru's default format (loguru ``_defaults.py`` LOGURU_FORMAT:
    ``{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}``) on **stderr**, as
    loguru's default sink is ``sys.stderr``; every rank logs its start, only rank 0 the rest at INFO, the others
    WARNING and above; the lines carry no rank;
  * progress as PyTorch Lightning's ``TQDMProgressBar`` prints it on rank 0's **stdout** (lightning
    ``callbacks/progress/tqdm_progress.py``: ``file=sys.stdout``, BAR_FORMAT ``{l_bar}{bar}| {n_fmt}/{total_fmt}
    [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]``, description ``Epoch N``, postfix ``v_num=0,
    train_loss=...``): each refresh begins with a carriage return, no newline until the epoch's bar closes, so
    a whole epoch is one "line" of the job's output;
  * a JSON-lines log per rank written by the program to ``$LOG_DIR/rank{R}.jsonl``
    (``{"ts": ..., "level": ..., "rank": ..., "host": ..., "msg": ...}``, one record a step with its loss);
  * the model sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``, which runs on gloo/CPU: all-gathers of
    parameters, reduce-scatters of gradients), a 50 s timeout (``timeout=timedelta(seconds=50)``);
  * checkpoints: the full state dict gathered (``get_model_state_dict(..., full_state_dict=True)``), then rank 0
    writes it in a **checkpoint thread** (``torch.save`` to a temp file + ``os.replace``); a failed write is
    logged by the thread when it happens and raised in the training loop at the next save or at the end, when
    the loop waits for the pending write; resumes from the newest checkpoint (an elastic restart, a requeue);
  * ``@record`` (torchelastic): under torchrun the uncaught error goes to ``TORCHELASTIC_ERROR_FILE``.

Faults that live in the program (FAULT_KIND, on FAULT_RANK at FAULT_STEP, every attempt):
  exception: a label one past the number of classes reaches ``F.one_hot`` (torch's own ``Class values must be
      smaller than num_classes.``);
  leak: from FAULT_STEP on, the rank keeps LEAK_MB MiB per step (for the memory limit);
  segv: the rank reads address 0 through ctypes.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import glob
import json
import os
import socket
import sys
import time
from datetime import datetime, timedelta, timezone

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard

RANK = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
HOST = os.environ.get("SLURMD_NODENAME") or socket.gethostname()  # the lab's two "nodes" share one host
LEVELS = {"DEBUG": 10, "INFO": 20, "SUCCESS": 25, "WARNING": 30, "ERROR": 40}


class Logger:
    """The two sinks of the script: loguru's default console format on stderr, and a JSON-lines file."""

    def __init__(self, path: str, console_level: str):
        self.jsonl = open(path, "a", buffering=1)
        self.console = LEVELS[console_level]

    def _log(self, level: str, msg: str, depth: int = 2, **extra) -> None:
        now = datetime.now(timezone.utc)
        if LEVELS[level] >= self.console:
            f = sys._getframe(depth)
            sys.stderr.write(f"{now:%Y-%m-%d %H:%M:%S}.{now.microsecond // 1000:03d} | {level:<8} | "
                             f"__main__:{f.f_code.co_name}:{f.f_lineno} - {msg}\n")
            sys.stderr.flush()
        rec = {"ts": now.isoformat(), "level": level, "rank": RANK, "host": HOST, "msg": msg, **extra}
        self.jsonl.write(json.dumps(rec) + "\n")

    def info(self, msg, **kw):
        self._log("INFO", msg, **kw)

    def success(self, msg, **kw):
        self._log("SUCCESS", msg, **kw)

    def warning(self, msg, **kw):
        self._log("WARNING", msg, **kw)

    def exception(self, msg, **kw):
        import traceback
        self._log("ERROR", msg, exc=traceback.format_exc(), **kw)
        if LEVELS["ERROR"] >= self.console:
            traceback.print_exc(file=sys.stderr)  # loguru's logger.exception prints the traceback after the line


class Bar:
    """Lightning's training bar (TQDMProgressBar), written the way tqdm writes to a file: '\\r' + the bar."""

    def __init__(self, epoch: int, total: int):
        self.epoch, self.total, self.t0, self.n = epoch, total, time.time(), 0
        self.show(0, None)

    def show(self, n: int, loss: float | None) -> None:
        self.n = n
        el = time.time() - self.t0
        rate = n / el if el > 0 and n else None
        frac = n / self.total
        filled = int(frac * 10)
        part = " ▏▎▍▌▋▊▉"[int((frac * 10 - filled) * 8)] if filled < 10 else ""
        bar = ("█" * filled + part).ljust(10)
        rem = (self.total - n) / rate if rate else None
        fmt = lambda s: "?" if s is None else f"{int(s) // 60:02d}:{int(s) % 60:02d}"  # noqa: E731
        post = "v_num=0" + (f", train_loss={loss:.3f}" if loss is not None else "")
        rate_s = f"{rate:.2f}it/s" if rate else "?it/s"
        sys.stdout.write(f"\rEpoch {self.epoch}: {int(frac * 100):3d}%|{bar}| {n}/{self.total} "
                         f"[{fmt(el)}<{fmt(rem)}, {rate_s}, {post}]")
        sys.stdout.flush()

    def close(self) -> None:
        sys.stdout.write("\n")
        sys.stdout.flush()


class MLP(nn.Module):
    def __init__(self, d: int = 512, depth: int = 4, n_classes: int = 10):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(d, n_classes)
        self.n_classes = n_classes

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def env(name: str, default):
    return type(default)(os.environ.get(name, default))


def newest_checkpoint(ckpt_dir: str) -> tuple[int, str | None]:
    found = sorted((int(p.rsplit("step-", 1)[1].split(".")[0]), p) for p in glob.glob(os.path.join(ckpt_dir, "step-*.pt")))
    return found[-1] if found else (0, None)


def write_checkpoint(state: dict, path: str) -> str:
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


@record
def main() -> None:
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:  # srun, one task per rank
        os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                          LOCAL_RANK=os.environ["SLURM_LOCALID"])
    log_dir, ckpt_dir = env("LOG_DIR", "logs"), env("CKPT_DIR", "checkpoints")
    os.makedirs(log_dir, exist_ok=True)
    os.makedirs(ckpt_dir, exist_ok=True)
    log = Logger(os.path.join(log_dir, f"rank{RANK}.jsonl"), "INFO" if RANK == 0 else "WARNING")
    max_steps, every, spe = env("MAX_STEPS", 60), env("CKPT_EVERY", 20), env("STEPS_PER_EPOCH", 20)
    fk, fr, fs = env("FAULT_KIND", "none"), env("FAULT_RANK", 1), env("FAULT_STEP", 15)
    attempt = env("TORCHELASTIC_RESTART_COUNT", 0)
    try:
        torch.set_num_threads(1)
        dist.init_process_group(backend="gloo", timeout=timedelta(seconds=50))
        rank, world = dist.get_rank(), dist.get_world_size()
        log._log("INFO", f"Rank {rank}/{world} up on {HOST} (local rank {os.environ.get('LOCAL_RANK')}, pid "
                 f"{os.getpid()}, restart {attempt})", depth=1)
        torch.manual_seed(0)
        model = MLP()
        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        start, path = newest_checkpoint(ckpt_dir)
        if path:
            sd = torch.load(path, weights_only=True)
            set_model_state_dict(model, sd["model"], options=StateDictOptions(full_state_dict=True))
            log.info(f"Restored checkpoint {path} (step {start})")
        if rank == 0:
            n = sum(p.numel() for p in model.parameters())  # DTensors: global sizes
            log.info(f"FSDP2 model: {n:,} parameters sharded over {world} ranks")
        writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ckpt-writer")
        pending = None
        g = torch.Generator().manual_seed(1000 * rank + start)
        kept, bar, losses = [], None, []
        for step in range(start + 1, max_steps + 1):
            epoch, i = (step - 1) // spe, (step - 1) % spe
            if rank == 0 and bar is None:
                bar = Bar(epoch, spe)
            time.sleep(0.2)  # the input pipeline
            x = torch.randn(32, 512, generator=g)
            y = torch.randint(0, model.n_classes, (32,), generator=g)
            if fk == "exception" and rank == fr and step == fs:
                y[0] = model.n_classes  # a label the dataset should not have
            if fk == "segv" and rank == fr and step == fs:
                ctypes.string_at(0)
            target = F.one_hot(y, model.n_classes).float()
            loss = F.binary_cross_entropy_with_logits(model(x), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # FSDP2 reduce-scatters the gradients here
            opt.step()
            if fk == "leak" and rank == fr and step >= fs:
                kept.append(torch.ones(env("LEAK_MB", 128) * 1024 * 1024 // 4))
            lt = loss.detach().clone()
            dist.all_reduce(lt)
            lt /= world
            losses.append(lt.item())
            log.jsonl.write(json.dumps({"ts": datetime.now(timezone.utc).isoformat(), "level": "DEBUG", "rank": rank,
                                        "host": HOST, "msg": "train_step", "step": step, "loss": round(lt.item(), 5)}) + "\n")
            if bar is not None:
                bar.show(i + 1, lt.item())
                if i + 1 == spe or step == max_steps:
                    bar.close()
                    bar = None
                    log.info(f"Epoch {epoch} finished: train_loss_epoch={sum(losses) / len(losses):.4f}")
            if i + 1 == spe:
                losses = []
            if every and step % every == 0:
                if pending is not None:
                    pending.result()  # the previous write: raises its error here
                sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
                if rank == 0:
                    p = os.path.join(ckpt_dir, f"step-{step}.pt")
                    log.info(f"Saving checkpoint to {p} in the background")
                    pending = writer.submit(write_checkpoint, {"model": sd, "step": step}, p)

                    def done(f, p=p, step=step):
                        if f.exception() is not None:
                            try:
                                raise f.exception()
                            except Exception:
                                log.exception(f"Checkpoint write failed: {p}")
                        else:
                            log.success(f"Checkpoint saved: {p} (step {step}, {os.path.getsize(p) / 1e6:.1f} MB)")
                    pending.add_done_callback(done)
        if pending is not None:
            pending.result()
        writer.shutdown()
        log.success(f"Training finished: {max_steps} steps")
        dist.destroy_process_group()
    except Exception as e:
        log.exception(f"Training failed at rank {RANK}: {type(e).__name__}")
        raise


if __name__ == "__main__":
    main()
