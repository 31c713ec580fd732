"""The checked-in fixture corpus (fixtures/jobs/): every cause, several layouts, healthy runs.

Regenerate with ``crashscope simulate fixtures/jobs --corpus``; a test regenerates it into a
temporary directory and compares every byte. Scenario directory names come from what the
scenario shows ({node}/{rank}/{gpu} are filled from its truth).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

# (name template, simulate() keyword arguments). Seeds are fixed; keep entries append-only so
# existing fixtures keep their bytes.
SCENARIOS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sample_fabric_timeout", dict(cause="fabric_timeout", nodes=4, gpus_per_node=8, seed=11, layout="slurm_out", variant="port_module",
                                   stack=3, timeout_ms=600000, timezone="America/Chicago", confounders=["benign_warn", "old_xid", "nfs_recovered"],
                                   nccl_info_volume=16, telemetry_interval=60.0)),
    ("fabric_timeout_ib_{node}", dict(cause="fabric_timeout", nodes=2, gpus_per_node=4, seed=101, layout="per_rank", variant="link_down", stack=1, confounders=[])),
    ("fabric_timeout_ib_{node}_nccl_files", dict(cause="fabric_timeout", nodes=2, gpus_per_node=2, seed=102, layout="nccl_debug_file", stack=0,
                                                 confounders=["pip_diff", "truncated_line"])),
    ("storage_stall_nfs_{node}", dict(cause="storage_stall", nodes=2, gpus_per_node=4, seed=201, layout="per_node", variant="rank0_save", confounders=["xid45_after"])),
    ("storage_stall_sharded_{node}_rank{rank}", dict(cause="storage_stall", nodes=2, gpus_per_node=2, seed=202, layout="slurm_out", variant="sharded", confounders=[])),
    ("driver_drift_cuda_{node}", dict(cause="driver_drift", nodes=2, gpus_per_node=4, seed=301, layout="per_rank", variant="cuda_insufficient", confounders=["pip_diff"])),
    ("driver_drift_nccl_{node}", dict(cause="driver_drift", nodes=2, gpus_per_node=2, seed=302, layout="slurm_out", variant="nccl_mismatch", confounders=[])),
    ("preemption_2x4", dict(cause="preemption", nodes=2, gpus_per_node=4, seed=401, layout="per_node", confounders=["benign_warn"])),
    ("preemption_vs_scancel_4x2", dict(cause="preemption", nodes=4, gpus_per_node=2, seed=402, layout="slurm_out", confounders=["user_scancel"])),
    ("gpu_throttle_{node}_gpu{gpu}", dict(cause="gpu_throttle", nodes=2, gpus_per_node=4, seed=501, layout="slurm_out", confounders=[])),
    ("gpu_throttle_{node}_gpu{gpu}_two_problems", dict(cause="gpu_throttle", nodes=2, gpus_per_node=2, seed=502, layout="per_rank", confounders=["second_problem"])),
    ("xid79_{node}", dict(cause="gpu_hardware", variant="79", nodes=2, gpus_per_node=4, seed=601, layout="per_rank", confounders=["old_xid"])),
    ("xid48_{node}", dict(cause="gpu_hardware", variant="48", nodes=2, gpus_per_node=2, seed=602, layout="slurm_out", confounders=[])),
    ("xid94_{node}", dict(cause="gpu_hardware", variant="94", nodes=2, gpus_per_node=4, seed=603, layout="nccl_debug_file", confounders=["second_problem"])),
    ("xid74_{node}", dict(cause="gpu_hardware", variant="74", nodes=2, gpus_per_node=2, seed=604, layout="per_node", confounders=[])),
    ("xid119_{node}_hang", dict(cause="gpu_hardware", variant="119", nodes=2, gpus_per_node=4, seed=605, layout="slurm_out", confounders=[])),
    ("xid64_{node}", dict(cause="gpu_hardware", variant="64", nodes=2, gpus_per_node=2, seed=606, layout="per_rank", confounders=["duplicated_lines"])),
    ("node_failure_{node}", dict(cause="node_failure", nodes=2, gpus_per_node=4, seed=701, layout="per_rank", confounders=["missing_rank_file"])),
    ("node_failure_{node}_slurm_out", dict(cause="node_failure", nodes=3, gpus_per_node=2, seed=702, layout="slurm_out", confounders=[])),
    ("oom_cuda_rank{rank}", dict(cause="oom", variant="cuda", nodes=2, gpus_per_node=4, seed=801, layout="slurm_out", confounders=[])),
    ("oom_host_{node}", dict(cause="oom", variant="host", nodes=2, gpus_per_node=2, seed=802, layout="per_node", confounders=["nfs_recovered"])),
    ("software_error_indexerror_rank{rank}", dict(cause="software_error", variant="IndexError", nodes=2, gpus_per_node=4, seed=901, layout="per_rank",
                                                  confounders=["benign_warn"])),
    ("software_error_valueerror_rank{rank}", dict(cause="software_error", variant="ValueError", nodes=2, gpus_per_node=2, seed=902, layout="slurm_out",
                                                  confounders=[])),
    ("time_limit_2x4", dict(cause="time_limit", nodes=2, gpus_per_node=4, seed=1001, layout="per_rank", confounders=[])),
    ("time_limit_2x2_xid45_after", dict(cause="time_limit", nodes=2, gpus_per_node=2, seed=1002, layout="slurm_out", confounders=["xid45_after"])),
    ("healthy_2x4", dict(cause="none", nodes=2, gpus_per_node=4, seed=1101, layout="per_rank", confounders=[])),
    ("healthy_2x2", dict(cause="none", nodes=2, gpus_per_node=2, seed=1102, layout="slurm_out", confounders=["old_xid", "pip_diff"])),
    ("healthy_4x2", dict(cause="none", nodes=4, gpus_per_node=2, seed=1103, layout="per_node", confounders=[])),
)

DEFAULTS: dict[str, Any] = {"nccl_info_volume": 16, "telemetry_interval": 60.0}


def _name(template: str, truth: dict[str, Any]) -> str:
    imp = truth["implicated"]
    return template.format(node=(imp["nodes"] or ["none"])[0], rank=(imp["ranks"] or ["none"])[0],
                           gpu=(imp["gpus"] or [{"index": "none"}])[0]["index"])


def generate_corpus(root: str | os.PathLike[str]) -> list[str]:
    """Write every scenario under ``root``; return the directory names."""
    from crashscope.simulate import simulate

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    names = []
    for template, kwargs in SCENARIOS:
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            truth = simulate(tmp, **{**DEFAULTS, **kwargs})
            name = _name(template, truth)
            dest = root / name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(tmp, dest)
        names.append(name)
    return names


README_HEAD = """# Fixture corpus

