"""Benchmark of `crashscope repro` on this machine (CPU, gloo, 127.0.0.1).

1. Wall time: the plan from a report, a clean 4-process local run, and the isolation of each
   injected fault (slow, exiting, hung rank), each with the rank it named.
2. busbw of a clean gloo all_reduce at 1 MiB and 64 MiB as `crashscope repro` reports it, beside
   the same op timed by hand: 4 plain torch.distributed processes, a barrier, N calls between two
   perf_counter() reads, the slowest rank's mean, busbw = S/t * 2(n-1)/n (nccl-tests).

    python benchmarks/repro_bench.py [--iters 10] [--reps 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = 4


def hand_worker(rank: int, world: int, port: int, nbytes: int, iters: int, warmup: int) -> None:
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    x = torch.zeros(nbytes // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(x)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"time": t.item()}))
    dist.destroy_process_group()


def hand_timed(nbytes: int, iters: int, warmup: int) -> float:
    from crashscope.repro.launch import free_port

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "--hand-worker", str(r), str(port), str(nbytes), str(iters), str(warmup)],
                              stdout=subprocess.PIPE, text=True, env=env) for r in range(N)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    return float(json.loads(outs[0].strip().splitlines()[-1])["time"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--hand-worker", nargs=5, type=int, metavar=("RANK", "PORT", "BYTES", "ITERS", "WARMUP"))
    a = ap.parse_args()
    if a.hand_worker:
        r, port, nbytes, iters, warmup = a.hand_worker
        hand_worker(r, N, port, nbytes, iters, warmup)
        return 0

    from crashscope.repro import bandwidths
    from crashscope.repro.bisect import Isolation, Settings
    from crashscope.repro.launch import close_fork_server
    from crashscope.repro.plan import direct_plan, plan_from_report

    out: dict = {"machine": {"cpus": os.cpu_count(), "load": os.getloadavg()}}
    t0 = time.perf_counter()
    rep = json.loads((ROOT / "tests/golden/reports/fabric_timeout_ib_node002.json").read_text())
    plan_from_report(rep)
    out["plan_s"] = round(time.perf_counter() - t0, 4)

    tmp = Path(tempfile.mkdtemp(prefix="repro-bench-"))
    plan = direct_plan("all_reduce", 1 << 20, "float32", nproc=N, nodes=None, gpus_per_node=1)

    def isolate(inject: list[str], name: str, nbytes: int | None = None, iters: int = 5) -> dict:
        p = plan if nbytes is None else direct_plan("all_reduce", nbytes, "float32", nproc=N, nodes=None, gpus_per_node=1)
        s = Settings(iters=iters, warmup=2, timeout=3.0, inject=inject, sweep=[], results=tmp / name)
        t = time.perf_counter()
        res = Isolation(p, s).investigate()
        res["wall_s"] = round(time.perf_counter() - t, 3)
        return res

    # the first run pays the fork server's one `import torch`; measured apart
    t = time.perf_counter()
    isolate([], "warm", 4096, 1)
    out["fork_server_start_s"] = round(time.perf_counter() - t, 3)
    clean = isolate([], "clean")
    out["clean_4proc_run_s"] = clean["wall_s"]
    out["faults"] = {}
    for inj in ("2:delay=0.25", "1:exit", "3:hang"):
        r = isolate([inj], inj.replace(":", "_").replace("=", "_"))
        out["faults"][inj] = {"verdict": r["verdict"], "named_ranks": r["implicated"]["ranks"], "runs": len(r["runs"]),
                              "wall_s": r["wall_s"], "full_status": r["runs"][0]["status"]}
    out["plan_plus_run_plus_bisect_s"] = round(out["plan_s"] + clean["wall_s"] + max(f["wall_s"] for f in out["faults"].values()), 3)

    out["busbw"] = {}
    for label, nbytes in (("1MiB", 1 << 20), ("64MiB", 64 << 20)):
        # interleaved and best of --reps each: the machine is shared, the best run is the least disturbed
        runs, hands = [], []
        for rep_i in range(a.reps):
            runs.append(isolate([], f"bw_{label}_{rep_i}", nbytes, a.iters)["runs"][0])
            hands.append(hand_timed(nbytes, a.iters, 2))
        run = min(runs, key=lambda r: r["time"])
        t_hand = min(hands)
        _alg, bus_hand = bandwidths("all_reduce", N, nbytes, t_hand)
        out["busbw"][label] = {"repro_time_s": run["time"], "repro_busbw_GBps": run["busbw"], "hand_time_s": t_hand,
                               "hand_busbw_GBps": bus_hand, "ratio": (run["busbw"] / bus_hand) if bus_hand else None,
                               "repro_times_s": [r["time"] for r in runs], "hand_times_s": hands}
    close_fork_server()
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
