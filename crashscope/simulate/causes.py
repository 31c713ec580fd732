"""One function per cause: plant the root cause at t0 and set how every rank ends.

Each function runs the healthy phases up to the fault (``job.emit_init``,
``job.emit_training``), writes the culprit's lines (tagged as evidence with
``job.ev``), sets ``job.natural[r]`` (how rank r would end if nothing killed it first:
victims time out ``Timeout(ms)`` after the stuck collective was enqueued, the culprit
crashes, hangs (None) or dies with its node), schedules outside actions in ``job.ext``
(preemption, time limit, node failure), and records ``job.implicated`` and
``job.final_state``. ``Job.resolve`` then plays out the cascade.
"""

from __future__ import annotations

from typing import Callable

from crashscope.simulate import formats as F
from crashscope.simulate.job import OLD_DRIVER, Job
from crashscope.simulate.layout import NIC_BUSES, nic_pci, pci_xid

SITE = "/usr/local/lib/python3.10/dist-packages"
MEG = "/workspace/Megatron-LM"

TRAIN_STACK = [
    "Traceback (most recent call last):",
    f'  File "{MEG}/pretrain_gpt.py", line 240, in <module>',
    "    pretrain(",
    f'  File "{MEG}/megatron/training/training.py", line 349, in pretrain',
    "    iteration, num_floating_point_operations_so_far = train(",
    f'  File "{MEG}/megatron/training/training.py", line 1214, in train',
    "    train_step(forward_step_func,",
    f'  File "{MEG}/megatron/training/training.py", line 655, in train_step',
    "    losses_reduced = forward_backward_func(",
]


def _pick(job: Job, node: int | None = None) -> tuple[int, int, int]:
    n = job.rng.randrange(job.N) if node is None else node
    lr = job.rng.randrange(job.G)
    return n, lr, n * job.G + lr


def _victims(job: Job, t_hang: float, skip: set[int]) -> None:
    for v in range(job.R):
        if v not in skip:
            job.natural[v] = job.timeout_end(v, t_hang)
    job.t_hang = t_hang


def _implicate(job: Job, n: int | None, ranks: list[int], gpu: int | None = None) -> None:
    job.implicated = {"nodes": [job.hosts[n]] if n is not None else [], "ranks": ranks,
                      "gpus": [{"node": job.hosts[n], "index": gpu}] if gpu is not None and n is not None else []}


def _watchdog_exception(job: Job, r: int, what: list[str], tag: dict | None = None) -> Callable[[float], int]:
    """The culprit's watchdog thread sees an async NCCL/CUDA error and takes the process down (SIGABRT)."""
    def fn(t: float) -> int:
        if tag is not None:
            tag["time"] = job.iso(t)
        job.c10(r, t, "E", "terminated", [F.watchdog_terminated(job.modern, r, what[0]), *what[1:]], tag)
        job.plain(r, t + 0.001, [F.terminate_called(job.modern), f"  what():  {what[0]}", *what[1:]])
        return -6
    return fn


def fabric_timeout(job: Job) -> None:
    """IB completion error IBV_WC_RETRY_EXC_ERR on one rank after an mlx5 port/link event on its node;
    its peers see ``Connection closed by remote peer``, everyone else times out."""
    rng = job.rng
    n, lr, r = _pick(job)
    t0 = job.t_train + rng.uniform(240, 900)
    job.emit_init()
    job.emit_training(t0)
    variant = job.variant or rng.choice(("port_module", "link_down"))
    job.variant = variant
    tk = t0 - rng.uniform(0.5, 3.0)
    if variant == "port_module":
        msg = F.mlx5_port_module_error(nic_pci(lr), lr, rng.choice(("Bad or shorted cable/module", "High Temperature", "Power Budget Exceeded")))
    else:
        msg = F.mlx5_link_down(nic_pci(lr), f"ibp{int(NIC_BUSES[lr % 8], 16)}s0")
    job.klog(n, tk, msg, 3, job.ev(tk, n, None, "kernel", msg, first=True))
    peer = (n + 1) % job.N
    ver = job.node_nccl[n]
    port = rng.randint(32768, 60999)
    w = F.nccl_ib_completion_error(ver, f"{job.ib_ip[peer]}<{port}>", 12, 129, "Send", f"::ffff:{job.ib_ip[n]}",
                                   f"::ffff:{job.ib_ip[peer]}", f"mlx5_{lr % 8}")
    job.ncclwarn(r, t0, F.nccl_ib_src(ver), w, tag=job.ev(t0, n, r, "nccl", w))
    job.ncclinfo(r, t0 + 0.0001, F.nccl_propagate("transport/net.cc:1056", 6))
    job.ncclinfo(r, t0 + 0.0002, F.nccl_propagate("proxy.cc:775", 6))
    t_end = t0 + rng.uniform(0.3, 2.5)
    job.natural[r] = (t_end, _watchdog_exception(job, r, F.nccl_error_what(6, ver, w)))
    # the peers that talked to the dead process see its sockets close
    for pr in job.node_ranks(peer):
        if pr % job.G == lr and peer != n:
            job.ncclwarn(pr, t_end + 0.05, "misc/socket.cc:49", F.nccl_conn_closed(job.hosts[n], rng.randint(32768, 60999)))
    _victims(job, t0, {r})
    _implicate(job, n, [r])


