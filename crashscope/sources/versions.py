"""Per-node version files: pip freeze/list, ofed_info -s, /proc/driver/nvidia/version,
uname, nvcc --version, sinfo -V, /proc/stat btime, torch one-liners, and crashscope's
own collector JSON. One file may concatenate several of these outputs.

Recognised lines (fictitious values)::

    NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28 15:37:48 UTC 2023
    NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  (...)
    MLNX_OFED_LINUX-23.10-1.1.9.0:          (ofed_info -s; DOCA-Host: OFED-internal-24.10-1.1.4.0:)
    Linux node001 5.15.0-91-generic #101-Ubuntu SMP ... x86_64 GNU/Linux      (uname -a)
    5.15.0-91-generic                                                          (uname -r)
    Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (...)           (/proc/version)
    Cuda compilation tools, release 12.4, V12.4.131                            (nvcc --version)
    slurm 24.05.3                                                              (sinfo -V)
    btime 1789300000                                                           (/proc/stat)
    torch==2.5.1 / nvidia-nccl-cu12==2.21.5                                    (pip freeze)
    torch                     2.5.1+cu124                                      (pip list, after its header)
    2.5.1+cu124 12.4 (2, 21, 5)      (python -c 'import torch; print(torch.__version__,
                                      torch.version.cuda, torch.cuda.nccl.version())')

Collector JSON (one object, or JSON lines with one object per node), written by
crashscope's prolog/epilog collector; every key is optional::

    {"hostname": "node001",              # host of the events (alias "host"; else the file's host hint)
     "job_id": "123456",                 # Slurm job id, copied to the events
     "boot_id": "6f1c...",               # /proc/sys/kernel/random/boot_id, kept on the boot event
     "collected_at": "2026-09-14T08:00:03Z",  # ISO 8601 with zone: time of the version events
     "driver": "535.154.05",             # NVIDIA kernel driver
     "cuda_driver": "12.2",              # CUDA level the driver supports (nvidia-smi); alias "cuda"
     "cuda_toolkit": "12.4.131",         # nvcc
     "nccl": "2.21.5",                   # string, or [2, 21, 5]
     "torch": "2.5.1+cu124",
     "ofed": "23.10-1.1.9.0",
     "kernel": "5.15.0-91-generic",
     "slurm": "24.05.3",
     "btime": 1789300000,                # /proc/stat btime, epoch seconds
     "timezone": "Europe/Berlin",        # the node's zone for its local-time logs
     "utc_offset": "+02:00",             # its offset at collection time (kept on the timezone event)
     "packages": {"deepspeed": "0.15.1"}}  # further name -> version pairs

Events:

* version: attrs {component, version, ...}; components: driver (+ flavor "open" or
  "proprietary", arch), cuda_driver, cuda_toolkit (+ release "12.4"), cuda_runtime
  (pip nvidia-cuda-runtime-*), torch, torch_cuda (torch.version.cuda), nccl, cudnn,
  cublas, ofed (+ flavor "mlnx" | "doca"), kernel, slurm, timezone (+ utc_offset, abbr
  from timedatectl), and the curated
  ML packages below under their normalized pip name (deepspeed, megatron-core,
  transformer-engine, flash-attn, triton, ...). Time is None unless the file says
  (collector ``collected_at``). Only the curated packages of a pip listing are emitted.
* boot: attrs {btime (epoch seconds), boot_id}, time = btime exactly; the timeline uses it to
  turn dmesg monotonic stamps into wall time.
"""

from __future__ import annotations

from typing import Any

import regex

from crashscope.schema import Kind, TimeQuality
from crashscope.sources.base import FileSource, ParseContext, decode, iso_to_ns, load_json
from crashscope.sources.base import lazy_compile