`fixtures/jobs/<scenario>/` holds simulated multi-node training job directories made by
`crashscope simulate` (crashscope/simulate/). Every line follows the real formats
described in the format references (NCCL, PyTorch/torchrun, Slurm, kernel/Xid, nvidia-smi);
hosts (`node001`…), IPs (`10.x`) and job ids are fictitious.

Regenerate the whole corpus (deterministic, byte for byte) with:

```
crashscope simulate fixtures/jobs --corpus
```

The scenario list lives in `crashscope/simulate/corpus.py` (`SCENARIOS`);
`tests/test_simulate.py::test_corpus_regenerates_identically` regenerates it into a temporary
directory and compares every file, so after changing the simulator run the command above
and commit the result.

Each scenario directory contains the job's files in one of four layouts and a
`truth.json` answer key:

* `slurm-<jobid>.out`: srun/slurmstepd lines; in the `slurm_out` layout also every rank's output
  under `srun -l` labels (`0: [default3]:...`, torchrun per node);
* `logs/rank<r>.log`, `logs/torchrun.<host>.log` (`per_rank`), plus
  `nccl/nccl.<host>.<pid>.log` (`nccl_debug_file`, i.e. `NCCL_DEBUG_FILE=nccl.%h.%p.log`);
  `<host>/train.log` (`per_node`);
* per node (`nodes/<host>/` or `<host>/`): the kernel log (`dmesg.txt` raw, `dmesg-T.txt`,
  `journal-kernel.log` short-precise, `journal-kernel-iso.log` short-iso, `journal-kernel.json`),
  `gpu-telemetry.csv` (`nvidia-smi --query-gpu ... --format=csv`), `nvidia-smi-q.txt`,
  `pip-freeze.txt`, `ofed_info-s.txt`, `proc-driver-nvidia-version.txt`, `proc-stat.txt`
  (btime), `timedatectl.txt`, `collect.json` (the collector's host/zone/boot record) and
  `torchelastic/<run>/attempt_0/<local_rank>/error.json` when a worker raised;
* `slurm/slurmctld.log`, `slurm/sacct.txt` (`sacct -P`) or `slurm/sacct.json` (`sacct --json`);
* `truth.json`: the report contract's fields (`job`, `cause`, `implicated`, `first_failure`,
  `evidence` with the planted lines' exact `file`/`line`/`text`) plus `confounders`,
  `layout`, `seed` and `options` (versions, time zone, per-host clock skew, kernel log
  formats, timeout, ...).

`sample_fabric_timeout` (4 nodes x 8 GPUs) is the README's sample job.

"""


def readme_text(root: str | os.PathLike[str]) -> str:
    """fixtures/README.md: how to regenerate, what the files are, and the scenario table."""
    import json

    rows = ["| scenario | cause | variant | size | layout | versions | confounders |", "|---|---|---|---|---|---|---|"]
    for d in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        t = json.loads((d / "truth.json").read_text())
        o = t["options"]
        rows.append(f"| `{d.name}` | {t['cause']} | {o['variant'] or ''} | {o['nodes']}x{o['gpus_per_node']} | {t['layout']} | "
                    f"torch {o['torch']} / NCCL {o['nccl']} | {', '.join(o['confounders']) or '-'} |")
    return README_HEAD + "\n".join(rows) + "\n"
