"""Fault simulator: writes a realistic failed (or healthy) multi-node training job directory
plus ``truth.json``, deterministically from a seed.

    from crashscope.simulate import simulate
    truth = simulate("out/", cause="fabric_timeout", nodes=4, gpus_per_node=8, seed=7)

Modules: ``layout`` (topology, file routing, buffered writer), ``formats`` (one function per
real line format), ``job`` (the healthy run and the failure cascade), ``causes`` (one function
per cause), ``confounders`` (noise), ``truth`` (the answer key), ``corpus`` (the checked-in
fixtures).
"""

from __future__ import annotations

import os
import random
from typing import Any, Iterable

from crashscope.simulate.layout import LAYOUTS

CAUSES = ("fabric_timeout", "storage_stall", "driver_drift", "preemption", "gpu_throttle", "gpu_hardware",
          "node_failure", "oom", "software_error", "time_limit", "none")
CONFOUNDER_NAMES = ("benign_warn", "old_xid", "xid45_after", "nfs_recovered", "pip_diff", "user_scancel",
                    "truncated_line", "missing_rank_file", "duplicated_lines", "second_problem")


def simulate(
    out: str | os.PathLike[str],
    *,
    cause: str,
    nodes: int = 2,
    gpus_per_node: int = 2,
    seed: int = 0,
    layout: str | None = None,
    confounders: Iterable[str] | None = None,
    confounder_rate: float = 0.3,
    nccl_info_volume: int = 32,
    variant: str | None = None,
    stack: int | None = None,
    timezone: str | None = None,
    timeout_ms: int | None = None,
    kill_on_bad_exit: bool | None = None,
    sacct_json: bool | None = None,
    telemetry_interval: float | None = None,
    traces: bool = False,
) -> dict[str, Any]:
    """Write a job directory to ``out`` and ``out/truth.json``; return the truth dict.

    cause: a taxonomy label except ``unknown`` (``none`` = healthy run). layout: one of
    ``LAYOUTS`` (random by seed when None). confounders: names from ``CONFOUNDER_NAMES``
    (None: each drawn with probability ``confounder_rate``). nccl_info_volume: NCCL
    ``Channel`` INFO lines per rank (the size knob). variant: cause-specific (e.g. Xid
    number for gpu_hardware, ``cuda``/``host`` for oom). stack: index into job.STACKS
    (torch/NCCL versions). traces: also write the dump-on-timeout lines and Flight Recorder
    dumps of torch >= 2.4 (off by default, so the checked-in corpus keeps its bytes). Everything
    else defaults to a seeded random choice.
    """
    from crashscope.simulate import causes as C
    from crashscope.simulate import confounders as X
    from crashscope.simulate import truth as T
    from crashscope.simulate.job import Job

    if cause not in CAUSES:
        raise ValueError(f"unknown cause {cause!r}; choose one of {', '.join(CAUSES)}")
    if nodes < 1 or gpus_per_node < 1 or gpus_per_node > 8:
        raise ValueError("nodes >= 1 and 1 <= gpus_per_node <= 8")
    if cause in ("fabric_timeout", "node_failure", "driver_drift") and nodes < 2:
        raise ValueError(f"{cause} needs at least 2 nodes")
    rng = random.Random(seed)
    layout = layout or rng.choice(LAYOUTS)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    if confounders is None:
        chosen = [c for c in CONFOUNDER_NAMES if rng.random() < confounder_rate]
    else:
        chosen = list(confounders)
        for c in chosen:
            if c not in CONFOUNDER_NAMES:
                raise ValueError(f"unknown confounder {c!r}; choose from {', '.join(CONFOUNDER_NAMES)}")
    sj = rng.random() < 0.5 if sacct_json is None else sacct_json
    job = Job(rng, cause=cause, nodes=nodes, gpus_per_node=gpus_per_node, layout=layout, timeout_ms=timeout_ms,
              nccl_info_volume=nccl_info_volume, stack=stack, zone=timezone, kill_on_bad_exit=kill_on_bad_exit,
              telemetry_interval=telemetry_interval, variant=variant)
    job.emit_launch()
    C.CAUSE_FUNCS[cause](job)
    late = []
    for c in chosen:  # confounders that change versions must run before the files are written
        job.confounders.append(X.CONFOUNDERS[c](job))
        late.append(c)
    job.emit_boot()
    job.traces = traces
    job.resolve()
    job.emit_dump_on_timeout()
    for fn in job.post:
        fn()
    job.finish()
    job.emit_telemetry()
    job.emit_smi_q()
    job.emit_versions()
    job.emit_slurm_accounting(sj)
    out = os.fspath(out)
    os.makedirs(out, exist_ok=True)
    job.sink.write(out)
    options = {
        "variant": job.variant, "nodes": nodes, "gpus_per_node": gpus_per_node, "confounders": chosen,
        "nccl_info_volume": nccl_info_volume, "torch": job.torch, "nccl": job.nccl, "cuda": job.cuda,
        "driver": job.driver, "slurm": job.slurm_version, "timezone": job.zone, "timeout_ms": job.timeout_ms,
        "kill_on_bad_exit": job.kill_on_bad_exit, "sacct": "json" if sj else "text",
        "clock_skew_s": {job.hosts[n]: job.skew[n] for n in range(nodes) if job.skew[n]},
        "kernel_log_format": {job.hosts[n]: job.node_kfmt[n] for n in range(nodes)},
        "telemetry_interval_s": job.telemetry_interval,
        "node_versions": {job.hosts[n]: {"driver": job.node_driver[n][0], "cuda_driver": job.node_driver[n][1], "nccl": job.node_nccl[n]}
                          for n in range(nodes) if job.node_driver[n][0] != job.driver or job.node_nccl[n] != job.nccl},
    }
    truth = T.build(job, seed, options)
    T.write(out, truth)
    return truth


__all__ = ["simulate", "CAUSES", "CONFOUNDER_NAMES", "LAYOUTS"]