# pip/conda package (normalized: lower case, runs of -_. as "-") -> component
_PIP_COMPONENTS: dict[str, str] = {
    "torch": "torch",
    "pytorch": "torch",  # conda
    "nvidia-nccl-cu11": "nccl",
    "nvidia-nccl-cu12": "nccl",
    "nvidia-nccl-cu13": "nccl",
    "nccl": "nccl",  # conda
    "nvidia-cuda-runtime-cu11": "cuda_runtime",
    "nvidia-cuda-runtime-cu12": "cuda_runtime",
    "nvidia-cuda-runtime-cu13": "cuda_runtime",
    "nvidia-cuda-runtime": "cuda_runtime",
    "nvidia-cudnn-cu11": "cudnn",
    "nvidia-cudnn-cu12": "cudnn",
    "nvidia-cudnn-cu13": "cudnn",
    "cudnn": "cudnn",
    "nvidia-cublas-cu11": "cublas",
    "nvidia-cublas-cu12": "cublas",
    "nvidia-cublas-cu13": "cublas",
    "nvidia-nvshmem-cu12": "nvshmem",
    "nvidia-nvshmem-cu13": "nvshmem",
}
_CURATED = frozenset({
    "deepspeed", "megatron-core", "megatron-lm", "transformer-engine", "transformer-engine-cu12", "transformer-engine-torch",
    "flash-attn", "apex", "triton", "pytorch-triton", "accelerate", "transformers", "xformers", "vllm", "nemo-toolkit",
    "lightning", "pytorch-lightning", "horovod", "mpi4py", "numpy", "jax", "jaxlib", "tensorflow", "torchvision",
    "cupy-cuda12x", "cupy-cuda11x", "fairscale", "bitsandbytes", "nvidia-dali-cuda120", "torchtitan", "torchelastic",
})

