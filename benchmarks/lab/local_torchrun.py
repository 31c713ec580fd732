"""Record plain torchrun runs on one host, no Slurm, collected the way many users do: the
console output of `torchrun ... > train.log 2>&1` and nothing else.

The training script is deliberately unlike benchmarks/lab/train.py (print-based progress
from rank 0 only, no rank prefix, no per-rank log files, default TORCH_DISTRIBUTED_DEBUG),
so the analysis is checked on a format it was not written from. Each run's fault is made
from inside the worker at step 30 on FAULT_RANK:

  exc    a KeyError on that rank (software_error, that rank)
  kill   SIGKILL of that rank by itself (nothing says why: a weak OOM reading at most)
  stop   SIGSTOP of that rank (a hang: it never reports the timeout its peers hit)
  stall  the rank allocates host memory in a loop under `ulimit -v` and falls silent
  nodeloss  two torchrun agents ("nodes", 2 workers each, c10d rendezvous), each to its own
         console file; at step 25 the second agent and its workers are SIGKILLed from outside
         (killing the agent alone is not enough: its workers live on and finish)

Usage:  python benchmarks/lab/local_torchrun.py --out /tmp/torchrun_local [--only nodeloss]   (about 4 minutes)
The recordings in tests/data/torchrun_local/ were made with it (torch 2.13.0+cpu, gloo, 4
processes, 20 s process-group timeout); the script path in them was rewritten to
/home/user/job/train.py.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

FAULTS = {"exc": "exc", "kill": "kill", "stop": "stop", "stall": "oom"}


def worker() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    r, w = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(256, 256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fault = os.environ.get("FAULT", "")
    frank = int(os.environ.get("FAULT_RANK", "2"))
    for step in range(1, 200):
        loss = model(torch.randn(64, 256)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= w
        opt.step()
        if r == 0 and step % 5 == 0:
            print(f"Epoch 0 | step {step} | loss {loss.item():.4f} | {time.strftime('%H:%M:%S')}", flush=True)
        if step == 30 and r == frank:
            if fault == "exc":
                raise KeyError("missing_feature_column")
            if fault == "stop":
                os.kill(os.getpid(), 19)
            if fault == "kill":
                os.kill(os.getpid(), 9)
            if fault == "oom":
                hoard = []
                while True:
                    hoard.append(torch.ones(64 * 1024 * 1024))
        time.sleep(0.05)
    print(f"rank {r} done", flush=True)
    dist.destroy_process_group()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8_000_000 * 1024, 8_000_000 * 1024))


def record(out: Path, only: set[str]) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    for name, fault in FAULTS.items():
        if only and name not in only:
            continue
        job = out / name
        job.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, FAULT=fault, FAULT_RANK="2" if name in ("exc", "kill") else "1")
        port = str(29100 + random.randrange(400))
        cmd = [str(torchrun), "--nproc-per-node", "4", "--master-port", port, str(Path(__file__).resolve()), "--worker"]
        with open(job / "train.log", "wb") as log:
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=150,
                                    preexec_fn=_limit_memory if name == "stall" else None).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        with open(job / "train.log", "a") as log:
            log.write(f"exit {rc}\n")
        subprocess.run(["pkill", "-CONT", "-f", "local_torchrun.py --worker"], check=False)
        print(name, rc)
    if not only or "nodeloss" in only:
        nodeloss(out / "nodeloss", torchrun)


def _tree(pid: int) -> list[int]:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [pid] + [d for k in kids for d in _tree(int(k))]


def nodeloss(job: Path, torchrun: Path) -> None:
    job.mkdir(parents=True, exist_ok=True)
    port = str(29100 + random.randrange(400))
    cmd = [str(torchrun), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "nodeloss", str(Path(__file__).resolve()), "--worker"]
    env = dict(os.environ, FAULT="")
    logs = [open(job / f"node{i}.log", "wb") for i in (0, 1)]
    agents = []
    for log in logs:
        agents.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        time.sleep(1)
    try:
        deadline = time.time() + 150
        while time.time() < deadline and not any(b"step 25 " in (job / f"node{i}.log").read_bytes() for i in (0, 1)):
            time.sleep(0.5)
        for pid in _tree(agents[1].pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        agents[0].wait(timeout=150)
    finally:
        for a in agents:
            a.kill()
        for log in logs:
            log.close()
    print("nodeloss", agents[0].returncode)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
        ap.add_argument("--out", type=Path, required=True)
        ap.add_argument("--only", action="append", default=[], help="a case name (repeatable): exc, kill, stop, stall, nodeloss")
        args = ap.parse_args()
        record(args.out, set(args.only))
