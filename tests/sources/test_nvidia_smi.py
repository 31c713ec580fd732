"""nvidia_smi source: nvidia-smi -q reports and the plain table."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

GOLDEN = Path(__file__).parent.parent / "golden" / "nvidia_smi"
UTC_OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)


def _events(df, kind=None):
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return [r for r in rows if kind is None or r["kind"] == kind]


def test_q_r535_throttle_inventory_versions() -> None:
    df, warns = parse_text("nvidia_smi", (GOLDEN / "q_r535_h100_hw_thermal.txt").read_text(), options=UTC_OPTS, host_hint="node002")
    assert warns == []
    versions = {e["attrs"]["component"]: e["attrs"]["version"] for e in _events(df, "version")}
    assert versions == {"driver": "535.154.05", "cuda_driver": "12.2"}
    inv = _events(df, "gpu_inventory")
    assert [(e["gpu"], e["gpu_index"], e["attrs"]["uuid"]) for e in inv] == [
        ("0000:18:00.0", 0, "GPU-5a1c0f57-3e1b-8f2d-41c6-0b9e2a7d11f0"),
        ("0000:9a:00.0", 5, "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"),
    ]
    (thr,) = _events(df, "gpu_throttle")
    assert thr["gpu"] == "0000:9a:00.0" and thr["severity"] == "warning" and thr["host"] == "node002"
    assert thr["attrs"]["reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert thr["attrs"]["mask"] == 0x48 and thr["attrs"]["temperature"] == 88 and thr["attrs"]["sm_clock_mhz"] == 945
    tel = _events(df, "gpu_telemetry")
    assert len(tel) == 2 and tel[0]["attrs"]["reasons_mask"] == 0 and tel[0]["attrs"]["power_w"] == 512.37
    assert str(thr["time"]) == "2026-09-14 08:12:44+00:00"
    assert _events(df, "gpu_ecc") == []  # all counters zero


def test_q_local_time_uses_configured_zone() -> None:
    text = (GOLDEN / "q_r535_h100_hw_thermal.txt").read_text()
    df, _ = parse_text("nvidia_smi", text, options=ParseOptions(tz=ZoneInfo("Europe/Berlin"), tz_known=False, year=2026))
    ev = _events(df, "gpu_throttle")[0]
    assert str(ev["time"]) == "2026-09-14 06:12:44+00:00"  # CEST = UTC+2
    assert ev["time_quality"] == "estimated"


def test_q_legacy_and_r550_ecc() -> None:
    df, _ = parse_text("nvidia_smi", (GOLDEN / "q_r470_v100_legacy.txt").read_text(), options=UTC_OPTS)
    (thr,) = _events(df, "gpu_throttle")
    assert thr["attrs"]["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    ecc = {e["gpu"]: e for e in _events(df, "gpu_ecc")}
    assert ecc["0000:07:00.0"]["severity"] == "critical"
    assert ecc["0000:07:00.0"]["attrs"]["volatile_uncorrected"] == 2 and ecc["0000:07:00.0"]["attrs"]["retired_pending"] is True
    assert ecc["0000:06:00.0"]["severity"] == "info"  # lifetime correctable only

    df, _ = parse_text("nvidia_smi", (GOLDEN / "q_r550_ecc_row_remap.txt").read_text(), options=UTC_OPTS)
    (e,) = _events(df, "gpu_ecc")
    assert e["gpu"] == "0000:9a:00.0" and e["severity"] == "critical"
    assert e["attrs"]["volatile_uncorrected"] == 1 and e["attrs"]["volatile_corrected"] == 12
    assert e["attrs"]["remapped_uncorrectable"] == 1 and e["attrs"]["remap_pending"] is True and e["attrs"]["remap_failure"] is False


def test_remap_failure_is_critical_and_sentinels() -> None:
    text = """
==============NVSMI LOG==============

Timestamp                                 : Mon Sep 14 09:00:00 2026
Driver Version                            : 550.90.07
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:2A:00.0
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 8
        Pending                           : No
        Remapping Failure Occurred        : Yes
    Temperature
        GPU Current Temp                  : [GPU requires reset]
