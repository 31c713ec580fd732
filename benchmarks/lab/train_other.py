"""A second training program for the recorded-incident lab, written the way many users' scripts are.

Modelled on karpathy/nanoGPT train.py (karpathy/nanoGPT@005475c4 train.py): a small causal transformer
LM wrapped in DistributedDataParallel (gloo on CPU here), identity from the environment, and **only the
master process prints**, with plain `print` -- no logging module, no timestamps, no rank prefixes:

    step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}      (every eval_interval)
    saving checkpoint to {out_dir}                                                     (rank 0, torch.save
                                                                                        of out_dir/ckpt.pt)
    iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {running_mfu*100:.2f}%  (every log_interval)

The other ranks print nothing of their own; what they leave is what Python and torch write when they
fail (an uncaught exception's traceback on stderr). As in nanoGPT, nothing synchronises the ranks after
a checkpoint save: rank 0 writes, the others go on into the next step's DDP all_reduce and wait there.

Identity: RANK/LOCAL_RANK/WORLD_SIZE (torchrun) or, launched one task per rank by srun, SLURM_PROCID/
SLURM_LOCALID/SLURM_NTASKS (as srun-launched scripts commonly map them). No TORCH_DISTRIBUTED_DEBUG, no
Flight Recorder dump, no torchelastic @record: a plain script.

Faults that live in the program (the lab turns them on by flag; the ones from outside are run.py's):
  --fault exception: on --fault-rank at --fault-iter its batch holds a token id equal to the vocabulary
      size (an off-by-one in a tokenizer), so the embedding raises torch's own
      `IndexError: index out of range in self`; uncaught, the rank exits 1.
  --fault leak: from --fault-iter on, that rank keeps a --leak-mb MiB tensor per step (activations kept
      "for debugging"), for the lab's memory cgroup or RLIMIT_AS to stop.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def env_int(*names: str, default: int) -> int:
    for n in names:
        if os.environ.get(n) not in (None, ""):
            return int(os.environ[n])
    return default


class TinyGPT(nn.Module):
    """Token + position embeddings, pre-norm causal transformer blocks, a linear LM head."""

    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_embd: int, n_head: int):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(
            nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(block_size))

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x, src_mask=self.mask[:t, :t], is_causal=True)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def estimate_mfu(self, fwdbwd_per_iter: int, dt_s: float) -> float:
        # nanoGPT's estimate (PaLM appendix B), against a nominal 1 TFLOP/s CPU "peak"
        n = sum(p.numel() for p in self.parameters())
        flops_per_iter = 6 * n * self.block_size * fwdbwd_per_iter
        return flops_per_iter / dt_s / 1e12


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out_dir", default="out")
    p.add_argument("--max_iters", type=int, default=60)
    p.add_argument("--eval_interval", type=int, default=20)
    p.add_argument("--eval_iters", type=int, default=2)
    p.add_argument("--log_interval", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--timeout", type=float, default=30.0, help="process-group timeout, seconds")
    p.add_argument("--data_wait", type=float, default=0.15, help="simulated input-pipeline wait per step")
    p.add_argument("--fault", choices=["none", "exception", "leak"], default="none")
    p.add_argument("--fault_rank", type=int, default=1)
    p.add_argument("--fault_iter", type=int, default=15)
    p.add_argument("--leak_mb", type=int, default=128)
    args = p.parse_args()

    rank = env_int("RANK", "SLURM_PROCID", default=0)
    world_size = env_int("WORLD_SIZE", "SLURM_NTASKS", default=1)
    master_process = rank == 0
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=dt.timedelta(seconds=args.timeout))
    if master_process:
        os.makedirs(args.out_dir, exist_ok=True)
        print(f"tokens per iteration will be: {world_size * args.batch_size * args.block_size:,}")
    vocab_size = 256
    torch.manual_seed(1337)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    if master_process:
        print("Initializing a new model from scratch")
    model = TinyGPT(vocab_size, args.block_size, n_layer=2, n_embd=128, n_head=4)
    if master_process:
        print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    model = DDP(model)
    raw_model = model.module
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)

    # the "dataset": a deterministic token stream, a different shard per rank
    data = torch.randint(0, vocab_size, (200_000,), generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(1000 + rank)

    def get_batch(it: int):
        ix = torch.randint(len(data) - args.block_size - 1, (args.batch_size,), generator=gen)
        x = torch.stack([data[i:i + args.block_size] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix])
        if args.fault == "exception" and rank == args.fault_rank and it == args.fault_iter:
            x[0, 3] = vocab_size  # the tokenizer bug: an id one past the vocabulary
        time.sleep(args.data_wait)
        return x, y

    @torch.no_grad()
    def estimate_loss():
        out = {}
        raw_model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                x, y = get_batch(-1)
                losses[k] = raw_model(x, y)[1].item()
            out[split] = losses.mean()
        raw_model.train()
        return out

    always_save_checkpoint = True  # nanoGPT's default: save after every eval
    iter_num, best_val_loss, running_mfu = 0, 1e9, -1.0
    leak = []
    x, y = get_batch(iter_num)
    t0 = time.time()
    local_iter_num = 0
    while True:
        if iter_num % args.eval_interval == 0 and master_process:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss or always_save_checkpoint:
                best_val_loss = losses["val"]
                if iter_num > 0:
                    checkpoint = {"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(),
                                  "iter_num": iter_num, "best_val_loss": best_val_loss, "config": vars(args)}
                    print(f"saving checkpoint to {args.out_dir}")
                    torch.save(checkpoint, os.path.join(args.out_dir, "ckpt.pt"))
        _, loss = model(x, y)
        x, y = get_batch(iter_num + 1)
        loss.backward()  # DDP all_reduces the gradient buckets here
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.fault == "leak" and rank == args.fault_rank and iter_num >= args.fault_iter:
            leak.append(torch.ones(args.leak_mb * 1024 * 1024 // 4))
        t1 = time.time()
        dt_s, t0 = t1 - t0, t1
        if iter_num % args.log_interval == 0 and master_process:
            lossf = loss.item()
            if local_iter_num >= 5:
                mfu = raw_model.estimate_mfu(args.batch_size * world_size, dt_s)
                running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt_s * 1000:.2f}ms, mfu {running_mfu * 100:.2f}%")
        iter_num += 1
        local_iter_num += 1
        if iter_num > args.max_iters:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
