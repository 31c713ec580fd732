"""Multi-rank Nsight Systems exports on the real schema, for tests and measurements.

``schema-3.13.2.sql`` beside this file holds the table definitions of a real
``nsys export --type sqlite`` (Nsight Systems 2024.5.1, schema 3.13.2), no rows. This
module creates those tables and fills them the way nsys does for a data-parallel job: per
rank a process with one CUDA context on its GPU, per step an NVTX range (``step N``),
compute kernels, and one NCCL AllReduce per step (kernel ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``
or the NCCL <= 2.18 ``ncclKernel_AllReduce_RING_LL_Sum_float``) launched inside NCCL's own
NVTX range (domain ``NCCL``, registered string ``ncclAllReduce``), each kernel with its
``cudaLaunchKernel`` row (same ``correlationId``).

The job is synchronous: every rank's AllReduce of a step ends when the slowest rank's
compute is done plus the transfer time, so a slow rank (a straggler, a throttled GPU) has
the longest compute and the shortest NCCL kernels. A hung rank's last AllReduce is launched
and never completes (a launch row without a kernel row, as nsys records a kernel still
running when the capture stops).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).with_name("schema-3.13.2.sql")
GPU_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # as crashscope.simulate.layout
VM = 1 << 48  # the hardware/VM bits of globalPid in a local capture (real export: 281474976710656)
COMPUTE_KERNELS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas",
    "flash_fwd_kernel",
    "vectorized_elementwise_kernel",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_warpgroupsize2x1_execute_segment_k_off_kernel__5x_cublas",
)
NCCL_NEW = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
NCCL_OLD = "ncclKernel_AllReduce_RING_LL_Sum_float"


def pci(slot: int) -> str:
    return f"0000:{GPU_BUSES[slot % 8]}:00.0"


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        if s not in self.ids:
            self.ids[s] = len(self.ids) + 1
        return self.ids[s]


def plan_job(*, nodes: int, gpus_per_node: int, seed: int, steps: int = 20, slow_rank: int | None = None,
             slow_factor: float = 1.6, hung_rank: int | None = None, step_compute_ms: float = 180.0,
             comm_ms: float = 25.0, noise: float = 0.03) -> dict[str, Any]:
    """Per rank: the steps' (start, compute kernels, AllReduce) on one shared session timeline (ns)."""
    rng = random.Random(seed)
    world = nodes * gpus_per_node
    base = [step_compute_ms * rng.uniform(0.97, 1.03) for _ in range(world)]  # per-GPU speed spread
    t = 2_000_000_000  # the first step starts 2 s into the capture
    plan: dict[int, list[dict[str, Any]]] = {r: [] for r in range(world)}
    for k in range(steps):
        comp = []
        for r in range(world):
            c = base[r] * rng.uniform(1 - noise, 1 + noise) * (slow_factor if r == slow_rank else 1.0)
            comp.append(int(c * 1e6))
        done = t + max(comp) + int(comm_ms * rng.uniform(0.9, 1.1) * 1e6)
        for r in range(world):
            plan[r].append({"start": t, "compute_ns": comp[r], "nccl_start": t + comp[r], "nccl_end": done})
        t = done + int(rng.uniform(0.2, 0.6) * 1e6)  # optimizer step, next batch
    capture_end = t + 500_000_000
    if hung_rank is not None:
        last = plan[hung_rank][-1]
        last["hung"] = True
    return {"world": world, "nodes": nodes, "gpus_per_node": gpus_per_node, "plan": plan, "capture_end": capture_end,
            "slow_rank": slow_rank, "hung_rank": hung_rank}