_NVRM = lazy_compile(
    r"""^NVRM\ version:\ NVIDIA\ UNIX\s+
        (?:(?P<arch>\S+)\ Kernel\ Module|Open\ Kernel\ Module(?:\ for\ (?P<arch2>\S+))?)   # proprietary | open
        \s+(?P<ver>\d+\.\d+(?:\.\d+)?)(?:\s|$)""",
    regex.VERBOSE,
)
_OFED = lazy_compile(r"^(?P<flavor>MLNX_OFED_LINUX|OFED-internal)-(?P<ver>\d[\w.-]*?):?\s*$")
_UNAME_A = lazy_compile(r"^Linux\s+(?P<host>\S+)\s+(?P<rel>\d+\.\d+(?:\.\d+)?[-+][\w.+~-]*|\d+\.\d+\.\d+)\s+#")
_UNAME_R = lazy_compile(r"^(?P<rel>\d+\.\d+\.\d+-\d[\w.+~-]*)$")  # a release always has "-<build>"
_PROC_VERSION = lazy_compile(r"^Linux version (?P<rel>\d+\.\d+\S*) \(")
_NVCC = lazy_compile(r"^Cuda compilation tools, release (?P<rel>\d+\.\d+), V(?P<ver>\d+\.\d+\.\d+)")
_SLURM = lazy_compile(r"^slurm(?:-wlm)? (?P<ver>\d+\.\d+\.\d+\S*)$")
_BTIME = lazy_compile(r"^btime (?P<s>\d{9,11})$")
_FREEZE = lazy_compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(?P<ver>[^\s;#]+)")
# "name @ file:///.../name-1.2.3-cp311-...whl" (pip freeze of a wheel install)
_FREEZE_WHEEL = lazy_compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s@\s\S*/[A-Za-z0-9_.]+-(?P<ver>\d[^-/\s]*)-[^/\s]*\.whl$")
_PIP_LIST_HEAD = lazy_compile(r"^Package\s+Version(?:\s+.*)?$")
_PIP_LIST_ROW = lazy_compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s+(?P<ver>\d[^\s]*)(?:\s+.*)?$")
_CONDA_HEAD = lazy_compile(r"^#\s*Name\s+Version\s+Build")
_CONDA_ROW = lazy_compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s+(?P<ver>\d[^\s]*)\s+\S+")
# print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())
_TORCH_TRIPLE = lazy_compile(
    r"""^(?P<torch>\d+\.\d+\.\d+(?:[a-z]+\d*)?(?:\.\w+)?(?:\+[\w.]+)?)\s+
        (?P<cuda>\d+\.\d+|None)\s+
        \(?(?P<n1>\d+),\s*(?P<n2>\d+),\s*(?P<n3>\d+)\)?\s*$""",
    regex.VERBOSE,
)
# labelled one-liners: "torch.__version__: 2.5.1", "torch.version.cuda = 12.4", "torch.cuda.nccl.version(): (2, 21, 5)"
_TORCH_LABEL = lazy_compile(
    r"""^(?P<label>torch\.__version__|torch\.version\.cuda|torch\.cuda\.nccl\.version\(\))\s*[:=]?\s*
        (?P<val>\(\d+,\s*\d+,\s*\d+\)|\d+(?:\.\d+)*\S*)\s*$""",
    regex.VERBOSE,
)
# timedatectl status: "                Time zone: Europe/Berlin (CEST, +0200)"
_TIMEDATECTL_TZ = lazy_compile(r"^Time zone: (?P<zone>[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)*) \((?P<abbr>[^,]+), (?P<off>[+-]\d{4})\)$")
_NORM = lazy_compile(r"[-_.]+")

_JSON_KEYS = ("hostname", "host", "boot_id", "utc_offset", "driver", "cuda_driver", "cuda", "cuda_toolkit", "nccl", "torch", "ofed", "kernel", "btime",
              "timezone", "slurm", "packages", "collected_at")


def _norm(name: str) -> str:
    return _NORM.sub("-", name.lower())


def _component(pkg: str) -> str | None:
    n = _norm(pkg)
    if n in _PIP_COMPONENTS:
        return _PIP_COMPONENTS[n]
    return n if n in _CURATED else None


class VersionsSource(FileSource):
    name = "versions"
    description = "per-node version files: pip freeze, ofed_info -s, /proc/driver/nvidia/version, uname, collected versions"
    filename_hints = ("*version*", "pip*freeze*", "pip*list*", "requirements-frozen*", "ofed_info*", "uname*", "nvcc*",
                      "stat", "proc_stat*", "sinfo*", "conda*list*", "env_info*", "node_info*")

    def sniff(self, head: str, name: str) -> float:
        stripped = head.lstrip()
        if stripped.startswith(("{", "[")) and '"' in stripped:
            obj = _first_json(stripped)
            if isinstance(obj, dict) and sum(k in obj for k in _JSON_KEYS) >= 2:
                return 0.95
            return 0.0
        lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
        if not lines:
            return 0.0
        first = lines[0]
        if _OFED.match(first) or _NVRM.match(first):
            return 0.95
        if first.startswith("nvcc: NVIDIA (R) Cuda compiler driver"):
            return 0.9
        if first.startswith("Local time:") and any(_TIMEDATECTL_TZ.match(ln) for ln in lines[:10]):
            return 0.9
        if first.startswith("cpu ") and any(_BTIME.match(ln) for ln in lines[:200]):
            return 0.9
        if _PIP_LIST_HEAD.match(first) or _CONDA_HEAD.match(first) or (len(lines) > 1 and first.startswith("# packages in environment")):
            return 0.8
        sample = lines[:400]
        frozen = sum(1 for ln in sample if _FREEZE.match(ln))
        if frozen >= 5 and frozen >= 0.6 * len(sample):
            return 0.8
        if frozen == len(sample) and any(_component(m.group("name")) for ln in sample if (m := _FREEZE.match(ln))):
            return 0.7  # a short `pip freeze | grep nccl` of known packages, nothing else in the file
        if len(lines) <= 3 and (_UNAME_A.match(first) or _SLURM.match(first) or _PROC_VERSION.match(first)):
            return 0.7
        if len(lines) <= 3 and _UNAME_R.match(first):
            return 0.5
        if any(_NVRM.match(ln) or _OFED.match(ln) or _NVCC.match(ln) for ln in sample) and frozen + 5 >= len(sample) // 2:
            return 0.6  # a concatenated "versions.txt"
        return 0.0

    def parse_file(self, data: bytes, ctx: ParseContext) -> None:
        text, bad = decode(data)
        if bad:
            ctx.warn("invalid UTF-8 bytes replaced")
        stripped = text.lstrip()
        if stripped.startswith(("{", "[")):
            if _parse_json(stripped, ctx):
                return
        _parse_text(text, ctx)


# -- text ----------------------------------------------------------------------------------

def _parse_text(text: str, ctx: ParseContext) -> None:
    seen: set[tuple[str, str]] = set()

    def ver(n: int, component: str, version: str, line: str, host: str | None = None, **extra: Any) -> None:
        if (component, version) in seen:
            return
        seen.add((component, version))
        ctx.emit(Kind.VERSION, n, line.strip()[:300], host=host, attrs={"component": component, "version": version, **extra})

    mode = None  # "pip_list" | "conda" after their headers
    for n, raw in enumerate(text.replace("\r\n", "\n").split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            if _PIP_LIST_HEAD.match(line):
                mode = "pip_list"
                continue
            if _CONDA_HEAD.match(line):
                mode = "conda"
                continue
            if line.startswith(("---", "===")) or line.startswith("#"):
                continue
            m = _NVRM.match(line)
            if m:
                open_ = "Open Kernel Module" in line
                ver(n, "driver", m.group("ver"), line, flavor="open" if open_ else "proprietary",
                    **({"arch": m.group("arch") or m.group("arch2")} if (m.group("arch") or m.group("arch2")) else {}))
                continue
            if line.startswith("NVRM version:"):
                ctx.warn("unparsed NVRM version line", n, line)
                continue
            m = _OFED.match(line)
            if m:
                ver(n, "ofed", m.group("ver"), line, flavor="mlnx" if m.group("flavor") == "MLNX_OFED_LINUX" else "doca")
                continue
            m = _NVCC.match(line)
            if m:
                ver(n, "cuda_toolkit", m.group("ver"), line, release=m.group("rel"))
                continue
            m = _BTIME.match(line)
            if m:
                s = int(m.group("s"))
                ctx.emit(Kind.BOOT, n, line, time=s * 1_000_000_000, time_quality=TimeQuality.EXACT, attrs={"btime": s})
                continue
            m = _UNAME_A.match(line)
            if m:
                ver(n, "kernel", m.group("rel"), line, host=m.group("host"))
                continue
            m = _PROC_VERSION.match(line)
            if m:
                ver(n, "kernel", m.group("rel"), line)
                continue
            m = _SLURM.match(line)
            if m:
                ver(n, "slurm", m.group("ver"), line)
                continue
            m = _TIMEDATECTL_TZ.match(line)
            if m:
                off = m.group("off")
                ver(n, "timezone", m.group("zone"), line, utc_offset=f"{off[:3]}:{off[3:]}", abbr=m.group("abbr"))
                continue
            m = _TORCH_TRIPLE.match(line)
            if m:
                ver(n, "torch", m.group("torch"), line)
                if m.group("cuda") != "None":
                    ver(n, "torch_cuda", m.group("cuda"), line)
                ver(n, "nccl", f"{m.group('n1')}.{m.group('n2')}.{m.group('n3')}", line)
                continue
            m = _TORCH_LABEL.match(line)
            if m:
                label, val = m.group("label"), m.group("val")
                if label == "torch.__version__":
                    ver(n, "torch", val, line)
                elif label == "torch.version.cuda":
                    ver(n, "torch_cuda", val, line)
                else:
                    ver(n, "nccl", ".".join(regex.findall(r"\d+", val)), line)
                continue
            m = _FREEZE.match(line) or _FREEZE_WHEEL.match(line)
            if m:
                comp = _component(m.group("name"))
                if comp:
                    ver(n, comp, m.group("ver"), line, package=m.group("name"))
                continue
            if mode in ("pip_list", "conda"):
                m = (_PIP_LIST_ROW if mode == "pip_list" else _CONDA_ROW).match(line)
                if m:
                    comp = _component(m.group("name"))
                    if comp:
                        ver(n, comp, m.group("ver"), line, package=m.group("name"))
                    continue
            m = _UNAME_R.match(line)
            if m:
                ver(n, "kernel", m.group("rel"), line)
                continue
        except Exception as e:  # never let one odd line stop the file
            ctx.warn(f"unparsed version line ({type(e).__name__})", n, line)


# -- collector JSON --------------------------------------------------------------------------

def _first_json(text: str) -> Any:
    try:
        return load_json(text)
    except ValueError:
        pass
    first = text.split("\n", 1)[0]
    try:
        return load_json(first)
    except ValueError:
        return None


def _parse_json(text: str, ctx: ParseContext) -> bool:
    """True when the text was collector JSON (a whole object/array, or JSON lines)."""
    objs: list[tuple[int, Any]] = []
    try:
        doc = load_json(text)
        objs = [(1, o) for o in (doc if isinstance(doc, list) else [doc])]
    except ValueError:
        for n, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                objs.append((n, load_json(line)))
            except ValueError:
                if objs:
                    ctx.warn("unparsed collector JSON line", n, line)
        if not objs:
            ctx.warn("invalid collector JSON", 1, text[:80])
            return True
    for n, obj in objs:
        if not isinstance(obj, dict):
            ctx.warn("collector JSON entry is not an object", n, str(obj)[:80])
            continue
        _json_object(n, obj, ctx)
    return True


def _str_version(v: Any) -> str | None:
    if v is None or isinstance(v, (dict, bool)):
        return None
    if isinstance(v, (list, tuple)):
        return ".".join(str(x) for x in v) if v and all(isinstance(x, int) for x in v) else None
    s = str(v).strip()
    return s or None


def _json_object(n: int, obj: dict[str, Any], ctx: ParseContext) -> None:
    host = next((obj[k] for k in ("hostname", "host") if isinstance(obj.get(k), str) and obj[k]), None)
    job = str(obj["job_id"]) if isinstance(obj.get("job_id"), (str, int)) and not isinstance(obj.get("job_id"), bool) else None
    t, q = None, None
    if isinstance(obj.get("collected_at"), str):
        t, q = iso_to_ns(obj["collected_at"], ctx)
        if t is None:
            ctx.warn("unparsed collected_at", n, obj["collected_at"])
            q = None
    who = host or ctx.file.host_hint or "node"

    def ver(component: str, value: Any, **extra: Any) -> None:
        v = _str_version(value)
        if v is None:
            if value is not None:
                ctx.warn(f"collector JSON {component}: not a version", n, str(value)[:80])
            return
        ctx.emit(Kind.VERSION, n, f"{who} {component} {v}", host=host, time=t, time_quality=q, job_id=job,
                 attrs={"component": component, "version": v, **extra})

    for key, comp in (("driver", "driver"), ("cuda_driver", "cuda_driver"), ("cuda", "cuda_driver"),
                      ("cuda_toolkit", "cuda_toolkit"), ("nccl", "nccl"), ("torch", "torch"), ("ofed", "ofed"),
                      ("kernel", "kernel"), ("slurm", "slurm"), ("timezone", "timezone")):
        if key in obj and not (key == "cuda" and "cuda_driver" in obj):
            value = obj[key]
            if comp == "cuda_driver" and isinstance(value, int) and value >= 1000:
                value = f"{value // 1000}.{(value % 1000) // 10}"  # cudaDriverVersion 12020 -> 12.2
            ver(comp, value, **({"utc_offset": obj["utc_offset"]} if comp == "timezone" and isinstance(obj.get("utc_offset"), str) else {}))
    pkgs = obj.get("packages")
    if isinstance(pkgs, dict):
        for name, value in pkgs.items():
            ver(_component(name) or _norm(name), value, package=name)
    if "btime" in obj:
        b = obj["btime"]
        if isinstance(b, int) and not isinstance(b, bool) and b > 0:
            attrs: dict[str, Any] = {"btime": b}
            if isinstance(obj.get("boot_id"), str):
                attrs["boot_id"] = obj["boot_id"]
            ctx.emit(Kind.BOOT, n, f"{who} btime {b}", host=host, time=b * 1_000_000_000, time_quality=TimeQuality.EXACT,
                     job_id=job, attrs=attrs)
        else:
            ctx.warn("collector JSON btime: not epoch seconds", n, str(b)[:80])


SOURCE = VersionsSource()
