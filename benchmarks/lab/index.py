#!/usr/bin/env python3
"""Write fixtures/recorded/README.md: an index table of the recorded incidents, from their truth.json."""
import json
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "fixtures" / "recorded")
rows = []
for t in sorted(root.glob("*/truth.json")):
    d = json.loads(t.read_text())
    c = d["culprit"]
    rows.append(f"| {d['id']} | {d['scenario']} | {d['launcher']} | {d['cause']} | "
                f"{','.join(c['nodes']) or '-'} | {','.join(map(str, c['ranks'])) or '-'} | "
                f"{d['job_id']} | {d.get('job_state')} | {'held-out' if d.get('held_out') else ''} |")
head = f"""# Recorded incidents

Whole job directories written by real programs (Slurm 22.05 `sbatch`/`srun`, torch 2.13 `torch.distributed`
over gloo, `torchrun`) during real, deliberately injected failures, recorded by `benchmarks/lab/run.py`.
What each scenario does, how truth is set, and the limits (one host posing as two nodes n1/n2, gloo on CPU
instead of NCCL on GPUs, loopback only): `docs/lab.md`. Each directory has `truth.json`
(`cause`, `culprit`, `first_failure`, `fault`, `notes`) and the job's own files: `slurm-<jobid>.out`,
`logs/rank*.log`, `fr/nccl_trace_rank_*` (Flight Recorder, pickle), `elastic/<node>/.../error.json`
(torchrun), `sacct.txt`, `sacct.json`, `scontrol_show_job.txt`, `slurm/` (slurmctld/slurmd log lines of the
job's window, epilog `scontrol show job`), `ckpt_listing.txt` (no checkpoint blobs), `dmesg.txt` (when the
kernel said something in the window).

{len(rows)} incidents. Regenerate this table: `python benchmarks/lab/index.py`. "held-out": recorded in the
held-out round (`run.py --held-out`, `docs/lab.md`), scored before any analysis change for it.

| id | scenario | launcher | cause | culprit nodes | culprit ranks | job | final JobState | round |
|---|---|---|---|---|---|---|---|---|
"""
(root / "README.md").write_text(head + "\n".join(rows) + "\n")
print(f"{len(rows)} rows -> {root / 'README.md'}")
