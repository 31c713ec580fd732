#!/usr/bin/env bash
# One NCCL all_reduce sweep through `crashscope repro` on this machine's GPUs (< 2 minutes).
#
# Needs: crashscope installed with a CUDA build of torch (pip install -e '.[repro]' installs the
# CPU-pinned one; on a GPU machine install the CUDA wheel of the same version), nvidia-smi.
# Writes the JSON verdict to ${OUT:-.}/repro_gpu.json and prints the per-size numbers.
#   bash benchmarks/repro_gpu.sh            # all GPUs, 64 MiB +- sweep (1 MiB, 16 MiB, 256 MiB)
#   NGPUS=4 BYTES=16777216 bash benchmarks/repro_gpu.sh
set -euo pipefail

out_dir="${OUT:-.}"
mkdir -p "$out_dir"
ngpus="${NGPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)}"
if [ -z "$ngpus" ] || [ "$ngpus" -lt 1 ]; then
  echo "repro_gpu: no NVIDIA GPU found (nvidia-smi -L)" >&2
  exit 2
fi
python - <<'PY'
import sys, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
      f"{torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}")
sys.exit(0 if torch.cuda.is_available() else 2)
PY
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,power.draw --format=csv,noheader || true

bytes="${BYTES:-67108864}"
start=$(date +%s)
rc=0
timeout 110 crashscope repro --op all_reduce --backend nccl --nproc "$ngpus" --bytes "$bytes" \
  --sweep 0.015625,0.25,4 --iters 20 --warmup 5 --timeout 30 --format json \
  --results "$out_dir/repro_gpu_results" > "$out_dir/repro_gpu.json" || rc=$?
echo "repro_gpu: exit $rc ($(( $(date +%s) - start )) s); 0 cleared, 1 confirmed, 3 inconclusive, 124 timed out"
python - "$out_dir/repro_gpu.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("verdict:", d["verdict"], "implicated:", d["implicated"])
for run in d["runs"]:
    print(f"{run['purpose']}: {run['nranks']} ranks, status {run['status']}", run.get("error") or "")
    for s in run.get("sizes") or []:
        print(f"  {s['bytes']:>12} B  {s['time'] * 1e6:>10.1f} us  algbw {s['algbw']:8.2f} GB/s  busbw {s['busbw']:8.2f} GB/s")
PY
exit $rc