"""
    df, warns = parse_text("nvidia_smi", text, options=UTC_OPTS)
    (e,) = _events(df, "gpu_ecc")
    assert e["severity"] == "critical" and e["attrs"]["remap_failure"] is True
    (r,) = _events(df, "log_error")
    assert r["severity"] == "critical" and r["gpu"] == "0000:2a:00.0"
    assert not any("temperature" in t["attrs"] for t in _events(df, "gpu_telemetry"))


def test_repeated_snapshots_dedupe_throttle() -> None:
    text = (GOLDEN / "q_r535_h100_hw_thermal.txt").read_text()
    later = text.replace("08:12:44", "08:13:44")
    df, _ = parse_text("nvidia_smi", text + later, options=UTC_OPTS)
    assert len(_events(df, "gpu_throttle")) == 1
    assert len(_events(df, "gpu_telemetry")) == 4
    assert len(_events(df, "version")) == 2


def test_dedented_fragment_is_read() -> None:
    # A README's paste of one GPU's -q output, dedented to column 0 (the heading) with the
    # labels indented below it (github.com/l4rz/reverse-engineering-dell-idrac-to-get-rid-of-gpu-throttling).
    text = (
        "Clocks Throttle Reasons\n"
        "    Idle                              : Not Active\n"
        "    Applications Clocks Setting       : Not Active\n"
        "    SW Power Cap                      : Not Active\n"
        "    HW Slowdown                       : Active\n"
        "        HW Thermal Slowdown           : Not Active\n"
        "        HW Power Brake Slowdown       : Active\n"
        "\n"
        "Clocks\n"
        "    Graphics                          : 382 MHz\n"
        "    SM                                : 382 MHz\n"
    )
    assert get_source("nvidia_smi").sniff(text, "nvidia-smi-q.txt") > 0.5
    assert get_source("nvidia_smi").sniff(text, "notes.txt") > 0.5
    df, _ = parse_text("nvidia_smi", text, options=UTC_OPTS)
    (t,) = _events(df, "gpu_throttle")
    assert t["line"] == 5 and set(t["attrs"]["reasons"]) == {"hw_slowdown", "hw_power_brake_slowdown"}
    # A log that merely has a word like "Clocks" at the start of a line is not claimed.
    assert get_source("nvidia_smi").sniff("Clocks\nstep 10 loss 2.3\nTemperature\n  raised\n", "train.log") == 0.0


def test_table_versions_rows_and_ecc() -> None:
    df, warns = parse_text("nvidia_smi", (GOLDEN / "table_r535.txt").read_text(), options=UTC_OPTS)
    assert warns == []
    assert {e["attrs"]["component"]: e["attrs"]["version"] for e in _events(df, "version")} == {"driver": "535.154.05", "cuda_driver": "12.2"}
    tel = _events(df, "gpu_telemetry")
    assert [(t["gpu_index"], t["gpu"], t["attrs"]["temperature"]) for t in tel] == [(0, "0000:18:00.0", 61), (1, "0000:2a:00.0", 58), (2, "0000:9a:00.0", 88)]
    (e,) = _events(df, "gpu_ecc")
    assert e["gpu_index"] == 2 and e["attrs"]["volatile_uncorrected"] == 1


def test_banner_without_table_and_cuda_na() -> None:
    df, _ = parse_text("nvidia_smi", "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: N/A       |\n")
    assert [e["attrs"] for e in _events(df, "version")] == [{"component": "driver", "version": "470.256.02"}]
    assert all(e["time"] is None for e in _events(df))


def test_bad_input_never_raises() -> None:
    good = (GOLDEN / "q_r535_h100_hw_thermal.txt").read_text()
    truncated = good[: good.rindex("HW Thermal Slowdown") + 25]  # cut mid-line
    df, _ = parse_text("nvidia_smi", truncated, options=UTC_OPTS)
    assert len(_events(df, "gpu_inventory")) == 2
    garbage = good.encode()[:3000] + b"\x00\xff\xfe\x80garbage\xc3\x28\n" + good.encode()[3000:]
    df, warns = parse_text("nvidia_smi", garbage, options=UTC_OPTS)
    assert len(_events(df, "gpu_throttle")) == 1 and any("UTF-8" in w.reason for w in warns)
    for data in (b"", b"\n\n", bytes(range(256)) * 20, b"GPU 00000000:18:00.0\n" * 3, b"Timestamp : garbage\n"):
        parse_text("nvidia_smi", data)


def test_other_sources_lines_give_nothing() -> None:
    other = "node001:12:34 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n[rank3]: RuntimeError: CUDA error: out of memory\n"
    df, _ = parse_text("nvidia_smi", other)
    assert df.height == 0
    src = get_source("nvidia_smi")
    assert src.sniff(other, "slurm-1.out") == 0.0
    assert src.sniff((GOLDEN / "q_r550_ecc_row_remap.txt").read_text(), "x.txt") == 1.0
    assert src.sniff((GOLDEN / "table_r570.txt").read_text(), "x.txt") == 0.9
    assert src.sniff("job start\n" * 10 + (GOLDEN / "table_r570.txt").read_text(), "slurm-1.out") < 0.5
