"""The exact commands of a re-run, and running one group of workers under a watchdog.

Launchers (argv lists only; nothing from a log or the environment is put into a shell string):

* ``local``: one ``python -m crashscope.repro.worker`` per rank on this machine, each told its
  place by ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (the variables torch.distributed's env://
  convention and torchrun use), rendezvous on 127.0.0.1;
* ``torchrun``: ``python -m torch.distributed.run --nnodes 1 --nproc-per-node N --master-addr
  --master-port -m crashscope.repro.worker ...`` on this machine (torchrun sets the same variables);
* ``srun``: ``srun -w <nodes> -N <k> --ntasks-per-node=<gpus> --kill-on-bad-exit=0 python -m
  crashscope.repro.worker ...`` (options from srun(1), Slurm 22.05+). The worker reads
  ``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``/``SLURMD_NODENAME``; the rendezvous is the
  first node of the group (``--master-addr <first node> --master-port P``). The results folder
  must be on a file system every node sees (``--results``).

Locally the argv is run in a process forked from a fork server that imported torch once
(:mod:`crashscope.repro.forkserver`): the child runs ``worker.main(argv[3:])`` with the same
environment, in its own session; it saves the seconds each ``import torch`` costs per process
and per run (``preload=False`` executes the argv itself).

The watchdog: every worker rewrites its ``rank<R>.progress`` after each call; when no worker
of the group has moved for ``timeout + grace`` seconds (or the run exceeds its cap) the group is
a hang, and every worker's process group (each is started in its own session) is sent SIGTERM,
then SIGKILL, and reaped. Nothing is left running, also on an exception or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crashscope.repro import bandwidths

GRACE_S = 2.0
STARTUP_S = 120.0  # importing torch on a busy or NFS-backed host; not the collective's fault
LAUNCHERS = ("local", "torchrun", "srun")


@dataclass
class Group:
    """One run: which units (by index in the plan's units) with which settings."""

    op: str
    sizes: list[int]  # the first is the suspect size
    dtype: str
    unit_ids: list[int]
    unit_names: list[str]
    per_unit: int = 1
    iters: int = 10
    warmup: int = 2
    timeout: float = 60.0
    backend: str = "gloo"
    launcher: str = "local"
    inject: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* of the crashed job (nccl only)
    port: int = 0
    slow_skew: float = 0.05
    slow_factor: float = 4.0
    python: str = sys.executable
    master: str | None = None  # srun: the rendezvous host when the first node's name does not resolve

    @property
    def world(self) -> int:
        return len(self.unit_ids) * self.per_unit

    @property
    def master_addr(self) -> str:
        if self.launcher != "srun":
            return "127.0.0.1"
        return self.master or self.unit_names[0]


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]  # set on top of this process's environment
    rank: int | None = None  # local launcher: the rank this process is


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker_args(g: Group, results: str) -> list[str]:
    args = ["-m", "crashscope.repro.worker", "--op", g.op, "--sizes", ",".join(str(s) for s in g.sizes), "--dtype", g.dtype,
            "--iters", str(g.iters), "--warmup", str(g.warmup), "--timeout", f"{g.timeout:g}", "--backend", g.backend,
            "--results", results, "--master-addr", g.master_addr, "--master-port", str(g.port),
            "--unit-ids", ",".join(str(i) for i in g.unit_ids), "--per-unit", str(g.per_unit)]
    if g.launcher == "srun":
        args += ["--unit-names", ",".join(g.unit_names)]
    for spec in g.inject:
        args += ["--inject", spec]
    return args


def commands(g: Group, results: str) -> list[Command]:
    base_env = dict(g.env) if g.backend == "nccl" else {}
    if g.backend == "gloo":
        base_env.setdefault("OMP_NUM_THREADS", "1")  # n CPU workers on one host: no oversubscription
    wa = worker_args(g, results)
    if g.launcher == "local":
        return [Command([g.python, *wa], dict(base_env, RANK=str(r), WORLD_SIZE=str(g.world), LOCAL_RANK=str(r)), rank=r)
                for r in range(g.world)]
    if g.launcher == "torchrun":
        argv = [g.python, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0", "--nproc-per-node", str(g.world),
                "--master-addr", "127.0.0.1", "--master-port", str(free_port() if g.port == 0 else g.port + 1), *wa]
        return [Command(argv, base_env)]
    if g.launcher == "srun":
        argv = ["srun", "-w", ",".join(g.unit_names), "-N", str(len(g.unit_names)), f"--ntasks-per-node={g.per_unit}",
                "--kill-on-bad-exit=0", "--unbuffered", g.python, *wa]
        return [Command(argv, base_env)]
    raise ValueError(f"unknown launcher {g.launcher!r}")


