"""Noise that real job directories carry and that must not be taken for the cause.

Each function plants one confounder and returns a description for truth.json; none of
them is tagged as evidence.
"""

from __future__ import annotations

from typing import Callable

from crashscope.simulate import formats as F
from crashscope.simulate.job import Job


def _other_node(job: Job) -> int:
    culprits = set(job.implicated["nodes"])
    others = [n for n in range(job.N) if job.hosts[n] not in culprits]
    return job.rng.choice(others or list(range(job.N)))


def benign_warn(job: Job) -> str:
    r = job.rng.randrange(job.R)
    t = job.t_init + 2.0
    job.plain(r, t, [f"{'/usr/local/lib/python3.10/dist-packages'}/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
                     '  warnings.warn(']),
    return f"benign UserWarning on rank {r}"


def old_xid(job: Job) -> str:
    n = _other_node(job)
    g = job.rng.randrange(job.G)
    t = job.t_start - job.rng.uniform(1.0, 2.5) * 86400
    t = max(t, job.boot[n] + 3600)
    job.xid(n, g, t, 63, None)
    return f"old Xid 63 (row remap) on {job.hosts[n]} GPU {g} long before the job"


def xid45_after(job: Job) -> str:
    n = _other_node(job)
    g = job.rng.randrange(job.G)

    def late() -> None:
        job.xid(n, g, job.end_time + 4.0, 45, job.pid[n * job.G + g])
    job.post.append(late)
    return f"Xid 45 on {job.hosts[n]} GPU {g} after teardown"


def nfs_recovered(job: Job) -> str:
    n = _other_node(job)
    t = job.t_start - job.rng.uniform(2, 20) * 3600
    job.klog(n, t, F.nfs_not_responding(job.nfs_server), 4)
    job.klog(n, t + job.rng.uniform(20, 90), F.nfs_ok(job.nfs_server), 5)
    return f"NFS hiccup on {job.hosts[n]} that recovered hours before the job"


def pip_diff(job: Job) -> str:
    n = _other_node(job)
    job.pip[n]["tqdm"] = "4.66.1"
    return f"tqdm 4.66.1 on {job.hosts[n]} (4.66.4 elsewhere): irrelevant version difference"


def user_scancel(job: Job) -> str:
    other = int(job.job_id) - job.rng.randint(3, 40)
    t = job.t_start + job.rng.uniform(60, 600)
    job.ctld(t, f"_slurm_rpc_kill_job: REQUEST_KILL_JOB JobId={other} uid {job.uid}")
    return f"the user's own scancel of another job ({other})"


def truncated_line(job: Job) -> str:
    r = job.R - 1
    t = job.t_train + job.step_s * 3.5
    line = F.megatron_iteration(job.local(job.node_of(r), t), job.iter0 + 3, job.total_iters, (job.iter0 + 3) * 8 * job.R, job.step_s * 1000, 3e-4, 8 * job.R, 2.5, 0.9)
    job.plain(r, t, [line[: len(line) // 3]])
    return f"a truncated iteration line on rank {r}"


def missing_rank_file(job: Job) -> str:
    culprit_ranks = set(job.implicated["ranks"])
    culprit_nodes = set(job.implicated["nodes"])
    cands = [r for r in range(job.R) if r not in culprit_ranks and job.hosts[job.node_of(r)] not in culprit_nodes and r != job.R - 1 and r != 0]
    if job.layout in ("per_rank", "nccl_debug_file") and cands:
        r = job.rng.choice(cands)
        job.sink.skip.add(f"logs/rank{r}.log")
        return f"logs/rank{r}.log missing"
    n = _other_node(job)
    job.sink.skip.add(f"{job.router.node_dir(n)}/gpu-telemetry.csv")
    return f"{job.router.node_dir(n)}/gpu-telemetry.csv missing"


def duplicated_lines(job: Job) -> str:
    r = job.R - 1
    job.sink.dups.append((("rank", r), job.t_train + job.step_s * 20, 2))
    return f"an iteration line of rank {r} written three times"


def second_problem(job: Job) -> str:
    """A second, non-fatal problem during the run: SW power cap on another GPU, or correctable ECC + Xid 63."""
    n = _other_node(job)
    g = job.rng.randrange(job.G)
    t = job.t_train + job.rng.uniform(30, 100)
    if job.cause == "gpu_hardware" or job.rng.random() < 0.5:
        job.gpu_mask.setdefault((n, g), []).append((t, t + job.rng.uniform(60, 200), 0x4))
        return f"SW power cap on {job.hosts[n]} GPU {g} for a few minutes (not the cause)"
    job.xid(n, g, t, 63, None)
    job.ecc[(n, g)] = {"t": t, "ue": 0, "ce": 12, "remap_ue": 0, "pending": True}
    return f"Xid 63 row remap pending on {job.hosts[n]} GPU {g} during the run (not the cause)"


CONFOUNDERS: dict[str, Callable[[Job], str]] = {
    "benign_warn": benign_warn, "old_xid": old_xid, "xid45_after": xid45_after, "nfs_recovered": nfs_recovered,
    "pip_diff": pip_diff, "user_scancel": user_scancel, "truncated_line": truncated_line,
    "missing_rank_file": missing_rank_file, "duplicated_lines": duplicated_lines, "second_problem": second_problem,
}