def write_rank(path: Path, job: dict[str, Any], rank: int, *, host: str, epoch_ns: int, old_names: bool = False,
               rank_in_env: bool = False, pid: int | None = None) -> None:
    """One rank's export at ``path`` (the file nsys writes for ``-o rank%q{SLURM_PROCID}_%h_%p``)."""
    g = job["gpus_per_node"]
    lr = rank % g
    pid = pid or 40000 + rank * 7
    gpid = VM + (pid << 24)
    gtid = gpid + pid  # the main thread (tid == pid)
    s = _Strings()
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMA.read_text())
    ins = con.execute
    ins("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_NAME', 'NVIDIA Nsight Systems')")
    ins("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2024.5.1.113')")
    ins("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.13.2')")
    ins("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_HOST', 'login01')")
    ins("INSERT INTO META_DATA_CAPTURE VALUES ('DEVICE_DISPLAY_NAME', ?)", (host,))
    if rank_in_env:
        ins("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)", (f'SLURM_PROCID="{rank}"',))
        ins("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)", (f'SLURM_LOCALID="{lr}"',))
    ins("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)", (epoch_ns, "", ""))
    ins("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, 'Local (CLI)', 'Hostname', 619, ?)", (VM, host))
    ins("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, 'Local (CLI)', 'NvDriverVersion', 205, '550.54.15')", (VM,))
    for slot in range(g):
        ins("INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, uuid, cuDevice, smCount) VALUES (?,?,?,?,1,?,?,132)",
            (VM, slot, "NVIDIA H100 80GB HBM3", pci(slot), f"5a1c0f57-{rank // g:04x}-{slot:04x}-0000-00000000{slot:04x}", slot))
    ins("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?, ?, 132)", (lr, lr, pid, None))
    ins("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, pid))
    ins("INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, 0, ?)", (VM, job["capture_end"], job["capture_end"]))
    nccl_domain = 1
    ins("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (1000, NULL, 75, 'NCCL', ?, ?)", (gtid, nccl_domain))
    launch = s("cudaLaunchKernel_v7000")
    kernel_rows, runtime_rows, nvtx_rows = [], [], []
    corr = 100
    grid = 0
    for k, st in enumerate(job["plan"][rank]):
        step_end = st["nccl_end"] + 300_000
        hung = st.get("hung")
        nvtx_rows.append((st["start"] - 50_000, None if hung else step_end, 59, f"step {k}", None, gtid, None))
        # compute: a few kernels back to back
        names = COMPUTE_KERNELS
        t = st["start"]
        parts = [st["compute_ns"] // len(names)] * len(names)
        parts[-1] += st["compute_ns"] - sum(parts)
        for name, d in zip(names, parts):
            corr += 1
            grid += 1
            runtime_rows.append((t - 20_000, t - 15_000, 1, gtid, corr, launch, 0, None))
            kernel_rows.append((t, t + d, lr, 1, None, 7, corr, gpid, s(name), s(name), None, 0, 0, 128, 132, 1, 1, 256, 1, 1, 0, 0, 0, 0, grid, 0, None, None))
            t += d
        nname = NCCL_OLD if old_names else NCCL_NEW
        corr += 1
        nvtx_rows.append((st["nccl_start"] - 40_000, st["nccl_start"] - 5_000, 59, None, s("ncclAllReduce"), gtid, nccl_domain))
        runtime_rows.append((st["nccl_start"] - 30_000, st["nccl_start"] - 25_000, 1, gtid, corr, launch, 0, None))
        if not hung:
            grid += 1
            kernel_rows.append((st["nccl_start"], st["nccl_end"], lr, 1, None, 13, corr, gpid, s(nname + "(ncclDevKernelArgs4K)"),
                                s(nname), None, 0, 0, 96, 24, 1, 1, 640, 1, 1, 0, 0, 0, 0, grid, 0, None, None))
        else:
            break
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + ",".join("?" * 28) + ")", kernel_rows)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", runtime_rows)
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) VALUES (?,?,?,?,?,?,?)", nvtx_rows)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in s.ids.items()])
    con.commit()
    path.write_bytes(con.serialize())
    con.close()


def write_job(out: Path, job: dict[str, Any], *, hosts: list[str], epoch_ns: int, old_names: bool = False,
              rank_in_env: bool = False, subdir: str = "nsys") -> list[Path]:
    """Every rank's export under ``out/subdir`` (``rank{r}_{host}_{pid}.sqlite``, or
    ``report_{host}_{pid}.sqlite`` with the rank in the captured environment)."""
    d = out / subdir
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(job["world"]):
        host = hosts[r // job["gpus_per_node"]]
        pid = 40000 + r * 7
        name = f"report_{host}_{pid}.sqlite" if rank_in_env else f"rank{r}_{host}_{pid}.sqlite"
        p = d / name
        write_rank(p, job, r, host=host, epoch_ns=epoch_ns, old_names=old_names, rank_in_env=rank_in_env, pid=pid)
        paths.append(p)
    return paths