class _ForkServer:
    """The launcher's side of :mod:`crashscope.repro.forkserver` (one per command, started on
    first use, ended when the command ends: its standard input closes with us)."""

    def __init__(self, python: str):
        import threading

        self.proc = subprocess.Popen([python, "-m", "crashscope.repro.forkserver"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.rcs: dict[int, int] = {}
        self.pids: list[int] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                if "pid" in msg:
                    self.pids.append(int(msg["pid"]))
                elif "exit" in msg:
                    self.rcs[int(msg["exit"])] = int(msg["rc"])
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def start(self, argv: list[str], env: dict[str, str], log: str) -> _Forked:
        assert self.proc.stdin is not None
        with self.cond:
            n = len(self.pids)
            self.proc.stdin.write((json.dumps({"argv": argv, "env": env, "log": log}) + "\n").encode())
            self.proc.stdin.flush()
            if not self.cond.wait_for(lambda: len(self.pids) > n or self.proc.poll() is not None, timeout=STARTUP_S):
                raise RuntimeError("the local fork server did not answer")
            if len(self.pids) <= n:
                raise RuntimeError("the local fork server ended")
            return _Forked(self, self.pids[n])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                _kill([self.proc])


class _Forked:
    """A worker forked by the fork server, with Popen's poll/returncode/wait/pid."""

    def __init__(self, server: _ForkServer, pid: int):
        self.server, self.pid = server, pid

    def poll(self) -> int | None:
        with self.server.cond:
            if self.pid in self.server.rcs:
                return self.server.rcs[self.pid]
            if self.server.proc.poll() is not None:
                return -9  # the server is gone and took its workers with it
            return None

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        with self.server.cond:
            self.server.cond.wait_for(lambda: self.poll() is not None, timeout=timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired("worker", timeout or 0)
        return self.poll()


_SERVER: _ForkServer | None = None


def _fork_server(python: str) -> _ForkServer:
    global _SERVER
    if _SERVER is None or _SERVER.proc.poll() is not None:
        import atexit

        _SERVER = _ForkServer(python)
        atexit.register(close_fork_server)
    return _SERVER


def close_fork_server() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None


def _start(c: Command, log_path: Path, preload: bool) -> Any:
    if preload and c.rank is not None and c.argv[1:3] == ["-m", "crashscope.repro.worker"]:
        return _fork_server(c.argv[0]).start(c.argv[3:], c.env, str(log_path))
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(c.argv, env={**os.environ, **c.env}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def _kill(procs: list[Any]) -> None:
    """SIGTERM then SIGKILL to each worker's own process group, then reap."""
    alive = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                try:  # killed before its setsid(): not yet a group of its own
                    os.kill(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + GRACE_S
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if p.poll() is None]
            time.sleep(0.02)
        if not alive:
            break
    for p in procs:
        try:
            p.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError):
        return None


def _progress_times(results: Path) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in results.glob("rank*.progress"):
        try:
            out[int(p.name[4:-9])] = p.stat().st_mtime
        except (OSError, ValueError):
            pass
    return out


def _stalled(g: Group, results: Path, running: set[int] | None, wall0: float) -> bool:
    """No rank still running moved for timeout + grace (startup: until every rank imported torch)."""
    times = _progress_times(results)
    now = time.time()
    if len(times) < g.world:
        return now - wall0 > STARTUP_S + g.timeout
    if running is not None:
        times = {r: t for r, t in times.items() if r in running}
        if not times:
            return False
    return now - max(times.values()) > g.timeout + GRACE_S


def run_group(g: Group, results: Path, *, preload: bool = True) -> dict[str, Any]:
    """Run ``g`` once; return its run record (see :func:`summarize`)."""
    results.mkdir(parents=True, exist_ok=True)
    if g.port == 0:
        g.port = free_port()
    cmds = commands(g, str(results))
    procs: list[Any] = []
    started = time.monotonic()
    wall0 = time.time()
    cap = STARTUP_S + 2 * g.timeout + (g.iters + g.warmup + 1) * len(g.sizes) * g.timeout + 10
    killed = False
    try:
        for i, c in enumerate(cmds):
            procs.append(_start(c, results / f"launch{i}.log", preload))
        local = g.launcher == "local"
        while any(p.poll() is None for p in procs):
            running = {c.rank for c, p in zip(cmds, procs) if p.poll() is None and c.rank is not None} if local else None
            if _stalled(g, results, running, wall0) or time.monotonic() - started > cap:
                killed = True
                break
            time.sleep(0.1)
    finally:
        if any(p.poll() is None for p in procs):
            _kill(procs)
    rcs = {(c.rank if c.rank is not None else i): p.returncode for i, (c, p) in enumerate(zip(cmds, procs))}
    rec = summarize(g, results, killed=killed, rcs=rcs if g.launcher == "local" else {})
    rec["wall_s"] = round(time.monotonic() - started, 3)
    rec["launcher_rc"] = [p.returncode for p in procs]
    return rec


def _unit_of(g: Group, rank: int) -> str:
    return g.unit_names[min(rank // g.per_unit, len(g.unit_names) - 1)]


def summarize(g: Group, results: Path, *, killed: bool, rcs: dict[int, int | None]) -> dict[str, Any]:
    """The run record: op, bytes, ranks, time, algbw, busbw, status, error, and who is to blame.

    time is nccl-tests' per-call time: each rank's mean over the timed calls, the slowest rank's."""
    per_rank: dict[int, dict[str, Any]] = {}
    progress: dict[int, dict[str, Any]] = {}
    for r in range(g.world):
        if (d := _read_json(results / f"rank{r}.json")) is not None:
            per_rank[r] = d
        if (p := _read_json(results / f"rank{r}.progress")) is not None:
            progress[r] = p
    orig = [uid * g.per_unit + k for uid in g.unit_ids for k in range(g.per_unit)]
    rec: dict[str, Any] = {"op": g.op, "bytes": None, "requested_bytes": g.sizes[0], "dtype": g.dtype, "backend": g.backend,
                           "units": list(g.unit_names), "ranks": orig, "nranks": g.world, "time": None, "algbw": None,
                           "busbw": None, "status": "ok", "error": None, "stuck": [], "exited": [], "errored": [], "late": [],
                           "invalid": [], "sizes": []}
    errors: list[str] = []

    def who(r: int) -> str:
        unit = _unit_of(g, r)
        return f"rank {orig[r]}" + ("" if unit == f"rank{orig[r]}" else f" ({unit})")

    no_result = [r for r in range(g.world) if r not in per_rank]
    if killed:
        rec["status"] = "hang"
        stuck = no_result
        rec["stuck"] = sorted({_unit_of(g, r) for r in stuck})
        phases = ", ".join(f"{who(r)} at {progress.get(r, {}).get('phase', 'start')}" for r in stuck)
        errors.append(f"no progress for {g.timeout:g}s: killed; stuck: {phases}")
    else:
        exited = [r for r in no_result if rcs.get(r) not in (None, 0)] if rcs else no_result
        if exited:
            rec["status"] = "error"
            rec["exited"] = sorted({_unit_of(g, r) for r in exited})
            errors.append("; ".join(f"{who(r)} exited with status {rcs.get(r)} before its result" for r in exited)
                          if rcs else f"{len(exited)} rank(s) wrote no result")
    err_ranks = [r for r, d in per_rank.items() if d.get("status") != "ok"]
    if err_ranks:
        if rec["status"] == "ok":
            rec["status"] = "error"
        rec["errored"] = sorted({_unit_of(g, r) for r in err_ranks})
        seen: set[str] = set()
        for r in sorted(err_ranks):
            e = str(per_rank[r].get("error") or "")
            key = e.split(":", 1)[0] + e[-60:]
            if key not in seen:
                seen.add(key)
                errors.append(f"{who(r)}: {e[:500]}")
    ok_ranks = [r for r, d in per_rank.items() if d.get("status") == "ok"]
    if ok_ranks and len(ok_ranks) == g.world:
        nsizes = min(len(per_rank[r].get("sizes") or []) for r in ok_ranks)
        for i in range(nsizes):
            rows = {r: per_rank[r]["sizes"][i] for r in ok_ranks}
            nbytes = int(next(iter(rows.values()))["bytes"])
            means = {r: statistics.fmean(v["seconds"]) for r, v in rows.items() if v["seconds"]}
            t = max(means.values()) if means else None
            algbw, busbw = bandwidths(g.op, g.world, nbytes, t) if t else (None, None)
            invalid = [r for r, v in rows.items() if not v.get("valid")]
            late = _late_ranks(rows, g)
            rec["sizes"].append({"bytes": nbytes, "time": t, "algbw": algbw, "busbw": busbw,
                                 "invalid": [orig[r] for r in invalid], "late": [orig[r] for r in late]})
            if i == 0:
                rec.update(bytes=nbytes, time=t, algbw=algbw, busbw=busbw)
                if invalid:
                    rec["status"] = "error"
                    rec["invalid"] = sorted({_unit_of(g, r) for r in invalid})
                    errors.append(f"wrong result on {', '.join(who(r) for r in invalid)}")
                elif late:
                    rec["status"] = "slow"
                    rec["late"] = sorted({_unit_of(g, r) for r in late})
                    errors.append("late to every call: " + ", ".join(who(r) for r in late))
    rec["error"] = "; ".join(errors) or None
    return rec


def _late_ranks(rows: dict[int, dict[str, Any]], g: Group) -> list[int]:
    """Ranks that arrive at the calls later than the others by more than ``slow_skew`` seconds
    and ``slow_factor`` times the collective's own time (the fastest rank's median time, the
    one that waited least)."""
    n_it = min(len(v["entries"]) for v in rows.values())
    if n_it == 0 or len(rows) < 2:
        return []
    own = min(statistics.median(v["seconds"]) for v in rows.values())
    lateness: dict[int, float] = {}
    for r, v in rows.items():
        lateness[r] = statistics.median(v["entries"][i] - min(w["entries"][i] for w in rows.values()) for i in range(n_it))
    limit = max(g.slow_skew, g.slow_factor * own)
    return sorted(r for r, x in lateness.items() if x > limit)
