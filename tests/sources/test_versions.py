"""versions source: per-node version files and crashscope's collector JSON."""

from __future__ import annotations

import json
from pathlib import Path

from crashscope.sources import get_source
from crashscope.testing import parse_text

GOLDEN = Path(__file__).parent.parent / "golden" / "versions"


def _events(df, kind=None):
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return [r for r in rows if kind is None or r["kind"] == kind]


def _versions(df) -> dict[str, str]:
    return {e["attrs"]["component"]: e["attrs"]["version"] for e in _events(df, "version")}


def test_pip_freeze_curated_only() -> None:
    df, warns = parse_text("versions", (GOLDEN / "pip_freeze.txt").read_text(), host_hint="node004")
    assert warns == []
    v = _versions(df)
    assert v["torch"] == "2.5.1+cu124" and v["nccl"] == "2.21.5" and v["cuda_runtime"] == "12.4.127"
    assert v["megatron-core"] == "0.8.0" and v["transformer-engine"] == "1.11.0" and v["deepspeed"] == "0.15.1"
    assert "requests" not in v and "certifi" not in v and "nvidia-nvtx-cu12" not in v
    assert all(e["host"] == "node004" and e["time"] is None for e in _events(df))


def test_pip_list_and_conda_list() -> None:
    df, _ = parse_text("versions", (GOLDEN / "pip_list.txt").read_text())
    assert _versions(df) == {"deepspeed": "0.14.4", "numpy": "1.26.4", "cuda_runtime": "12.1.105", "nccl": "2.20.5",
                             "torch": "2.4.1+cu121", "triton": "3.0.0"}
    conda = ("# packages in environment at /opt/conda:\n#\n# Name                    Version                   Build  Channel\n"
             "nccl                      2.21.5.1             h6103f9b_0    conda-forge\n"
             "pytorch                   2.5.1           py3.11_cuda12.4_cudnn9.1.0_0    pytorch\n"
             "zlib                      1.3.1                h4ab18f5_1    conda-forge\n")
    df, _ = parse_text("versions", conda)
    assert _versions(df) == {"nccl": "2.21.5.1", "torch": "2.5.1"}


def test_driver_ofed_kernel_nvcc_slurm() -> None:
    combined = "".join((GOLDEN / f).read_text() for f in (
        "nvidia_version_open.txt", "ofed_info_mlnx.txt", "uname_a.txt", "nvcc_version.txt", "sinfo_V.txt"))
    df, warns = parse_text("versions", combined, host_hint="node009")
    assert warns == []
    v = _versions(df)
    assert v == {"driver": "570.124.06", "ofed": "23.10-1.1.9.0", "kernel": "5.15.0-91-generic",
                 "cuda_toolkit": "12.4.131", "slurm": "24.05.3"}
    kernel = [e for e in _events(df, "version") if e["attrs"]["component"] == "kernel"][0]
    assert kernel["host"] == "node001"  # uname -a names the node
    drv = [e for e in _events(df, "version") if e["attrs"]["component"] == "driver"][0]
    assert drv["attrs"]["flavor"] == "open" and drv["line"] == 1
    df, _ = parse_text("versions", (GOLDEN / "ofed_info_doca.txt").read_text())
    assert _events(df)[0]["attrs"] == {"component": "ofed", "version": "24.10-1.1.4.0", "flavor": "doca"}


def test_btime_boot_event_exact() -> None:
    df, _ = parse_text("versions", (GOLDEN / "proc_stat.txt").read_text(), host_hint="node001")
    (b,) = _events(df, "boot")
    assert b["attrs"] == {"btime": 1789300000} and b["time_quality"] == "exact"
    assert str(b["time"]) == "2026-09-13 11:46:40+00:00" and b["host"] == "node001"


def test_torch_lines() -> None:
    df, _ = parse_text("versions", "2.5.1+cu124 12.4 (2, 21, 5)\n")
    assert _versions(df) == {"torch": "2.5.1+cu124", "torch_cuda": "12.4", "nccl": "2.21.5"}
    df, _ = parse_text("versions", "torch.__version__: 2.4.0a0+3bcc3cddb5.nv24.7\ntorch.version.cuda: 12.5\n"
                                   "torch.cuda.nccl.version(): (2, 22, 3)\n")
    assert _versions(df) == {"torch": "2.4.0a0+3bcc3cddb5.nv24.7", "torch_cuda": "12.5", "nccl": "2.22.3"}


def test_collector_json() -> None:
    df, warns = parse_text("versions", (GOLDEN / "collector.json").read_text(), host_hint="dir-host")
    assert warns == []
    v = _versions(df)
    assert v["nccl"] == "2.21.5" and v["timezone"] == "Europe/Berlin" and v["cudnn"] == "9.1.0.70"
    assert all(e["host"] == "node003" for e in _events(df))
    assert str(_events(df, "version")[0]["time"]) == "2026-09-14 08:00:03+00:00"
    (b,) = _events(df, "boot")
    assert b["attrs"]["btime"] == 1789300000
    df, _ = parse_text("versions", (GOLDEN / "collector_lines.jsonl").read_text())
    hosts = {(e["host"], e["attrs"]["component"]): e["attrs"]["version"] for e in _events(df)}
    assert hosts[("node001", "driver")] == "535.154.05" and hosts[("node002", "driver")] == "535.129.03"
    assert hosts[("node001", "cuda_driver")] == "12.2"
    df, warns = parse_text("versions", '{"hostname": "n1", "driver": {"x": 1}, "btime": "soon"}')
    assert df.height == 0 and len(warns) == 2


def test_bad_input_never_raises() -> None:
    df, warns = parse_text("versions", "NVRM version: NVIDIA UNIX x86_64 Kern")  # truncated
    assert df.height == 0 and len(warns) == 1
    df, warns = parse_text("versions", b"\xff\xfe\x00torch==2.5.1\n\x80\x81garbage\nnvidia-nccl-cu12==2.21.5\n")
    assert _versions(df) == {"nccl": "2.21.5"}  # the garbled first line is not trusted, and the file is flagged
    assert any("UTF-8" in w.reason for w in warns)
    for data in (b"", b"\n", bytes(range(256)) * 10, b"{", b"[1, 2", b'{"hostname": ', b"btime notanumber\n"):
        parse_text("versions", data)


def test_other_sources_lines_give_nothing() -> None:
    other = ("[rank3]: RuntimeError: CUDA error: out of memory\n"
             "node001:12:34 [3] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
             "[Mon Sep 14 08:12:44 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28 15:37:48 UTC 2023\n")
    df, _ = parse_text("versions", other)
    assert df.height == 0
    src = get_source("versions")
    assert src.sniff(other, "slurm-1.out") == 0.0
    assert src.sniff((GOLDEN / "ofed_info_mlnx.txt").read_text(), "ofed") == 0.95
    assert src.sniff((GOLDEN / "collector.json").read_text(), "versions.json") == 0.95
    assert src.sniff((GOLDEN / "proc_stat.txt").read_text(), "stat") == 0.9
    assert src.sniff((GOLDEN / "pip_freeze.txt").read_text(), "freeze.txt") == 0.8
    assert src.sniff('{"a": 1, "b": 2}', "x.json") == 0.0
    assert src.sniff("timestamp, index, pci.bus_id\n", "gpu.csv") == 0.0
