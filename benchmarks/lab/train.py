"""A real torch.distributed data-parallel training job for the recorded-incident lab.

gloo backend on CPU, one process per rank; launched either by `srun` (one task per rank, ranks from
SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) or by `torchrun` (RANK/WORLD_SIZE/LOCAL_RANK). It is a
small MLP regression trained with DistributedDataParallel; every step is a real forward/backward
and a real gradient all_reduce, paced to a few hundred ms.

Log formats (verbatim templates from upstream, so the lab's logs look like real jobs' logs):
  * --log-format megatron: the progress line of Megatron-LM `training_log()`
    (NVIDIA/Megatron-LM megatron/training/training.py @ d98e8a64, lines 3567-3653: " [%Y-%m-%d
    %H:%M:%S.%f] iteration {:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms):
    {:.1f} | learning rate: {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | loss scale: {:.1f}
    | grad norm: {:.3f} | number of skipped iterations: {:3d} | number of nan iterations: {:3d} |",
    printed by the last rank only: print_rank_last) and its checkpoint lines
    (megatron/training/checkpointing.py lines 693-696 and 1085-1091: "[ts] saving checkpoint at
    iteration {:7d} to DIR in torch format" / "  [ts] successfully saved checkpoint from iteration
    {:7d} to DIR [ t 1/1, gtp_remat 1/1, p 1/1 ]", layout iter_{:07d}/mp_rank_00/model_optim_rng.pt
    and latest_checkpointed_iteration.txt, lines 240-270 and 375-378).
  * --log-format hf: the dict that transformers' PrinterCallback.on_log prints (`print(logs)`, after
    popping total_flos; huggingface/transformers src/transformers/trainer_callback.py), e.g.
    {'loss': 2.3456, 'grad_norm': 1.2345, 'learning_rate': 4.9e-05, 'epoch': 0.05}, rank 0 only.
  * --log-format plain: "step N loss X" as nanoGPT-style scripts print it.
Every rank also writes Python `logging` records with %(asctime)s, level, rank/node identity, to its
own logs/rank{RANK}.log and to stdout (format modelled on the HF examples' basicConfig
"%(asctime)s - %(levelname)s - %(name)s - %(message)s", with a rank/node prefix).

Faults that live in the program (the lab turns them on by flag; the ones injected from outside
are done by run.py): --fault exception|shape|collmismatch|leak --fault-rank R --fault-step S.
On any exception the rank dumps its Flight Recorder buffer (torch 2.13:
torch._C._distributed_c10d._dump_fr_trace(), the renamed _dump_nccl_trace) to
$TORCH_FR_DUMP_TEMP_FILE<rank> and re-raises; main() is wrapped in torchelastic's @record so under
torchrun the exception lands in $TORCHELASTIC_ERROR_FILE (error.json).
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import logging
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def env_int(*names, default=None):
    for n in names:
        if os.environ.get(n) not in (None, ""):
            return int(os.environ[n])
    return default


RANK = env_int("RANK", "SLURM_PROCID", default=0)
WORLD = env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
LOCAL_RANK = env_int("LOCAL_RANK", "SLURM_LOCALID", default=0)
NODE = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
log = logging.getLogger("train")


def setup_logging(logdir: str) -> None:
    os.makedirs(logdir, exist_ok=True)
    fmt = logging.Formatter(
        f"%(asctime)s - %(levelname)s - [rank {RANK}/{WORLD}] [{NODE}] %(name)s - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fh = logging.FileHandler(os.path.join(logdir, f"rank{RANK}.log"))
    sh = logging.StreamHandler(sys.stdout)
    for h in (fh, sh):
        h.setFormatter(fmt)
        root.addHandler(h)


def now_str() -> str:
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")


class MLP(nn.Module):
    def __init__(self, d=256, h=1024):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d, h), nn.Linear(h, h // 2), nn.Linear(h // 2, d)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


class Batches(torch.utils.data.IterableDataset):
    """The same synthetic batches, made in a DataLoader worker process. With ``leak`` (the
    loader_leak fault on this rank) the worker keeps ``leak_mb`` MiB per batch from fault_step
    on: a cache that grows without bound, as an augmentation pipeline holding decoded images."""

    def __init__(self, args, first: int, leak: bool):
        self.args, self.first, self.leak = args, first, leak

    def __iter__(self):
        g = torch.Generator().manual_seed(1000 + RANK)
        kept = []
        for it in range(self.first, self.args.iters + 1):
            time.sleep(self.args.step_sleep)
            if self.leak and it >= self.args.fault_step:
                kept.append(torch.ones(self.args.leak_mb * 1024 * 1024 // 4))
            yield torch.randn(self.args.micro_batch, 256, generator=g)


def save_checkpoint(args, it, model, opt):
    # Megatron-LM layout and messages (see module docstring); only rank 0 writes (pure data parallel)
    if RANK == 0:
        print(f"[{now_str()}] saving checkpoint at iteration {it:7d} to {args.save} in torch format",
              flush=True)
        log.info("saving checkpoint at iteration %d to %s", it, args.save)
        d = os.path.join(args.save, f"iter_{it:07d}", "mp_rank_00")
        os.makedirs(d, exist_ok=True)
        obj = {"iteration": it, "model": model.state_dict(), "optimizer": opt.state_dict(),
               "rng_state": torch.get_rng_state()}
        path = os.path.join(d, "model_optim_rng.pt")
        if args.save_slow > 0:
            # slow storage: the same bytes, written in 20 chunks spread over save_slow seconds
            buf = io.BytesIO()
            torch.save(obj, buf)
            data, n = buf.getvalue(), 20
            with open(path, "wb") as f:
                for i in range(n):
                    f.write(data[i * len(data) // n:(i + 1) * len(data) // n])
                    f.flush()
                    time.sleep(args.save_slow / n)
        else:
            torch.save(obj, path)
        with open(os.path.join(args.save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(it))
    dist.barrier()
    if RANK == 0:
        print(f"  [{now_str()}] successfully saved checkpoint from iteration {it:7d} to {args.save} "
              f"[ t 1/1, gtp_remat 1/1, p 1/1 ]", flush=True)
        log.info("successfully saved checkpoint at iteration %d to %s", it, args.save)


def load_checkpoint(args, model, opt) -> int:
    tracker = os.path.join(args.save, "latest_checkpointed_iteration.txt")
    if not os.path.exists(tracker):
        log.info("could not find the metadata file %s; will not load any checkpoints", tracker)
        return 0
    it = int(open(tracker).read().strip())
    path = os.path.join(args.save, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt")
    log.info("loading checkpoint from %s at iteration %d", args.save, it)
    sd = torch.load(path, weights_only=False)
    model.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optimizer"])
    log.info("successfully loaded checkpoint from %s [ t 1/1, p 1/1 ] at iteration %d", args.save, it)
    return it


def dump_flight_recorder() -> None:
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return
    try:
        data = torch._C._distributed_c10d._dump_fr_trace()
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        with open(f"{prefix}{RANK}", "wb") as f:
            f.write(data)
        log.error("Flight Recorder trace dumped to %s%d (%d bytes)", prefix, RANK, len(data))
    except Exception as e:  # the dump must never hide the real error
        log.error("Flight Recorder dump failed: %r", e)


def progress(args, it, loss, gnorm, lr, dt_ms):
    gbs = args.micro_batch * WORLD
    if args.log_format == "megatron":
        line = (f" [{now_str()}] iteration {it:8d}/{args.iters:8d} | consumed samples: {it * gbs:12d} |"
                f" elapsed time per iteration (ms): {dt_ms:.1f} | learning rate: {lr:.6E} |"
                f" global batch size: {gbs:5d} | lm loss: {loss:.6E} | loss scale: 1.0 |"
                f" grad norm: {gnorm:.3f} | number of skipped iterations:   0 |"
                f" number of nan iterations:   0 |")
        if RANK == WORLD - 1:  # print_rank_last
            print(line, flush=True)
        log.info(line.strip())
    elif args.log_format == "hf":
        logs = {"loss": round(loss, 4), "grad_norm": round(gnorm, 4), "learning_rate": lr,
                "epoch": round(it / args.iters, 2)}
        if RANK == 0:  # PrinterCallback prints on the local main process of rank 0's node
            print(logs, flush=True)
        log.info("%s", logs)
    else:
        log.info("step %d loss %.4f", it, loss)


@record
def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--save-interval", type=int, default=20)
    p.add_argument("--save", default="ckpt")
    p.add_argument("--logdir", default="logs")
    p.add_argument("--log-format", choices=["megatron", "hf", "plain"], default="megatron")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--step-sleep", type=float, default=0.2, help="simulated input-pipeline wait per step")
    p.add_argument("--timeout", type=float, default=30.0, help="process-group timeout, seconds")
    p.add_argument("--fault", choices=["none", "exception", "shape", "collmismatch", "leak", "uneven", "loader_leak",
                                       "segv", "uneven_exit"], default="none")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="read batches through a torch DataLoader with this many worker processes (0: in the loop)")
    p.add_argument("--fault-rank", type=int, default=3)
    p.add_argument("--fault-step", type=int, default=15)
    p.add_argument("--leak-mb", type=int, default=96)
    p.add_argument("--save-slow", type=float, default=0.0,
                   help="write each checkpoint in 20 chunks spread over this many seconds (slow storage)")
    p.add_argument("--broadcast-batch", action="store_true",
                   help="rank 0 broadcasts each iteration's batch seed before the step (as Megatron's "
                        "tensor_parallel.broadcast_data hands the batch from one rank to its group): the first "
                        "collective of every iteration is then a broadcast, not an all_reduce")
    p.add_argument("--ddp", action="store_true",
                   help="wrap in DistributedDataParallel (default: explicit flat-gradient all_reduce). "
                        "torch 2.13.0+cpu segfaults in DDP's constructor (Logger.set_construction_data_and_log) "
                        "when TORCH_DISTRIBUTED_DEBUG=DETAIL, so DDP runs use TORCH_DISTRIBUTED_DEBUG=INFO")
    args = p.parse_args()

    setup_logging(args.logdir)
    torch.set_num_threads(1)
    log.info("started pid=%d node=%s host=%s rank=%d local_rank=%d world_size=%d slurm_job_id=%s",
             os.getpid(), NODE, socket.gethostname(), RANK, LOCAL_RANK, WORLD,
             os.environ.get("SLURM_JOB_ID"))
    log.info("args: %s", vars(args))
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD,
                            timeout=dt.timedelta(seconds=args.timeout))
    log.info("initialized process group backend=gloo rank=%d world_size=%d timeout=%ss",
             dist.get_rank(), dist.get_world_size(), args.timeout)

    torch.manual_seed(1234)
    model = DDP(MLP()) if args.ddp else MLP()
    net = model.module if args.ddp else model
    if not args.ddp:  # same initial weights everywhere, as DDP's constructor would broadcast them
        for t in net.state_dict().values():
            dist.broadcast(t, src=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start = load_checkpoint(args, net, opt)
    g = torch.Generator().manual_seed(1000 + RANK)
    w_true = torch.randn(256, 256, generator=torch.Generator().manual_seed(7)) / 20
    leak = []
    # uneven: this rank's data shard holds only fault_step batches, so its loop ends first
    last_it = args.fault_step if args.fault in ("uneven", "uneven_exit") and RANK == args.fault_rank else args.iters
    batches = None
    if args.loader_workers > 0:
        ds = Batches(args, start + 1, RANK == args.fault_rank and args.fault == "loader_leak")
        batches = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=args.loader_workers))
    done = start
    try:
        for it in range(start + 1, last_it + 1):
            t0 = time.time()
            if args.broadcast_batch:  # rank 0 reads the batch and hands it to the others
                seed = torch.tensor([1000 * it + 1 if RANK == 0 else 0], dtype=torch.int64)
                dist.broadcast(seed, src=0)
                g.manual_seed(int(seed.item()) + RANK)
            if batches is not None:
                x = next(batches)  # the worker sleeps step_sleep per batch (the input pipeline)
            else:
                time.sleep(args.step_sleep)  # input pipeline
                x = torch.randn(args.micro_batch, 256, generator=g)
            if args.fault == "segv" and RANK == args.fault_rank and it == args.fault_step:
                # a crash in native code (a C extension reading a bad pointer): SIGSEGV, no Python traceback
                import ctypes
                ctypes.string_at(0)
            y = x @ w_true
            faulty = RANK == args.fault_rank and it >= args.fault_step
            if args.fault == "exception" and faulty:
                # a data bug: the loader drops one target row on this rank; F.mse_loss/cross_entropy
                # raise by themselves. cross_entropy gives the real "Expected input batch_size" error.
                tgt = torch.randint(0, 256, (args.micro_batch - 1,), generator=g)
                loss = F.cross_entropy(model(x), tgt)
            else:
                loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # with --ddp, DDP all_reduces the gradient buckets here
            if not args.ddp:
                grads = [q.grad for q in net.parameters()]
                flat = torch.cat([q.reshape(-1) for q in grads])
                dist.all_reduce(flat)
                flat /= WORLD
                off = 0
                for q in grads:
                    q.copy_(flat[off:off + q.numel()].view_as(q))
                    off += q.numel()
            gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            opt.step()
            if args.fault == "leak" and faulty:
                # a leak: activations kept for "debugging" every step (each ~leak_mb MiB)
                leak.append(torch.ones(args.leak_mb * 1024 * 1024 // 4))
                log.info("debug buffer holds %d tensors (%d MiB)", len(leak), len(leak) * args.leak_mb)
            # metrics reduction: [loss, n_samples]; the shape bug adds a field on one rank only
            stats = torch.tensor([loss.item(), float(args.micro_batch)])
            if args.fault == "shape" and faulty and it == args.fault_step:
                stats = torch.tensor([loss.item(), float(args.micro_batch), gnorm])
            if args.fault == "collmismatch" and faulty and it == args.fault_step:
                # this rank gathers per-rank losses while its peers all_reduce
                out = [torch.zeros_like(stats) for _ in range(WORLD)]
                dist.all_gather(out, stats)
                stats = torch.stack(out).sum(0)
            else:
                dist.all_reduce(stats)
            mean_loss = stats[0].item() / WORLD
            progress(args, it, mean_loss, gnorm, 1e-4, (time.time() - t0) * 1000.0)
            if args.save_interval and it % args.save_interval == 0:
                save_checkpoint(args, it, net, opt)
            done = it
        log.info("training finished after %d iterations", done)
        if args.fault == "uneven_exit" and RANK == args.fault_rank:
            return  # a script that simply ends when its data does: exit 0, no barrier
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:
        log.error("rank %d failed: %s: %s", RANK, type(e).__name__, e)
        dump_flight_recorder()
        raise


if __name__ == "__main__":
    main()
