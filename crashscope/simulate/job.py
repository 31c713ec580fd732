"""The simulated job: topology, versions, clocks, the healthy run, and the end-of-job cascade.

A cause (causes.py) plants its root-cause lines and decides how each rank would end on
its own (``natural`` ends: watchdog timeout, crash, hang). ``Job.resolve`` then plays the
cascade as a small discrete-event simulation: a rank's failure makes its node's torchrun
agent SIGTERM the local workers and exit; srun reports the task and (with
``--kill-on-bad-exit``) cancels the step everywhere; scheduler actions (preemption, time
limit, node failure) cancel it from outside. Every line is stamped with the clock and zone
of the host that prints it.
"""

from __future__ import annotations

import heapq
import json
import random
from datetime import datetime, timezone
from typing import Callable
from zoneinfo import ZoneInfo

from crashscope.simulate import formats as F
from crashscope.simulate.layout import Router, Sink, gpu_bus, nic_pci, pci_smi, pci_xid

UTC = timezone.utc

# (torch, nccl, cuda runtime, c10 style modern?, agent log style)
STACKS = (
    ("2.1.2", "2.18.6", "12.1", False, "logging"),
    ("2.4.1", "2.20.5", "12.4", True, "glog"),
    ("2.5.1", "2.21.5", "12.4", True, "glog"),
    ("2.7.1", "2.26.2", "12.6", True, "glog"),
    ("2.8.0", "2.27.3", "12.8", True, "glog"),
)
DRIVERS = {"12.1": ("530.30.02", 12010), "12.4": ("550.54.15", 12040), "12.6": ("560.35.03", 12060), "12.8": ("570.124.06", 12080)}
OLD_DRIVER = ("525.85.12", 12000)  # CUDA 12.0 driver API: too old for every runtime above
ZONES = ("UTC", "America/Chicago", "Europe/Berlin", "America/Los_Angeles")
SLURM_VERSIONS = ("23.02.7", "23.11.10", "24.05.4", "25.05.1")
OFED = "23.10-1.1.9.0"
KERNEL_FORMATS = ("dmesg", "dmesg_T", "short_precise", "short_iso", "json")
KERNEL_FILES = {"dmesg": "dmesg.txt", "dmesg_T": "dmesg-T.txt", "short_precise": "journal-kernel.log",
                "short_iso": "journal-kernel-iso.log", "json": "journal-kernel.json"}
PGN_LINES = {False: {"timeout": 475, "teardown": 489, "terminated": 1005},
             True: {"timeout": 632, "detected": 2271, "teardown": 1609, "terminated": 1413, "what": 1715, "barrier": 4561,
                   "observed": 1922, "signal": 1987, "first_pg": 2106}}
PIP_BASE = (("accelerate", "0.33.0"), ("datasets", "2.20.0"), ("numpy", "1.26.4"), ("safetensors", "0.4.3"),
            ("sentencepiece", "0.2.0"), ("tokenizers", "0.19.1"), ("tqdm", "4.66.4"), ("transformers", "4.44.2"))


