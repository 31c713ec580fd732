"""The collective re-run: ``python -m crashscope.repro.worker`` (one process per rank).

The only module of crashscope that imports torch. Started by :mod:`crashscope.repro.launch`
as local processes (``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set by the launcher), under torchrun
(the same variables, set by torch.distributed.run) or under ``srun`` (``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURMD_NODENAME``: Slurm's task environment, srun(1)).

Per message size (the suspect size and a small sweep around it): one validation call with
known values per rank, ``--warmup`` untimed calls, a barrier, then ``--iters`` timed calls.
Each timed call is bracketed by wall-clock stamps taken on the host (``time.time()`` on entry,
so the parent can see which rank arrives late) and, for NCCL, closed by
``torch.cuda.synchronize()`` so the time covers the transfer, not the launch. Sizes follow
nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the whole array, so AllGather sends ``S/n`` per
rank and ReduceScatter receives ``S/n``.

Writes ``rank<R>.progress`` (phase, size, iteration; rewritten after each call, so the
parent's watchdog sees who stopped moving) and at the end ``rank<R>.json`` into
``--results``; both by write-then-rename, so a reader never sees half a file.

``--inject ORIG:delay=SECONDS|hang|exit`` (a testing aid) makes the worker whose rank in the
original, full group is ORIG sleep before every call, stop forever before its first call, or
exit with status 1 before its first call.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from typing import Any

from crashscope.repro import DTYPES, OPS, canonical_dtype

PROGRESS_S = 0.2


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m crashscope.repro.worker")
    p.add_argument("--op", required=True, choices=OPS)
    p.add_argument("--sizes", required=True, help="bytes per run (S, nccl-tests' size), comma-separated")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--results", required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--unit-ids", required=True, help="this group's units, by index in the full group")
    p.add_argument("--unit-names", default="", help="srun: the node name of each unit, in --unit-ids order")
    p.add_argument("--per-unit", type=int, default=1, help="ranks per unit (GPUs per node under srun)")
    p.add_argument("--inject", action="append", default=[])
    return p.parse_args(argv)


def _identity(a: argparse.Namespace) -> dict[str, Any]:
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", rank))  # the device index on this host
        slot = rank % a.per_unit
        position = rank // a.per_unit
        via = "env"
    elif "SLURM_PROCID" in env:
        rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        local = slot = int(env.get("SLURM_LOCALID", 0))
        names = [n for n in a.unit_names.split(",") if n]
        node = env.get("SLURMD_NODENAME", "")
        # srun orders tasks by its own node order, not ours: find the unit by node name
        position = names.index(node) if node in names else rank // a.per_unit
        via = f"slurm:{node}"
    else:
        raise SystemExit("worker: no RANK/WORLD_SIZE or SLURM_PROCID in the environment")
    ids = [int(x) for x in a.unit_ids.split(",")]
    unit = ids[position]
    return {"rank": rank, "world": world, "local_rank": local, "unit": unit,
            "orig_rank": unit * a.per_unit + slot, "via": via, "host": socket.gethostname(), "pid": os.getpid()}


def _injection(a: argparse.Namespace, orig_rank: int) -> tuple[str | None, float]:
    for spec in a.inject:
        who, _, what = spec.partition(":")
        if who.strip() != str(orig_rank):
            continue
        if what.startswith("delay="):
            return "delay", float(what.split("=", 1)[1])
        if what in ("hang", "exit"):
            return what, 0.0
    return None, 0.0


class _Files:
    def __init__(self, results: str, rank: int):
        self.results, self.rank = results, rank

    def _put(self, name: str, data: dict[str, Any]) -> None:
        path = os.path.join(self.results, name)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    last: tuple[str, int | None, float] = ("", None, 0.0)

    def progress(self, phase: str, size: int | None = None, it: int | None = None) -> None:
        # a new phase or size at once, else at most every PROGRESS_S: a write between timed calls
        # makes the peers wait, and the watchdog needs a sign of life per timeout, not per call
        now = time.monotonic()
        if (phase, size) == self.last[:2] and now - self.last[2] < PROGRESS_S:
            return
        self.last = (phase, size, now)
        self._put(f"rank{self.rank}.progress", {"phase": phase, "size": size, "iter": it, "t": time.time()})

    def result(self, data: dict[str, Any]) -> None:
        self._put(f"rank{self.rank}.json", data)


def _make(torch: Any, op: str, size: int, n: int, rank: int, dtype: Any, elem: int, device: Any) -> tuple[Any, Any, int]:
    """(input, output, bytes actually moved as S) with rank-known values for validation."""
    count = max(1, size // elem)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(n, count - count % n)  # S splits evenly into n chunks
    chunk = count // n
    if op == "all_reduce" or op == "broadcast":
        x = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        return x, x, count * elem
    if op == "all_gather":
        x = torch.full((chunk,), float(rank + 1), dtype=dtype, device=device)
        return x, torch.empty((count,), dtype=dtype, device=device), count * elem
    if op == "reduce_scatter":
        x = torch.full((count,), float(rank + 1), dtype=dtype, device=device)
        return x, torch.empty((chunk,), dtype=dtype, device=device), count * elem
    # all_to_all: chunk j of rank r holds r*n + j + 1 (small integers: exact in bf16 up to 256)
    vals = torch.arange(n, dtype=torch.float32, device=device).add_(rank * n + 1) % 251
    x = vals.repeat_interleave(chunk).to(dtype)
    return x, torch.empty((count,), dtype=dtype, device=device), count * elem


def _expected(torch: Any, op: str, out: Any, n: int, rank: int) -> Any:
    count = out.numel()
    if op in ("all_reduce", "reduce_scatter"):
        return torch.full_like(out, float(n * (n + 1) // 2))
    if op == "broadcast":
        return torch.full_like(out, 1.0)  # root 0 holds 1
    chunk = count // n
    if op == "all_gather":
        return torch.arange(1, n + 1, dtype=torch.float32, device=out.device).repeat_interleave(chunk).to(out.dtype)
    vals = (torch.arange(n, dtype=torch.float32, device=out.device) * n + rank + 1) % 251
    return vals.repeat_interleave(chunk).to(out.dtype)


def _call(dist: Any, op: str, inp: Any, out: Any) -> None:
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "broadcast":
        dist.broadcast(inp, src=0)
    elif op == "all_gather":  # *_single: the 2.13 names of the deprecated *_into_tensor / *_tensor calls
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
    elif op == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    else:
        dist.all_to_all_single(out, inp)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    ident = _identity(a)
    files = _Files(a.results, ident["rank"])
    result: dict[str, Any] = dict(ident, status="error", error=None, op=a.op, backend=a.backend, sizes=[])
    kind, delay = _injection(a, ident["orig_rank"])
    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        result["torch"] = torch.__version__
        if os.environ.get("OMP_NUM_THREADS", "").isdigit():
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))  # a forked worker's OpenMP read its env before the fork
        device = torch.device("cpu")
        if a.backend == "nccl":
            device = torch.device("cuda", ident["local_rank"])
            torch.cuda.set_device(device)
            result["gpu"] = torch.cuda.get_device_name(device)
        files.progress("init")  # first sign of life: the parent's watchdog starts once every rank is here
        t_init = time.perf_counter()
        dist.init_process_group(a.backend, init_method=f"tcp://{a.master_addr}:{a.master_port}",
                                rank=ident["rank"], world_size=ident["world"], timeout=timedelta(seconds=a.timeout))
        result["init_s"] = round(time.perf_counter() - t_init, 4)
        n, rank = ident["world"], ident["rank"]
        dtype = getattr(torch, canonical_dtype(a.dtype))
        elem = DTYPES[a.dtype]

        def sync() -> None:
            if a.backend == "nccl":
                torch.cuda.synchronize()

        def before_call() -> None:
            if kind == "exit":
                os._exit(1)
            if kind == "hang":
                while True:
                    time.sleep(3600)
            if kind == "delay":
                time.sleep(delay)

        for size in [int(s) for s in a.sizes.split(",") if s]:
            files.progress("validate", size)
            inp, out, moved = _make(torch, a.op, size, n, rank, dtype, elem, device)
            before_call()
            _call(dist, a.op, inp, out)
            sync()
            valid = bool(torch.equal(out, _expected(torch, a.op, out, n, rank)))
            for i in range(a.warmup):
                files.progress("warmup", size, i)
                before_call()
                _call(dist, a.op, inp, out)
            sync()
            dist.barrier()
            entries: list[float] = []
            seconds: list[float] = []
            for i in range(a.iters):
                before_call()
                entries.append(time.time())
                t0 = time.perf_counter()
                _call(dist, a.op, inp, out)
                sync()
                seconds.append(time.perf_counter() - t0)
                files.progress("timed", size, i)
            result["sizes"].append({"bytes": moved, "requested": size, "valid": valid, "entries": entries, "seconds": seconds})
        result["status"] = "ok"
        files.progress("done")
        files.result(result)
        try:
            dist.destroy_process_group()
        except Exception:
            pass
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure is a result the parent reads
        if isinstance(e, SystemExit) and e.code == 0:
            raise
        result["error"] = f"{type(e).__name__}: {e}"[:4000]
        result["traceback"] = traceback.format_exc(limit=6)[-4000:]
        files.progress("error")
        files.result(result)
        sys.stderr.flush()
        # a failed gloo/NCCL group can block in its destructors: leave now
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
