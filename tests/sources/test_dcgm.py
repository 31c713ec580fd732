"""The dcgm source beyond its goldens: bit semantics, 4.6 field names, the health tree."""

from __future__ import annotations

import json

import polars as pl

from crashscope.sources import dcgm
from crashscope.testing import parse_text


def _a(row: dict) -> dict:
    return json.loads(row["attrs"])


def _dmon(rows: list[str], cols: str = "SMCLK        DVCCTR                      TMPTR        ") -> str:
    return "\n".join([f"#Entity         {cols}", "ID                                                       C            ", *rows]) + "\n"


def test_dvcctr_is_the_nvml_bitmask_in_decimal() -> None:
    text = _dmon(["GPU 0           1980         0                           61           ",
                  "GPU 1           1410         4                           70           ",   # SW power cap: the governor
                  "GPU 2           990          136                         91           ",   # 0x88: HW slowdown + power brake
                  "GPU 2           990          136                         91           ",
                  "GPU 2           1980         0                           70           "])
    df, w = parse_text("dcgm", text, "dmon.txt", host_hint="node003")
    assert w == []
    thr = df.filter(pl.col("kind") == "gpu_throttle").to_dicts()
    assert len(thr) == 1 and thr[0]["gpu_index"] == 2 and thr[0]["host"] == "node003"
    a = _a(thr[0])
    assert a["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"] and a["mask"] == 136 and a["run_samples"] == 2
    tel = {r["gpu_index"]: _a(r) for r in df.filter(pl.col("kind") == "gpu_telemetry").to_dicts()}
    assert tel[1]["reasons"] == ["sw_power_cap"]


def test_exporter_reads_dcgm_4_6_names_and_sample_times() -> None:
    lab = 'gpu="3",UUID="GPU-1",pci_bus_id="00000000:5D:00.0",device="nvidia3",modelName="NVIDIA H100 80GB HBM3",Hostname="node004"'
    text = "\n".join([
        f"DCGM_FI_DEV_GPU_TEMP_CELSIUS{{{lab}}} 90 1789600000000",
        f"DCGM_FI_DEV_BOARD_POWER_WATTS{{{lab}}} 288.5 1789600000000",
        f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{lab}}} 64 1789600000000",
        f"DCGM_FI_DEV_XID_ERROR{{{lab}}} 79 1789600000000",
        f"DCGM_FI_DEV_ROW_REMAP_PENDING{{{lab}}} 1 1789600000000",
    ]) + "\n"
    assert dcgm.SOURCE.sniff(text, "metrics.txt") >= 0.9
    df, w = parse_text("dcgm", text, "metrics.txt")
    assert w == []
    kinds = df["kind"].cast(pl.String).to_list()
    assert {"gpu_inventory", "gpu_telemetry", "gpu_throttle", "xid", "gpu_ecc"} <= set(kinds)
    xid = df.filter(pl.col("kind") == "xid").row(0, named=True)
    assert _a(xid)["xid"] == 79 and xid["gpu"] == "0000:5d:00.0" and xid["host"] == "node004"
    assert xid["time"].timestamp() == 1789600000.0 and xid["time_quality"] == "exact"
    tel = _a(df.filter(pl.col("kind") == "gpu_telemetry").row(0, named=True))
    assert tel["temperature"] == 90 and tel["power_w"] == 288.5 and tel["reasons"] == ["hw_thermal_slowdown"]
    assert _a(df.filter(pl.col("kind") == "gpu_ecc").row(0, named=True))["remap_pending"] is True


def test_health_messages_wrapped_over_rows_are_joined() -> None:
    text = "\n".join([
        "| Health Monitor Report                                                                  |",
        "| Overall Health            | Warning                                                    |",
        "| GPU                       |                                                            |",
        "| -> 7                      | Warning                                                    |",
        "|    -> Errors              |                                                            |",
        "|       -> Power system     | Warning                                                    |",
        "|                           | Detected clocks event due to power violation in GPU 7.     |",
        "|       -> PMU system       | Warning                                                    |",
        "|                           | Detected XID 62 for GPU 7                                  |",
    ]) + "\n"
    df, w = parse_text("dcgm", text, "health.txt")
    assert w == []
    thr = df.filter(pl.col("kind") == "gpu_throttle").row(0, named=True)
    assert thr["gpu_index"] == 7 and _a(thr)["reasons"] == ["power_violation"]
    assert _a(df.filter(pl.col("kind") == "xid").row(0, named=True))["xid"] == 62


def test_not_dcgm() -> None:
    assert dcgm.SOURCE.sniff("timestamp, index, pci.bus_id\n", "gpu.csv") == 0.0
    assert dcgm.SOURCE.sniff("# HELP node_cpu_seconds_total x\nnode_cpu_seconds_total 1\n", "metrics.txt") == 0.0