class Job:
    def __init__(self, rng: random.Random, *, cause: str, nodes: int, gpus_per_node: int, layout: str,
                 timeout_ms: int | None, nccl_info_volume: int, stack: int | None, zone: str | None,
                 kill_on_bad_exit: bool | None, telemetry_interval: float | None, variant: str | None):
        self.rng = rng
        self.cause = cause
        self.variant = variant
        self.N = nodes
        self.G = gpus_per_node
        self.R = nodes * gpus_per_node
        self.layout = layout
        self.job_id = str(rng.randint(100000, 9999999))
        self.hosts = [f"node{i + 1:03d}" for i in range(nodes)] if nodes < 1000 else [f"node{i + 1:04d}" for i in range(nodes)]
        self.stack_i = stack if stack is not None else rng.randrange(len(STACKS))
        self.torch, self.nccl, self.cuda, self.modern, self.agent_style = STACKS[self.stack_i]
        self.driver, self.cudadrv = DRIVERS[self.cuda]
        self.zone = zone or rng.choice(ZONES)
        self.tz = ZoneInfo(self.zone)
        self.slurm_version = rng.choice(SLURM_VERSIONS)
        self.timeout_ms = timeout_ms or rng.choice((600000, 600000, 1800000, 300000))
        self.timeout_fixed = timeout_ms is not None
        self.kill_on_bad_exit = rng.random() < 0.6 if kill_on_bad_exit is None else kill_on_bad_exit
        self.volume = nccl_info_volume
        self.telemetry_interval = telemetry_interval or rng.choice((15.0, 30.0, 60.0))
        self.uid = 1000 + rng.randrange(1, 900)
        self.user = "alice"
        # per node: skew (one host a few seconds off), boot time, ip, driver/nccl (drift may change one)
        self.skew = [0.0] * nodes
        self.skew_node = rng.randrange(nodes)
        self.skew[self.skew_node] = round(rng.choice((-1, 1)) * rng.uniform(2.0, 6.0), 3)
        base = datetime(2026, rng.randint(1, 11), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), tzinfo=UTC)
        self.t_start = base.timestamp()
        self.boot = [self.t_start - rng.uniform(3, 40) * 86400 for _ in range(nodes)]
        self.boot_id = ["%032x" % rng.getrandbits(128) for _ in range(nodes)]
        self.ip = [f"10.{rng.randint(1, 9)}.{i // 250}.{i % 250 + 2}" for i in range(nodes)]
        self.ib_ip = [f"10.{rng.randint(10, 19)}.{i // 250}.{i % 250 + 2}" for i in range(nodes)]
        self.node_driver = [(self.driver, self.cudadrv)] * nodes
        self.node_nccl = [self.nccl] * nodes
        self.node_kfmt = [rng.choice(KERNEL_FORMATS)] * nodes
        if rng.random() < 0.3:
            self.node_kfmt = [rng.choice(KERNEL_FORMATS) for _ in range(nodes)]
        self.pip = [dict(PIP_BASE) for _ in range(nodes)]
        self.uuid = [[f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}" for _ in range(gpus_per_node)] for _ in range(nodes)]
        self.agent_pid = [rng.randint(20000, 90000) for _ in range(nodes)]
        self.pid = {}
        self.tid = {}
        for r in range(self.R):
            n, lr = divmod(r, self.G)
            self.pid[r] = self.agent_pid[n] + 22 + lr
            self.tid[r] = self.pid[r] + rng.randint(300, 900)
        self.router = Router(layout, self.job_id, self.hosts, self.G, dict(self.pid))
        self.sink = Sink(self.router)
        # run timeline
        self.t_step_launch = self.t_start + rng.uniform(1.5, 4.0)
        self.t_workers = self.t_step_launch + rng.uniform(2.0, 6.0)
        self.t_init = self.t_workers + rng.uniform(15.0, 40.0)
        self.step_s = rng.uniform(1.2, 4.0)
        self.iter0 = rng.choice((0, 2000, 12000, 50000))
        self.total_iters = self.iter0 + 500000
        self.log_interval = 10
        self.ckpt_interval = rng.choice((100, 200, 250))
        self.colls_per_iter = 3
        self.t_train = self.t_init + rng.uniform(20.0, 60.0)
        self.ckpt_path = f"/lustre/fs01/{self.user}/ckpt/run{rng.randint(1, 99)}"
        self.nfs_server = "fs01"
        self.evidence: list[dict] = []
        self.confounders: list[str] = []
        self.natural: dict[int, tuple[float, Callable[[float], int]] | None] = {}
        self.ext: list[tuple[float, str, tuple]] = []
        self.dead_nodes: dict[int, float] = {}
        self.final_state = "FAILED"
        self.gpu_mask: dict[tuple[int, int], list[tuple[float, float, int]]] = {}  # (n, g) -> [(t0, t1, mask)]
        self.gpu_dead: dict[tuple[int, int], float] = {}
        self.ecc: dict[tuple[int, int], dict] = {}
        self.xid_uuid_done: set[tuple[int, int]] = set()
        self.first_failure: dict | None = None
        self.implicated = {"nodes": [], "ranks": [], "gpus": []}
        self.end_time = 0.0
        self.errfiles: dict[int, str] = {}
        self.errts: dict[int, int] = {}
        self.tracebacks: dict[int, str] = {}
        self.root_blocks: dict[int, dict] = {}
        self.banner_tags: dict[int, dict] = {}
        self.telemetry_tags: dict[tuple[int, int], dict] = {}
        self.pip_tags: dict[tuple[int, str], dict] = {}
        self.task_what: dict[int, str] = {}
        self.post: list[Callable[[], None]] = []
        self.sacct_tag: dict | None = None
        self.run_id = self.job_id  # torchrun --rdzv-id=$SLURM_JOB_ID
        self.elastic_tmp = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8)) for _ in range(nodes)]
        self.time_limit_min = rng.choice((240, 480, 720, 1440))
        self.t_hang: float | None = None
        self.slow: tuple[float, float, float] | None = None  # (from, to, factor) of iteration times
        self.boot_tags: dict[int, dict] = {}
        self.first_item: dict | None = None
        self.fire_times: dict[int, float] = {}  # victim rank -> when its watchdog would fire
        self.traces = False  # dump-on-timeout lines and Flight Recorder dumps (simulate(traces=True))

    # -- clocks -----------------------------------------------------------------------------
    def local(self, n: int | None, t: float) -> datetime:
        skew = self.skew[n] if n is not None else 0.0
        return datetime.fromtimestamp(round(t + skew, 6), self.tz)

    def mono_ns(self, n: int, t: float) -> int:
        return int(round((t - self.boot[n]) * 1e9))

    def node_of(self, r: int) -> int:
        return r // self.G

    def iso(self, t: float) -> str:
        return datetime.fromtimestamp(round(t, 6), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    # -- evidence -----------------------------------------------------------------------------
    def ev(self, t: float, node: int | None, rank: int | None, source: str, message: str | None = None,
           offset: int = 0, first: bool = False) -> dict:
        """A planted root-cause line; the sink fills file/line/text when it writes it.
        ``offset``: which line of a multi-line record; ``message=None``: the written line itself."""
        item = {"cause": self.cause, "time": self.iso(t), "node": self.hosts[node] if node is not None else None,
                "rank": rank, "source": source, "message": message}
        if offset:
            item["_offset"] = offset
        self.evidence.append(item)
        if first:
            self.first_item = item
        return item

    # -- emitters -----------------------------------------------------------------------------
    def py(self, r: int, t: float, lines: list[str], tag: dict | None = None) -> None:
        """Python stdout/stderr of rank r; tracebacks carry ``[rankN]: `` per line in the c10-prefix era."""
        if self.modern:
            lines = [f"[rank{r}]: {ln}" for ln in lines]
        self.sink.lines(("rank", r), t, lines, tag)

    def plain(self, r: int, t: float, lines: list[str], tag: dict | None = None) -> None:
        self.sink.lines(("rank", r), t, lines, tag)

    def c10(self, r: int, t: float, sev: str, key: str, msg: str | list[str], tag: dict | None = None) -> None:
        n = self.node_of(r)
        src = f"ProcessGroupNCCL.cpp:{PGN_LINES[self.modern].get(key, 1200)}"
        pre = F.c10_prefix(self.modern, sev, self.local(n, t), self.mono_ns(n, t), src, r)
        lines = msg if isinstance(msg, list) else [msg]
        self.sink.lines(("rank", r), t, [pre + lines[0], *lines[1:]], tag)

    def ncclinfo(self, r: int, t: float, msg: str) -> None:
        n, lr = divmod(r, self.G)
        self.sink.add(("nccl", r), t, F.nccl_info(self.hosts[n], self.pid[r], self.tid[r], lr, msg))

    def ncclwarn(self, r: int, t: float, src: str, msg: str, tid: int | None = None, tag: dict | None = None) -> None:
        n, lr = divmod(r, self.G)
        ver = self.node_nccl[n]
        line = F.nccl_warn(ver, self.local(n, t), self.hosts[n], self.pid[r], tid or self.tid[r] + 431, lr, src, msg)
        self.sink.add(("nccl", r), t, "")
        self.sink.add(("nccl", r), t, line, 1, tag)

    def agent(self, n: int, t: float, lvl: str, path: str, line: int, msg: str) -> None:
        self.sink.add(("agent", n), t, F.agent_line(self.agent_style, lvl, self.local(n, t), self.agent_pid[n], path, line, msg))

    def slurm(self, t: float, text: str, tag: dict | None = None) -> None:
        self.sink.add(("slurm",), t, text, 1, tag)

    def ctld(self, t: float, msg: str, tag: dict | None = None) -> None:
        self.sink.add(("ctld",), t, F.slurmctld_line(self.local(None, t), msg), 1, tag)

    def klog(self, n: int, t: float, msg: str | list[str], prio: int = 6, tag: dict | None = None) -> None:
        msgs = msg if isinstance(msg, list) else [msg]
        fmt = self.node_kfmt[n]
        out = []
        for i, m in enumerate(msgs):
            tt = t + i * 1e-6
            mono = tt - self.boot[n]
            dt = self.local(n, tt)
            if fmt == "dmesg":
                out.append(F.kmsg_raw(mono, m))
            elif fmt == "dmesg_T":
                out.append(F.kmsg_ctime(dt, m))
            elif fmt == "short_precise":
                out.append(F.kmsg_short_precise(dt, self.hosts[n], m))
            elif fmt == "short_iso":
                out.append(F.kmsg_short_iso(dt, self.hosts[n], m))
            else:
                real_us = int(round((tt + self.skew[n]) * 1e6)) + 37
                mono_us = int(round(mono * 1e6))
                out.append(F.kmsg_json(real_us, mono_us + 37, mono_us, self.boot_id[n], self.hosts[n], prio, m))
        self.sink.add(("node", n, KERNEL_FILES[fmt]), t, "\n".join(out), len(out), tag)

    def xid(self, n: int, g: int, t: float, code: int, pid: int | None, msg: str | None = None, tag: dict | None = None) -> None:
        if (n, g) not in self.xid_uuid_done:
            self.xid_uuid_done.add((n, g))
            self.klog(n, t - 1e-5, F.nvrm_gpu_uuid(pci_xid(g), self.uuid[n][g]))
        text = msg or F.XID_MESSAGES[code].replace("{n}", str(g))
        self.klog(n, t, F.xid_line(pci_xid(g), code, pid, "python3" if pid else None, text), 3, tag)

    # -- healthy phases -------------------------------------------------------------------------
    def seq_at(self, t: float) -> int:
        """Last collective SeqNum completed by time t (3 collectives per iteration after init)."""
        if t < self.t_train:
            return 1
        return 1 + int((t - self.t_train) / self.step_s) * self.colls_per_iter

    def iter_at(self, t: float) -> int:
        return self.iter0 + max(0, int((t - self.t_train) / self.step_s))

    def t_of_iter(self, it: int) -> float:
        return self.t_train + (it - self.iter0) * self.step_s

    def emit_launch(self) -> None:
        """torchrun's start-up banner per node, the per-rank barrier warning (c10 era), and empty rank files."""
        for n in range(self.N):
            t = self.t_step_launch + 0.8 + self.rng.uniform(0, 0.3)
            stars = "*****************************************"
            omp = ("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being "
                   "overloaded, please further tune the variable for optimal performance in your application as needed. ")
            if self.agent_style == "glog":
                for i, m in enumerate(("", stars, omp, stars)):
                    self.agent(n, t + i * 1e-4, "W", "torch/distributed/run.py", 793, m)
            else:
                self.sink.lines(("agent", n), t, [F.agent_line("logging", "W", self.local(n, t), 0, "torch/distributed/run.py", 0, ""), stars, omp, stars])
        for r in range(self.R):
            self.sink.touch(("rank", r))
            self.sink.touch(("nccl", r))

    def emit_init(self, ranks: range | list[int] | None = None) -> None:
        rng = self.rng
        commid = f"0x{rng.getrandbits(64):016x}"
        nch = 16 if self.R > 8 else 24
        for r in ranks if ranks is not None else range(self.R):
            n, lr = divmod(r, self.G)
            t = self.t_init + rng.uniform(0.0, 1.5)
            ver = self.node_nccl[n]
            comm = f"0x{0x55d1c0000000 + rng.getrandbits(28):x}"
            busid = f"{gpu_bus(lr)}000"
            if self.modern:
                tb = t - rng.uniform(0.2, 1.0)
                self.c10(r, tb, "W", "barrier", f"[PG ID 0 PG GUID 0 Rank {r}]  using GPU {lr} to perform barrier as devices used by this process "
                         "are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect. Specify "
                         "device_ids in barrier() to force use of a particular device, or call init_process_group() with a device_id.")
            if r == 0:
                self.ncclinfo(r, t, F.nccl_version_banner(ver, self.cuda))
            self.ncclinfo(r, t, f"cudaDriverVersion {self.node_driver[n][1]}")
            self.ncclinfo(r, t, F.nccl_bootstrap(ver, "ib0", self.ip[n]))
            self.ncclinfo(r, t, F.nccl_ib_using(ver, f"mlx5_{lr % 8}", "ib0", self.ip[n], 0))
            self.ncclinfo(r, t, "Using network IB")
            self.ncclinfo(r, t + 0.01, F.nccl_init_start(ver, comm, r, self.R, lr, busid, commid))
            # Channel chatter: the volume knob. One block per rank, built in one join.
            vol = self.volume
            if vol > 0:
                host, pid, tid = self.hosts[n], self.pid[r], self.tid[r]
                nxt = (r + 1) % self.R
                nn, nlr = divmod(nxt, self.G)
                via = "P2P/IPC" if nn == n else f"NET/IB/{lr % 8}/GDRDMA"
                head = f"{host}:{pid}:{tid} [{lr}] NCCL INFO Channel "
                tail = f" : {r}[{lr}] -> {nxt}[{nlr}] via {via}"
                ids = self._channel_ids(nch, vol)
                self.sink.add(("nccl", r), t + 0.2, lambda head=head, tail=tail, ids=ids: [head, (tail + "\n" + head).join(ids), tail], vol)
            self.ncclinfo(r, t + 0.4, F.nccl_init_complete(ver, comm, r, self.R, lr, busid, commid))

    def _channel_ids(self, nch: int, vol: int) -> list[str]:
        key = (nch, vol)
        if getattr(self, "_chan_key", None) != key:
            self._chan_key = key
            self._chan_ids = [f"{i % nch:02d}/{i // nch % 100}" for i in range(vol)]
        return self._chan_ids

    def emit_training(self, until: float) -> None:
        """Iteration logs (last rank, Megatron format) and checkpoint saves (rank 0) up to ``until``."""
        rng = self.rng
        last = self.R - 1
        it = self.iter0 + self.log_interval
        loss = rng.uniform(2.2, 3.4)
        gbs = 8 * self.R
        while True:
            t = self.t_of_iter(it)
            if t > until:
                break
            slow = self.step_factor(t)
            loss = max(1.2, loss - rng.uniform(-0.01, 0.02))
            self.plain(last, t, [F.megatron_iteration(self.local(self.node_of(last), t), it, self.total_iters, it * gbs,
                                                        self.step_s * 1000 * slow * rng.uniform(0.98, 1.03), 3e-4, gbs, loss,
                                                        rng.uniform(0.6, 1.1))])
            it += self.log_interval
        it = (self.iter0 // self.ckpt_interval + 1) * self.ckpt_interval
        while True:
            t = self.t_of_iter(it) + 0.05
            if t + 8 > until:
                break
            self.ckpt(0, t, it, done=t + rng.uniform(3.0, 8.0))
            it += self.ckpt_interval

    def step_factor(self, t: float) -> float:
        if self.slow and self.slow[0] <= t <= self.slow[1]:
            return self.slow[2]
        return 1.0

    def ckpt(self, r: int, t: float, it: int, done: float | None, tag: dict | None = None) -> None:
        """Megatron-LM checkpointing.py (print_rank_0): ``saving checkpoint at iteration {:7d} to {} in {} format`` /
        ``  successfully saved checkpoint from iteration {:7d} to {}``."""
        self.plain(r, t, [self.ckpt_start_text(it)], tag)
        if done is not None:
            self.plain(r, done, [f"  successfully saved checkpoint from iteration {it:7d} to {self.ckpt_path}"])

    def ckpt_start_text(self, it: int) -> str:
        return f"saving checkpoint at iteration {it:7d} to {self.ckpt_path} in torch_dist format"

    # -- ends -------------------------------------------------------------------------------------
    def pending(self, t_hang: float) -> tuple[int, str, int]:
        """The collective every rank is stuck in when progress stops at t_hang: (seq, op, numel)."""
        return self.seq_at(t_hang) + 1, "ALLREDUCE", 25165824

    def timeout_end(self, r: int, t_hang: float) -> tuple[float, Callable[[float], int]]:
        """A victim: its watchdog fires Timeout(ms) after it enqueued the stuck collective."""
        seq, op, numel = self.pending(t_hang)
        ran = self.timeout_ms + self.rng.randint(20, 2500)
        t_enq = t_hang + self.rng.uniform(0.0, 0.4)
        t_fire = t_enq + ran / 1000.0
        self.fire_times[r] = t_fire

        def fn(t: float) -> int:
            work = F.work_nccl(seq, op, numel, self.timeout_ms)
            self.c10(r, t, "E", "timeout", F.watchdog_timeout(self.modern, r, work, ran))
            if self.modern:
                self.c10(r, t + 0.0001, "E", "detected", F.watchdog_failure_detected(r, seq, seq, seq - 1))
            td = F.async_teardown(self.modern, r)
            self.c10(r, t + 0.0002, "E", "teardown", td[0])
            self.c10(r, t + 0.0003, "E", "teardown", td[1])
            what = F.watchdog_timeout(self.modern, r, work, ran)
            self.plain(r, t + 0.001, [F.terminate_called(self.modern), f"  what():  {what}"])
            return -6

        return t_fire, fn

    def exception_end(self, r: int, exc_lines: list[str], exc_msg: str, tag_item: dict | None) -> Callable[[float], int]:
        """A rank dies of a Python exception (exit code 1), writing its error.json via @record."""
        def fn(t: float) -> int:
            if tag_item is not None:
                tag_item["time"] = self.iso(t)
            self.py(r, t, exc_lines, tag_item)
            self.error_json(r, t, exc_msg, "\n".join(exc_lines))
            return 1
        return fn

    def error_json(self, r: int, t: float, msg: str, stack: str) -> None:
        n, lr = divmod(r, self.G)
        self.errfiles[r] = f"/tmp/torchelastic_{self.elastic_tmp[n]}/{self.run_id}/attempt_0/{lr}/error.json"
        self.tracebacks[r] = stack
        self.sink.add(("node", n, f"torchelastic/{self.run_id}/attempt_0/{lr}/error.json"), t, F.error_json(msg, stack, int(t)))
        self.errts[r] = int(t)

    # -- the cascade -------------------------------------------------------------------------------
    def resolve(self) -> None:
        rng = self.rng
        self.errfiles: dict[int, str] = getattr(self, "errfiles", {})
        self.ended: dict[int, tuple[float, int, str]] = {}
        self.agent_done: set[int] = set()
        self.killing = False
        self.srun_seen: set[str] = set()
        heap: list = []
        k = 0
        for r in range(self.R):
            nat = self.natural.get(r)
            if nat is not None:
                heap.append((nat[0], k, "rank", (r, nat[1], "own")))
                k += 1
        for t, kind, data in self.ext:
            heap.append((t, k, kind, data))
            k += 1
        heapq.heapify(heap)

        def push(t: float, kind: str, data: tuple) -> None:
            nonlocal k
            k += 1
            heapq.heappush(heap, (t, k, kind, data))

        stepd_entity = f"STEP {self.job_id}.0"
        while heap:
            t, _, kind, data = heapq.heappop(heap)
            if kind == "rank":
                r, fn, how = data
                n = self.node_of(r)
                if r in self.ended or (n in self.dead_nodes and t >= self.dead_nodes[n]):
                    continue
                code = fn(t)
                self.ended[r] = (t, code, how)
                self.end_time = max(self.end_time, t)
                if n in self.agent_done or n in self.dead_nodes:
                    continue
                if code != 0 and how == "own":
                    push(t + rng.uniform(0.1, 0.9), "agent_fail", (n,))
                elif how == "own" and all(rr in self.ended for rr in self.node_ranks(n)) and any(self.ended[rr][1] for rr in self.node_ranks(n)):
                    push(t + rng.uniform(0.1, 0.9), "agent_fail", (n,))
                elif all(rr in self.ended for rr in self.node_ranks(n)) and all(self.ended[rr][1] == 0 for rr in self.node_ranks(n)):
                    push(t + 0.5, "agent_ok", (n,))
            elif kind == "agent_fail":
                (n,) = data
                if n in self.agent_done or n in self.dead_nodes:
                    continue
                self.agent_done.add(n)
                self.agent_failure(n, t, push)
            elif kind == "agent_ok":
                (n,) = data
                if n in self.agent_done:
                    continue
                self.agent_done.add(n)
                self.agent(n, t, "I", "torch/distributed/elastic/agent/server/api.py", 864,
                           "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.")
                self.agent(n, t + 0.02, "I", "torch/distributed/elastic/agent/server/api.py", 917,
                           f"Done waiting for other agents. Elapsed: {rng.uniform(0.001, 2.5):.4f} seconds")
                self.end_time = max(self.end_time, t + 0.1)
            elif kind == "task_exit":
                n, what = data
                self.end_time = max(self.end_time, t)
                if what not in self.srun_seen:
                    self.srun_seen.add(what)
                    self.slurm(t, F.srun_task_exit(self.hosts[n], str(n), False, what))
                if self.kill_on_bad_exit and not self.killing:
                    push(t + rng.uniform(0.05, 0.3), "kill_all", ("bad_exit",))
            elif kind == "kill_all":
                (why,) = data
                if self.killing:
                    continue
                self.killing = True
                self.kill_all(t, why, stepd_entity)
            elif kind == "node_dead":
                (n,) = data
                self.dead_nodes[n] = t
                self.sink.cutoff[n] = t
            elif kind == "call":
                data[0](t)
        for r in range(self.R):  # ranks left hanging with no end (e.g. a dead node's ranks)
            self.ended.setdefault(r, (self.end_time, 0 if self.final_state == "COMPLETED" else -9, "lost"))

    def node_ranks(self, n: int) -> range:
        return range(n * self.G, (n + 1) * self.G)

    def agent_failure(self, n: int, t: float, push) -> None:
        """torchrun agent on node n saw a worker fail: SIGTERM the rest, print ChildFailedError, exit 1."""
        rng = self.rng
        api = "torch/distributed/elastic/multiprocessing/api.py"
        failed = sorted((self.ended[r][0], r) for r in self.node_ranks(n) if r in self.ended and self.ended[r][1] != 0 and self.ended[r][2] == "own")
        live = [r for r in self.node_ranks(n) if r not in self.ended]
        for r in live:
            self.agent(n, t, "W", api, 897, f"Sending process {self.pid[r]} closing signal SIGTERM")
            push(t + 0.01, "rank", (r, lambda tt: -15, "agent"))
        t1 = t + rng.uniform(0.2, 1.5)
        t_first, r0 = failed[0]
        code0 = self.ended[r0][1]
        self.agent(n, t1, "E", api, 869, f"failed (exitcode: {code0}) local_rank: {r0 % self.G} (pid: {self.pid[r0]}) of binary: /usr/bin/python3")
        t2 = t1 + 0.05

        def entry(rt: float, r: int) -> dict:
            code = self.ended[r][1]
            ts = self.errts.get(r, int(rt)) if r in self.errfiles else int(t1)
            if r in self.errfiles:
                tb = self.tracebacks.get(r, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
                ef = self.errfiles[r]
            elif code < 0:
                sig = {-6: "SIGABRT", -9: "SIGKILL", -15: "SIGTERM", -11: "SIGSEGV"}.get(code, "SIGKILL")
                tb = f"Signal {-code} ({sig}) received by PID {self.pid[r]}"
                ef = "<N/A>"
            else:
                tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
                ef = "<N/A>"
            return {"time": self.local(n, ts).strftime("%Y-%m-%d_%H:%M:%S"), "host": f"{self.hosts[n]}.cluster.local", "rank": r,
                    "local_rank": r % self.G, "exitcode": code, "pid": self.pid[r], "error_file": ef, "traceback": tb}

        failures = [entry(ft, r) for ft, r in failed]
        root = failures[0]
        tb = ["Traceback (most recent call last):",
              '  File "/usr/local/bin/torchrun", line 8, in <module>',
              "    sys.exit(main())",
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
              "    return f(*args, **kwargs)",
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 919, in main',
              "    run(args)",
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/run.py", line 910, in run',
              "    elastic_launch(",
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 138, in __call__',
              "    return launch_agent(self._config, self._entrypoint, list(args))",
              '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 269, in launch_agent',
              "    raise ChildFailedError("]
        block = tb + F.child_failed_block("pretrain_gpt.py", failures[1:], root)
        self.sink.lines(("agent", n), t2, block)
        self.root_blocks[n] = root
        push(t2 + 0.2, "task_exit", (n, self.task_what.get(n, "Exited with exit code 1")))

    def kill_all(self, t: float, why: str, entity: str) -> None:
        """The step is cancelled on every live node: slurmstepd banners, SIGTERM to agents and workers."""
        rng = self.rng
        banner_why = {"preemption": "PREEMPTION", "time_limit": "TIME LIMIT", "node_failure": "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"}
        if why == "bad_exit":
            self.slurm(t, f"srun: Terminating StepId={self.job_id}.0" if self.slurm_version < "24"
                       else f"srun: launch/slurm: _step_signal: Terminating StepId={self.job_id}.0")
        done_before = set(self.agent_done)
        for n in range(self.N):
            if n in self.dead_nodes:
                continue
            tb = t + rng.uniform(0.0, 0.05)
            if why == "bad_exit":
                self.slurm(tb, F.stepd_failed(entity, self.hosts[n]))
            else:
                self.slurm(tb, F.stepd_cancel(entity, self.hosts[n], self.local(n, tb), banner_why[why]), self.banner_tags.get(n))
            if n in self.agent_done:
                continue
            self.agent_done.add(n)
            self.agent(n, tb + 0.01, "W", "torch/distributed/elastic/agent/server/api.py", 719, "Received Signals.SIGTERM death signal, shutting down workers")
            for r in self.node_ranks(n):
                if r not in self.ended:
                    self.agent(n, tb + 0.02, "W", "torch/distributed/elastic/multiprocessing/api.py", 897, f"Sending process {self.pid[r]} closing signal SIGTERM")
                    self.ended[r] = (tb + 0.03, -15, "killed")
            self.end_time = max(self.end_time, tb + 1)
        if why in ("preemption", "time_limit", "node_failure") and 0 not in self.dead_nodes:
            self.slurm(t + 0.06, F.stepd_cancel(f"JOB {self.job_id}", self.hosts[0], self.local(0, t + 0.06), banner_why[why]))
        if why == "bad_exit" or why == "node_failure":
            self.slurm(t + 0.1, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        live = [n for n in range(self.N) if n not in self.dead_nodes and n not in done_before]
        if live and "Terminated" not in self.srun_seen and why != "preemption" and why != "time_limit":
            self.srun_seen.add("Terminated")
            self.slurm(t + 1.2, F.srun_task_exit(self.hosts[live[0]], str(live[0]), False, "Terminated"))

    def finish(self) -> None:
        """slurmctld's view of the job end."""
        t = self.end_time + 1.0
        if self.final_state in ("FAILED", "COMPLETED", "OUT_OF_MEMORY"):
            self.ctld(t, f"_job_complete: JobId={self.job_id} WEXITSTATUS {0 if self.final_state == 'COMPLETED' else 1}")
            if self.final_state == "OUT_OF_MEMORY":
                self.ctld(t, f"_job_complete: JobId={self.job_id} OOM failure")
            self.ctld(t + 0.001, f"_job_complete: JobId={self.job_id} done")

    # -- dump on timeout and Flight Recorder -------------------------------------------------------
    def emit_dump_on_timeout(self) -> None:
        """torch >= 2.4 with TORCH_NCCL_DUMP_ON_TIMEOUT (default on): the first watchdog that fires
        signals every rank through the store; each live rank's heartbeat monitor logs the signal
        (``from this local rank`` / ``from  rank N``) about a second later and dumps. With
        TORCH_FR_BUFFER_SIZE set (drawn), each rank that dumped leaves
        ``fr/nccl_trace_rank_N.json``: the ring buffer's last collectives, the stuck one ``started``
        on the ranks that entered it (the victims) and absent on those that never did. Dead
        processes and dead nodes write nothing; now and then one dump is not collected.
        Uses its own random stream, so jobs without traces keep their bytes."""
        fired = {r: t for r, t in self.fire_times.items() if r in self.ended and self.ended[r][2] == "own" and self.ended[r][0] >= t - 1e-6}
        if not self.traces or not self.modern or not fired or self.t_hang is None:
            return
        rng = random.Random(f"{self.job_id}:dump")
        init = min(fired, key=lambda r: (fired[r], r))
        t0 = fired[init]
        seq, op, numel = self.pending(self.t_hang)
        fr = rng.random() < 0.7
        dumped: list[int] = []
        for r in range(self.R):
            n = self.node_of(r)
            # the monitor polls the store every second; the watchdog that fired waits for the dump
            # (TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC) before it aborts, so every rank alive then answers
            end_t = self.ended.get(r, (self.end_time, 0, "lost"))[0]
            if end_t < t0 or (n in self.dead_nodes and self.dead_nodes[n] <= t0):
                continue  # gone before the signal came round
            t_sig = t0 + (0.0002 if r == init else rng.uniform(0.2, 1.0))
            t_sig = min(t_sig, max(t0 + 0.0001, end_t - 0.001))
            entered = r in self.fire_times
            enq, done = (seq, seq - 1) if entered else (seq - 1, seq - 1)
            if r in fired and fired[r] <= t_sig:  # its own watchdog fired first: it signals too
                self.c10(r, fired[r] + 0.0003, "E", "first_pg", F.first_pg_to_signal(r))
                self.c10(r, fired[r] + 0.0004, "E", "signal", F.dump_signal(r, None, enq, done))
            else:
                self.c10(r, t_sig, "E", "observed", F.observed_dump_signal(r))
                self.c10(r, t_sig + 0.0001, "E", "signal", F.dump_signal(r, init, enq, done))
            dumped.append(r)
        if not fr or not dumped:
            return
        if len(dumped) > 2 and rng.random() < 0.25:  # a node-local /tmp dump nobody collected
            dumped.remove(rng.choice(dumped))
        ver = rng.choice(("2.4", "2.5", "2.7", "2.10"))
        for r in dumped:
            n = self.node_of(r)
            last = seq if r in self.fire_times else seq - 1
            entries = []
            for s in range(max(1, last - 15), last + 1):
                t_s = self.t_hang + rng.uniform(0.0, 0.4) if s == seq else self.t_train + (s - 1) / self.colls_per_iter * self.step_s
                t_ns = int(t_s * 1e9)
                if s == seq:
                    entries.append(F.fr_entry(s, s, "all_reduce", numel, t_ns, "started", t_ns + 40_000, 0, self.timeout_ms, self.tid[r]))
                else:
                    entries.append(F.fr_entry(s, s, "all_reduce", numel, t_ns, "completed", t_ns + 40_000, t_ns + int(self.step_s * 2e8),
                                              self.timeout_ms, self.tid[r]))
            done = last - 1 if r in self.fire_times else last
            self.sink.static(f"{self.router.node_dir(n)}/fr/nccl_trace_rank_{r}.json",
                             F.fr_dump_json(ver, self.R, entries, last, last, done) + "\n")

    # -- system files ------------------------------------------------------------------------------
    def emit_boot(self) -> None:
        for n in range(self.N):
            b = self.boot[n]
            self.klog(n, b + 0.0, "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023 (Ubuntu 5.15.0-91.101-generic 5.15.131)", 5)
            self.klog(n, b + 0.0001, "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-91-generic root=UUID=3d1f0a52-7c1e-4d0b-9a55-1f2c3b4d5e6f ro pci=realloc=off", 6)
            self.klog(n, b + 21.3, "nvidia: loading out-of-tree module taints kernel.", 4)
            self.klog(n, b + 21.5, F.nvrm_loading(self.node_driver[n][0]), 6, self.boot_tags.get(n))
            for g in range(self.G):
                self.klog(n, b + 23.0 + g * 0.01, f"mlx5_core {nic_pci(g)}: firmware version: 28.39.1002", 6)

    def emit_telemetry(self) -> None:
        rng = self.rng
        iv = self.telemetry_interval
        end = self.end_time + 30
        for n in range(self.N):
            rows = [F.GPU_CSV_FIELDS]
            t = self.t_start + rng.uniform(0, 2)
            base_temp = [rng.randint(52, 66) for _ in range(self.G)]
            while t < end:
                if n in self.dead_nodes and t > self.dead_nodes[n]:
                    break
                busy = self.t_train <= t <= self.end_time
                for g in range(self.G):
                    tt = t + g * 0.002
                    dt = self.local(n, tt)
                    if (n, g) in self.gpu_dead and tt >= self.gpu_dead[(n, g)]:
                        rows.append(f"{dt.strftime('%Y/%m/%d %H:%M:%S')}.{dt.microsecond // 1000:03d}, {g}, {pci_smi(g)}, "
                                    "[Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error], "
                                    "[Unknown Error], [Unknown Error], [Unknown Error], [Unknown Error]")
                        continue
                    mask = 0 if busy else 0x1
                    for a, b, m in self.gpu_mask.get((n, g), ()):
                        if a <= tt <= b:
                            mask = m
                    ecc = self.ecc.get((n, g), {}).get("ue", 0) if tt >= self.ecc.get((n, g), {}).get("t", 1e18) else 0
                    if mask & 0x48:
                        temp, sm, pw = rng.randint(87, 93), rng.randint(870, 1230), rng.uniform(310, 380)
                    elif mask & 0x4:
                        temp, sm, pw = base_temp[g] + rng.randint(4, 9), rng.randint(1600, 1755), 700.0
                    elif busy:
                        temp, sm, pw = base_temp[g] + rng.randint(0, 6), 1980, rng.uniform(520, 690)
                    else:
                        temp, sm, pw = base_temp[g] - 20 + rng.randint(0, 3), 345, rng.uniform(68, 75)
                    util = rng.randint(96, 100) if busy else 0
                    mem = rng.randint(70000, 76000) if self.t_init <= tt <= self.end_time else 0
                    rows.append(F.gpu_csv_row(dt, g, pci_smi(g), temp, pw, sm, util, mem, mask, ecc))
                    tag = self.telemetry_tags.get((n, g))
                    if tag is not None and mask & 0x48 and "_row" not in tag:
                        tag["_row"] = len(rows)
                        tag["time"] = self.iso(tt)
                        tag["_text"] = rows[-1]
                        tag["message"] = rows[-1]
                t += iv
            path = f"{self.router.node_dir(n)}/gpu-telemetry.csv"
            self.sink.static(path, "\n".join(rows) + "\n")
            for (tn, g), tag in self.telemetry_tags.items():
                if tn == n and "_row" in tag:
                    tag["file"] = path
                    tag["line"] = tag.pop("_row")
                    tag["text"] = tag.pop("_text")

    def emit_smi_q(self) -> None:
        t = self.end_time + 20
        for n in range(self.N):
            if n in self.dead_nodes:
                continue
            gpus = []
            for g in range(self.G):
                mask = 0x1
                for a, b, m in self.gpu_mask.get((n, g), ()):
                    if a <= self.end_time <= b + 60:
                        mask = m
                e = self.ecc.get((n, g), {})
                gpus.append({"pci8": pci_smi(g), "uuid": self.uuid[n][g], "index": g, "mask": mask, "dram_ce": e.get("ce", 0),
                             "dram_ue": e.get("ue", 0), "remap_ue": e.get("remap_ue", 0), "remap_pending": e.get("pending", False),
                             "remap_fail": e.get("remap_fail", False), "temp": 88 if mask & 0x40 else 41, "sm": 1050 if mask & 0x8 else 345})
            self.sink.static(f"{self.router.node_dir(n)}/nvidia-smi-q.txt",
                             F.smi_q(self.local(n, t), self.node_driver[n][0], f"{self.node_driver[n][1] // 1000}.{self.node_driver[n][1] % 1000 // 10}", gpus))

    def emit_versions(self) -> None:
        rng = self.rng
        for n in range(self.N):
            d = self.router.node_dir(n)
            pip = dict(self.pip[n])
            pip["torch"] = self.torch
            pip["nvidia-nccl-cu12"] = self.node_nccl[n]
            pip[f"nvidia-cuda-runtime-cu{self.cuda.split('.')[0]}"] = f"{self.cuda}.127"
            items = sorted(pip.items())
            self.sink.static(f"{d}/pip-freeze.txt", "".join(f"{k}=={v}\n" for k, v in items))
            for (tn, key), tag in self.pip_tags.items():
                if tn == n:
                    i = [k for k, _ in items].index(key)
                    tag.update(file=f"{d}/pip-freeze.txt", line=i + 1, text=f"{key}=={pip[key]}")
                    tag["message"] = tag["message"] or tag["text"]
            self.sink.static(f"{d}/ofed_info-s.txt", F.ofed_info_s(OFED))
            self.sink.static(f"{d}/proc-driver-nvidia-version.txt", F.proc_driver_version(self.node_driver[n][0]))
            self.sink.static(f"{d}/proc-stat.txt", F.proc_stat(int(self.boot[n] + self.skew[n]), [rng.randint(10**6, 10**9) for _ in range(10)]))
            tc = self.end_time + 25
            self.sink.static(f"{d}/timedatectl.txt", F.timedatectl(self.local(n, tc), datetime.fromtimestamp(round(tc + self.skew[n]), UTC), self.zone))
            lt = self.local(n, tc)
            z = lt.strftime("%z")
            self.sink.static(f"{d}/collect.json", json.dumps({
                "host": self.hosts[n], "collected_at": lt.isoformat(timespec="seconds"), "timezone": self.zone,
                "utc_offset": z[:3] + ":" + z[3:], "boot_id": self.boot_id[n], "btime": int(self.boot[n] + self.skew[n]),
                "kernel": "5.15.0-91-generic", "job_id": self.job_id, "kernel_log": KERNEL_FILES[self.node_kfmt[n]],
            }, indent=2) + "\n")

    def emit_slurm_accounting(self, sacct_json: bool) -> None:
        state = self.final_state
        t_end = self.end_time + 2
        exit_job = {"FAILED": "1:0", "COMPLETED": "0:0", "OUT_OF_MEMORY": "0:125"}.get(state, "0:0")
        step_state = {"PREEMPTED": "CANCELLED", "TIMEOUT": "CANCELLED", "NODE_FAIL": "CANCELLED"}.get(state, state)
        step_exit = {"FAILED": "1:0", "COMPLETED": "0:0", "OUT_OF_MEMORY": "0:125"}.get(state, "0:15")
        batch_state = {"FAILED": "FAILED", "COMPLETED": "COMPLETED", "OUT_OF_MEMORY": "FAILED"}.get(state, "CANCELLED")
        batch_exit = {"FAILED": "1:0", "COMPLETED": "0:0", "OUT_OF_MEMORY": "1:0"}.get(state, "0:15")
        nodelist = self.hostlist()
        st, en = self.t_start, t_end
        fmt = lambda t: self.local(None, t).strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731
        el = int(en - st)
        elapsed = f"{el // 3600:02d}:{el % 3600 // 60:02d}:{el % 60:02d}"
        ncpu = self.N * 128
        rows = [("JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode", "Start", "End", "Elapsed", "NodeList"),
                (self.job_id, "pretrain", "gpu", "llm", str(ncpu), state, exit_job, fmt(st), fmt(en), elapsed, nodelist),
                (f"{self.job_id}.batch", "batch", "", "llm", "128", batch_state, batch_exit, fmt(st), fmt(en), elapsed, self.hosts[0]),
                (f"{self.job_id}.extern", "extern", "", "llm", str(ncpu), "COMPLETED" if state != "NODE_FAIL" else "CANCELLED", "0:0", fmt(st), fmt(en), elapsed, nodelist),
                (f"{self.job_id}.0", "torchrun", "", "llm", str(ncpu), step_state, step_exit, fmt(self.t_step_launch), fmt(en - 1), elapsed, nodelist)]
        if not sacct_json:
            text = "\n".join(F.sacct_text_row(list(r)) for r in rows) + "\n"
            self.sink.static("slurm/sacct.txt", text)
            if self.sacct_tag is not None:
                self.sacct_tag.update(file="slurm/sacct.txt", line=2, text=F.sacct_text_row(list(rows[1])))
                self.sacct_tag["message"] = self.sacct_tag["message"] or self.sacct_tag["text"]
            return
        num = lambda v: {"set": True, "infinite": False, "number": v}  # noqa: E731
        code, sig = (int(x) for x in exit_job.split(":"))

        def ec(c: int, s: int) -> dict:
            status = ["SUCCESS"] if c == 0 and s == 0 else (["SIGNALED"] if s else ["ERROR"])
            return {"status": status, "return_code": num(c), "signal": {"id": num(s), "name": {0: "", 9: "SIGKILL", 15: "SIGTERM", 125: ""}.get(s, "")}}

        steps = []
        for r in rows[2:]:
            c, s = (int(x) for x in r[6].split(":"))
            steps.append({"time": {"start": int(st), "end": int(en), "elapsed": el}, "exit_code": ec(c, s),
                          "nodes": {"count": self.N if r[10] == nodelist else 1, "range": r[10], "list": self.hosts if r[10] == nodelist else [r[10]]},
                          "state": [r[5]], "step": {"id": r[0], "name": r[1]}, "tasks": {"count": self.N}})
        doc = {"meta": {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld", "data_parser": "data_parser/v0.0.41", "accounting_storage": "accounting_storage/slurmdbd"},
                        "client": {"source": "/dev/pts/0", "user": self.user, "group": self.user},
                        "slurm": {"version": dict(zip(("major", "minor", "micro"), self.slurm_version.split("."))), "release": self.slurm_version, "cluster": "cluster"}},
               "jobs": [{"account": "llm", "cluster": "cluster", "job_id": int(self.job_id), "name": "pretrain", "nodes": nodelist,
                         "partition": "gpu", "user": self.user, "exit_code": ec(code, sig), "derived_exit_code": ec(code, sig),
                         "state": {"current": [state], "reason": "None"},
                         "time": {"elapsed": el, "eligible": int(st) - 5, "end": int(en), "start": int(st), "submission": int(st) - 30,
                                  "suspended": 0, "limit": num(self.time_limit_min)},
                         "steps": steps}],
               "warnings": [], "errors": []}
        text = json.dumps(doc, indent=2) + "\n"
        self.sink.static("slurm/sacct.json", text)
        if self.sacct_tag is not None:
            lines = text.split("\n")
            i = next(i for i, ln in enumerate(lines) if '"current"' in ln) + 1
            self.sacct_tag.update(file="slurm/sacct.json", line=i + 1, text=lines[i])
            self.sacct_tag["message"] = self.sacct_tag["message"] or lines[i].strip()

    def hostlist(self) -> str:
        if self.N == 1:
            return self.hosts[0]
        w = len(self.hosts[0]) - 4
        return f"node[{1:0{w}d}-{self.N:0{w}d}]"