def storage_stall(job: Job) -> None:
    """A checkpoint save that starts and never ends (rank 0's Megatron line), ``nfs: server X not responding``
    and a hung task with an NFS/sunrpc stack on the stuck rank's node; the others time out waiting for it
    (``rank0_save``: rank 0 writes alone; ``sharded``: another rank's shard write hangs)."""
    rng = job.rng
    variant = job.variant or rng.choice(("rank0_save", "sharded"))
    job.variant = variant
    n, lr, r = (0, 0, 0) if variant == "rank0_save" else _pick(job)
    it = ((job.iter_at(job.t_train + rng.uniform(200, 700)) // job.ckpt_interval) + 1) * job.ckpt_interval
    t0 = job.t_of_iter(it) + 0.05
    job.emit_init()
    job.emit_training(t0 - 1.0)
    # Megatron prints from rank 0 only; with a sharded (torch_dist) save rank 0 waits for the stuck rank's
    # shard, so in both variants the start line has no matching end.
    ck = job.ckpt_start_text(it)
    job.ckpt(0, t0, it, None, job.ev(t0, 0, 0, "app", ck))
    tn = t0 + rng.uniform(20, 90)
    msg = F.nfs_not_responding(job.nfs_server)
    job.klog(n, tn, msg, 4, job.ev(tn, n, None, "kernel", msg, first=True))
    th = t0 + 122 + rng.uniform(0, 10)
    hung = F.hung_task_block("python3", job.pid[r], job.agent_pid[n], 122, "5.15.0-91-generic")
    job.klog(n, th, hung, 3, job.ev(th, n, r, "kernel", hung[0]))
    _victims(job, t0 + 0.5, {r})
    job.natural[r] = None
    _implicate(job, n, [r])


def driver_drift(job: Job) -> None:
    """One node runs a different driver (CUDA driver too old: its ranks die at CUDA init) or a different NCCL
    (every rank fails comm init with ``Mismatched NCCL version detected``)."""
    rng = job.rng
    variant = job.variant or rng.choice(("cuda_insufficient", "nccl_mismatch"))
    job.variant = variant
    n = rng.randrange(1, job.N) if job.N > 1 else 0
    ranks = list(job.node_ranks(n))
    _implicate(job, n, ranks)
    if variant == "cuda_insufficient":
        job.node_driver[n] = OLD_DRIVER
        job.kill_on_bad_exit = True  # the others sit in rendezvous until srun cancels the step
        t0 = job.t_workers + rng.uniform(3.0, 10.0)
        boot_t = job.boot[n] + 21.5
        job.ev(boot_t, n, None, "kernel", F.nvrm_loading(OLD_DRIVER[0]))
        job.boot_tags = {n: job.evidence[-1]}
        exc = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
        for i, x in enumerate(ranks):
            lines = [TRAIN_STACK[0], TRAIN_STACK[1], TRAIN_STACK[2],
                     f'  File "{MEG}/megatron/training/initialize.py", line 280, in _initialize_distributed',
                     "    torch.cuda.set_device(device)",
                     f'  File "{SITE}/torch/cuda/__init__.py", line 399, in set_device',
                     "    torch._C._cuda_setDevice(device)", exc, *F.CUDA_ERR_TAIL]
            tag = job.ev(t0, n, x, "python", exc, offset=7, first=(i == 0))
            job.natural[x] = (t0 + i * 0.003, job.exception_end(x, lines, exc, tag))
        return
    job.node_nccl[n] = "2.18.5" if not job.nccl.startswith("2.18") else "2.21.5"
    job.pip_tags[(n, "nvidia-nccl-cu12")] = job.ev(job.t_start, n, None, "versions", None)
    job.emit_init()
    t0 = job.t_init + 1.6
    odd = n * job.G
    for x in range(job.R):
        xn = job.node_of(x)
        mine = F.nccl_code(job.node_nccl[xn])
        if xn == n:
            w = F.nccl_version_mismatch(x, mine, 0, F.nccl_code(job.node_nccl[0]))
        else:
            w = F.nccl_version_mismatch(x, mine, odd, F.nccl_code(job.node_nccl[n]))
        tx = t0 + rng.uniform(0, 0.2)
        tag = job.ev(tx, xn, x, "nccl", w, first=(x == odd)) if xn == n else None
        job.ncclwarn(x, tx, "init.cc:595", w, tid=job.tid[x], tag=tag)
        job.ncclinfo(x, tx + 0.0001, F.nccl_propagate("init.cc:1389", 5))
        what = F.nccl_error_in(5, job.node_nccl[xn], 1970, w)
        exc = [TRAIN_STACK[0], TRAIN_STACK[1], TRAIN_STACK[2],
               f'  File "{MEG}/megatron/training/initialize.py", line 326, in _initialize_distributed',
               "    torch.distributed.barrier()",
               f'  File "{SITE}/torch/distributed/c10d_logger.py", line 83, in wrapper',
               "    return func(*args, **kwargs)",
               f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 4159, in barrier',
               "    work = default_pg.barrier(opts=opts)",
               f"torch.distributed.DistBackendError: {what[0]}", *what[1:]]
        job.natural[x] = (tx + 0.01, job.exception_end(x, exc, "DistBackendError: " + "\n".join(what), None))


def preemption(job: Job) -> None:
    """slurmstepd ``CANCELLED AT ... DUE TO PREEMPTION`` on every node at one instant, SIGTERM to all ranks,
    sacct PREEMPTED."""
    rng = job.rng
    t0 = job.t_train + rng.uniform(300, 1200)
    job.emit_init()
    job.emit_training(t0)
    job.banner_tags[0] = job.ev(t0, 0, None, "slurm", None, first=True)
    job.ext.append((t0, "kill_all", ("preemption",)))
    job.final_state = "PREEMPTED"
    job.sacct_tag = job.ev(t0, None, None, "sacct", None)
    _implicate(job, None, [])


def gpu_throttle(job: Job) -> None:
    """One GPU in HW slowdown + HW thermal slowdown (telemetry CSV, 88-93 C, ~1 GHz), steps slow, then the
    others time out waiting for its rank."""
    rng = job.rng
    n, lr, r = _pick(job)
    t0 = job.t_train + rng.uniform(120, 500)
    t_hang = t0 + rng.uniform(120, 400)
    job.gpu_mask[(n, lr)] = [(t0, 1e18, 0x48)]
    job.slow = (t0, t_hang, rng.uniform(1.8, 2.6))
    job.telemetry_tags[(n, lr)] = job.ev(t0, n, None, "gpu_csv", None, first=True)
    job.emit_init()
    job.emit_training(t_hang)
    _victims(job, t_hang, {r})
    job.natural[r] = None
    _implicate(job, n, [r], lr)


CUDA_ERR = {79: "unspecified launch failure", 74: "unspecified launch failure", 48: "uncorrectable ECC error encountered",
            94: "uncorrectable ECC error encountered", 95: "uncorrectable ECC error encountered",
            64: "uncorrectable ECC error encountered"}


def gpu_hardware(job: Job) -> None:
    """An Xid (79/48/94/95/74/119/64) on one GPU; its rank fails with a CUDA error (or hangs for 119),
    the others time out; Xid 45 follows on that node as processes are torn down."""
    rng = job.rng
    code = int(job.variant) if job.variant else rng.choice((79, 48, 94, 95, 74, 119, 64))
    job.variant = str(code)
    n, lr, r = _pick(job)
    t0 = job.t_train + rng.uniform(200, 900)
    job.emit_init()
    job.emit_training(t0)
    pid = None if code in (79, 74, 119) else job.pid[r]
    if code == 64:
        t63 = t0 - 0.2
        job.xid(n, lr, t63, 63, pid)
    text = F.XID_MESSAGES[code].replace("{n}", str(lr))
    job.xid(n, lr, t0, code, pid, text, job.ev(t0, n, None, "kernel", F.xid_line(pci_xid(lr), code, pid, "python3" if pid else None, text), first=True))
    if code == 79:
        job.gpu_dead[(n, lr)] = t0
    if code in (48, 94, 95, 64):
        job.ecc[(n, lr)] = {"t": t0, "ue": 1, "ce": 3, "remap_ue": 1, "pending": True, "remap_fail": code == 64}
    if code == 119:
        job.natural[r] = None
    else:
        err = CUDA_ERR[code]
        tw = t0 + rng.uniform(0.05, 0.6)
        w = F.nccl_cuda_failure(err)
        job.ncclwarn(r, tw, "enqueue.cc:1556", w, tag=job.ev(tw, n, r, "nccl", w))
        t_end = tw + rng.uniform(0.1, 1.0)
        job.natural[r] = (t_end, _watchdog_exception(job, r, [f"CUDA error: {err}", *F.CUDA_ERR_TAIL]))
    _victims(job, t0, {r})
    _implicate(job, n, [r], lr)

    def xid45() -> None:
        for x in job.node_ranks(n):
            g = x % job.G
            if (n, g) in job.gpu_dead or x not in job.ended or job.ended[x][1] == 0:
                continue
            job.xid(n, g, job.ended[x][0] + 0.25, 45, job.pid[x])
    job.post.append(xid45)


def node_failure(job: Job) -> None:
    """One node dies: its logs stop (mid-line), slurmctld ``not responding, setting DOWN``, the step is
    cancelled ``DUE TO NODE FAILURE``, sacct NODE_FAIL."""
    rng = job.rng
    n = rng.randrange(job.N)
    if not job.timeout_fixed and job.timeout_ms < 600000:
        job.timeout_ms = 600000  # slurmd's 300 s SlurmdTimeout must win the race for a NODE_FAIL
    t0 = job.t_train + rng.uniform(300, 1000)
    job.emit_init()
    job.emit_training(t0)
    job.ext.append((t0, "node_dead", (n,)))
    t_nr = t0 + rng.uniform(95, 125)
    t_down = t0 + 300 + rng.uniform(0, 5)
    m1 = f"error: Nodes {job.hosts[n]} not responding"
    job.ctld(t_nr, m1, job.ev(t_nr, n, None, "slurmctld", m1, first=True))
    m2 = f"error: Nodes {job.hosts[n]} not responding, setting DOWN"
    job.ctld(t_down, m2, job.ev(t_down, n, None, "slurmctld", m2))
    job.ctld(t_down + 0.001, f"Killing JobId={job.job_id} on failed node {job.hosts[n]}")
    job.slurm(t_down + 0.3, f"srun: error: Node failure on {job.hosts[n]}")
    alive = 0 if n != 0 else 1
    job.banner_tags[alive] = job.ev(t_down + 0.5, alive, None, "slurm", None)
    job.ext.append((t_down + 0.5, "kill_all", ("node_failure",)))
    _victims(job, t0, set(job.node_ranks(n)))
    job.final_state = "NODE_FAIL"
    job.sacct_tag = job.ev(t_down, None, None, "sacct", None)
    _implicate(job, n, list(job.node_ranks(n)))


def oom(job: Job) -> None:
    """CUDA out of memory traceback on one rank, or the kernel OOM killer in the Slurm cgroup
    (``Detected 1 oom_kill event``, sacct OUT_OF_MEMORY)."""
    rng = job.rng
    variant = job.variant or rng.choice(("cuda", "host"))
    job.variant = variant
    n, lr, r = _pick(job)
    t0 = job.t_train + rng.uniform(150, 900)
    job.emit_init()
    job.emit_training(t0)
    if variant == "cuda":
        exc_cls = "torch.OutOfMemoryError" if job.torch >= "2.5" else "torch.cuda.OutOfMemoryError"
        msg = F.cuda_oom_message(rng.choice((1.0, 2.0, 3.5, 8.0)), lr, 79.1, rng.uniform(0.2, 1.5), rng.uniform(77, 78.9),
                                 rng.uniform(70, 75), rng.uniform(1, 3))
        exc = f"{exc_cls}: {msg}"
        lines = TRAIN_STACK + [
            f'  File "{MEG}/megatron/core/pipeline_parallel/schedules.py", line 452, in forward_backward_no_pipelining',
            "    backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)",
            f'  File "{SITE}/torch/autograd/graph.py", line 769, in _engine_run_backward',
            "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
            exc]
        tag = job.ev(t0, n, r, "python", exc, offset=len(lines) - 1, first=True)
        job.natural[r] = (t0, job.exception_end(r, lines, exc, tag))
        _victims(job, t0, {r})
        _implicate(job, n, [r], lr)
        return
    block = F.oom_killer_block(job.pid[r], job.uid, job.job_id, n)
    job.klog(n, t0, block, 3, job.ev(t0, n, r, "kernel", block[2], offset=2, first=True))
    job.natural[r] = (t0 + 0.01, lambda t: -9)
    _victims(job, t0, {r})
    job.task_what[n] = "Out Of Memory"
    job.final_state = "OUT_OF_MEMORY"
    job.sacct_tag = job.ev(t0, None, None, "sacct", None)
    tag = job.ev(t0, n, None, "slurm", F.stepd_oom(job.slurm_version, 1, f"{job.job_id}.0"))

    def stepd() -> None:
        te = job.ended[r][0] + 1.5
        tag["time"] = job.iso(te)
        job.slurm(te, F.stepd_oom(job.slurm_version, 1, f"{job.job_id}.0"), tag)
    job.post.append(stepd)
    _implicate(job, n, [r])


def software_error(job: Job) -> None:
    """A Python exception in the data pipeline on one rank (IndexError / ValueError); the others time out
    in the next collective (or are cancelled by srun --kill-on-bad-exit)."""
    rng = job.rng
    n, lr, r = _pick(job)
    t0 = job.t_train + rng.uniform(150, 900)
    job.emit_init()
    job.emit_training(t0)
    variant = job.variant or rng.choice(("IndexError", "ValueError"))
    job.variant = variant
    if variant == "IndexError":
        exc = f"IndexError: index {rng.choice((8388608, 1048576, 33554432))} is out of bounds for axis 0 with size {8388608}"
    else:
        exc = "ValueError: cannot reshape array of size 4095 into shape (4096,)"
    lines = TRAIN_STACK + [
        f'  File "{MEG}/pretrain_gpt.py", line 95, in get_batch',
        "    data = next(data_iterator)",
        f'  File "{SITE}/torch/utils/data/dataloader.py", line 630, in __next__',
        "    data = self._next_data()",
        f'  File "{SITE}/torch/utils/data/dataloader.py", line 674, in _next_data',
        "    data = self._dataset_fetcher.fetch(index)  # may raise StopIteration",
        f'  File "{MEG}/megatron/core/datasets/gpt_dataset.py", line 187, in __getitem__',
        "    text, _ = self._query_document_sample_shuffle_indices(idx)",
        exc]
    tag = job.ev(t0, n, r, "python", exc, offset=len(lines) - 1, first=True)
    job.natural[r] = (t0, job.exception_end(r, lines, exc, tag))
    _victims(job, t0, {r})
    _implicate(job, n, [r])


def time_limit(job: Job) -> None:
    """``DUE TO TIME LIMIT`` banners, slurmctld ``Time limit exhausted``, sacct TIMEOUT."""
    rng = job.rng
    job.time_limit_min = max(10, int((job.t_train - job.t_start) / 60) + rng.randint(6, 20))
    t0 = job.t_start + job.time_limit_min * 60 + rng.uniform(0.5, 30.0)  # slurmctld checks limits periodically
    job.emit_init()
    job.emit_training(t0)
    m = f"Time limit exhausted for JobId={job.job_id}"
    job.ctld(t0, m, job.ev(t0, None, None, "slurmctld", m, first=True))
    job.banner_tags[0] = job.ev(t0 + 0.4, 0, None, "slurm", None)
    job.ext.append((t0 + 0.4, "kill_all", ("time_limit",)))
    job.final_state = "TIMEOUT"
    job.sacct_tag = job.ev(t0, None, None, "sacct", None)
    _implicate(job, None, [])


def none(job: Job) -> None:
    """A healthy run that completes: every rank exits 0, agents finish, sacct COMPLETED."""
    rng = job.rng
    t_end = job.t_train + rng.uniform(300, 900)
    job.emit_init()
    job.emit_training(t_end)
    for r in range(job.R):
        job.natural[r] = (t_end + rng.uniform(0.5, 3.0), lambda t: 0)
    job.final_state = "COMPLETED"
    job.sacct_tag = job.ev(t_end, None, None, "sacct", None)
    _implicate(job, None, [])


CAUSE_FUNCS: dict[str, Callable[[Job], None]] = {
    "fabric_timeout": fabric_timeout, "storage_stall": storage_stall, "driver_drift": driver_drift,
    "preemption": preemption, "gpu_throttle": gpu_throttle, "gpu_hardware": gpu_hardware,
    "node_failure": node_failure, "oom": oom, "software_error": software_error, "time_limit": time_limit, "none": none,
}
