"""gpu_csv source: nvidia-smi --query-gpu CSV time series."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions, attrs_text
from crashscope.sources.nvidia_smi import reason_names
from crashscope.testing import parse_text

GOLDEN = Path(__file__).parent.parent / "golden" / "gpu_csv"
UTC_OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)
HEADER = "timestamp, index, pci.bus_id, temperature.gpu, power.draw [W], clocks.sm [MHz], clocks_event_reasons.active"


def _events(df, kind=None):
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return [r for r in rows if kind is None or r["kind"] == kind]


def test_event_reasons_runs_and_telemetry() -> None:
    df, warns = parse_text("gpu_csv", (GOLDEN / "event_reasons_h100.csv").read_text(), options=UTC_OPTS, host_hint="node002")
    assert warns == []
    tel = _events(df, "gpu_telemetry")
    # One routine sample per GPU per minute (lines 2, 3), plus every throttled or hot
    # (>= 83 C) sample of GPU 5; throttle runs below still count every row.
    assert [e["line"] for e in tel] == [2, 3, 7, 9, 11, 13, 15, 17]
    t = tel[2]  # GPU 5, third sample
    assert t["gpu"] == "0000:9a:00.0" and t["gpu_index"] == 5 and t["host"] == "node002"
    assert t["attrs"]["reasons_mask"] == 0x48 and t["attrs"]["reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert t["attrs"]["power_w"] == 402.9 and t["attrs"]["sm_clock_mhz"] == 1095 and t["attrs"]["util"] == 100
    assert str(t["time"]) == "2026-09-14 08:12:44.127000+00:00" and t["time_quality"] == "exact"
    thr = _events(df, "gpu_throttle")
    assert [(e["line"], e["attrs"]["run_samples"]) for e in thr] == [(7, 4), (17, 1)]
    assert thr[0]["attrs"]["run_end"] == "2026-09-14T08:12:50.130Z" and thr[0]["severity"] == "warning"
    assert all(e["gpu"] == "0000:9a:00.0" for e in thr)


def test_legacy_throttle_names_sentinels_identity() -> None:
    df, warns = parse_text("gpu_csv", (GOLDEN / "throttle_reasons_nounits_r470.csv").read_text(), options=UTC_OPTS)
    assert warns == []
    (v,) = _events(df, "version")
    assert v["attrs"] == {"component": "driver", "version": "470.129.06"}
    (inv,) = _events(df, "gpu_inventory")
    assert inv["attrs"]["name"] == "Tesla V100-SXM2-32GB" and inv["gpu"] == "0000:06:00.0"
    tel = _events(df, "gpu_telemetry")
    assert "power_w" not in tel[2]["attrs"]  # [N/A]
    assert "remapped_rows_pending" not in tel[0]["attrs"]  # [N/A] on V100
    (thr,) = _events(df, "gpu_throttle")
    assert thr["attrs"]["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"] and thr["attrs"]["run_samples"] == 2


def test_named_reason_columns_without_mask() -> None:
    text = ("timestamp, index, clocks_throttle_reasons.hw_slowdown, clocks_throttle_reasons.sw_thermal_slowdown\n"
            "2026/09/14 08:00:00.000, 1, Not Active, Not Active\n"
            "2026/09/14 08:00:01.000, 1, Active, Active\n")
    df, _ = parse_text("gpu_csv", text, options=UTC_OPTS)
    (thr,) = _events(df, "gpu_throttle")
    assert thr["gpu_index"] == 1 and thr["gpu"] is None and thr["attrs"]["mask"] == 0x28


def test_requires_reset_and_ecc() -> None:
    text = ("timestamp, index, pci.bus_id, temperature.gpu, ecc.errors.uncorrected.volatile.total\n"
            "2026/09/14 08:00:00.000, 3, 00000000:5D:00.0, 40, 0\n"
            "2026/09/14 08:00:05.000, 3, 00000000:5D:00.0, 41, 2\n"
            "2026/09/14 08:00:10.000, 3, 00000000:5D:00.0, 41, 2\n"
            "2026/09/14 08:00:15.000, 3, 00000000:5D:00.0, [GPU requires reset], [GPU requires reset]\n")
    df, _ = parse_text("gpu_csv", text, options=UTC_OPTS)
    (ecc,) = _events(df, "gpu_ecc")
    assert ecc["line"] == 3 and ecc["severity"] == "critical" and ecc["attrs"]["volatile_uncorrected"] == 2
    (err,) = _events(df, "log_error")
    assert err["severity"] == "critical" and err["gpu"] == "0000:5d:00.0" and err["line"] == 5


def test_local_zone_conversion() -> None:
    text = HEADER + "\n2026/09/14 08:12:44.123, 0, 00000000:18:00.0, 60, 650.00 W, 1980 MHz, 0x0000000000000000\n"
    df, _ = parse_text("gpu_csv", text, options=ParseOptions(tz=ZoneInfo("America/New_York"), tz_known=True, year=2026))
    (t,) = _events(df, "gpu_telemetry")
    assert str(t["time"]) == "2026-09-14 12:12:44.123000+00:00" and t["time_quality"] == "exact"


def test_noheader_is_skipped_with_warning() -> None:
    df, warns = parse_text("gpu_csv", (GOLDEN / "noheader_skipped.csv").read_text())
    assert df.height == 0 and len(warns) == 1 and "header" in warns[0].reason
    assert get_source("gpu_csv").sniff((GOLDEN / "noheader_skipped.csv").read_text(), "gpu.csv") == 0.4


def test_bad_input_never_raises() -> None:
    good = (GOLDEN / "event_reasons_h100.csv").read_text()
    truncated = good[:-40]  # last row cut mid-field
    df, warns = parse_text("gpu_csv", truncated, options=UTC_OPTS)
    assert len(_events(df, "gpu_telemetry")) == 7 and len(warns) == 1 and warns[0].line == 17
    garbage = good.encode() + b"\x00\xff\xfe garbage, \x80\x81\n" + good.encode().split(b"\n", 1)[0] + b"\n"  # + repeated header
    df, warns = parse_text("gpu_csv", garbage, options=UTC_OPTS)
    assert len(_events(df, "gpu_telemetry")) == 8
    for data in (b"", b"\n", bytes(range(256)) * 10, (HEADER + "\n").encode(), (HEADER + "\nnot, a, row\n").encode(),
                 (HEADER + "\n2026/99/99 99:99:99.000, x, y, z, w, v, 0xZZ\n").encode()):
        parse_text("gpu_csv", data)


def test_other_sources_lines_give_nothing() -> None:
    other = "[rank3]: RuntimeError: CUDA error: out of memory\nnode001:12:34 [3] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>\n"
    df, warns = parse_text("gpu_csv", other)
    assert df.height == 0 and len(warns) == 1
    src = get_source("gpu_csv")
    assert src.sniff(other, "slurm-1.out") == 0.0
    assert src.sniff(HEADER + "\n", "gpu.csv") == 0.95
    assert src.sniff("gpu_uuid, remapped_rows.correctable, remapped_rows.uncorrectable\n", "rr.csv") == 0.8
    assert src.sniff("name,age\nbob,3\n", "people.csv") == 0.0


def test_large_series_is_sampled() -> None:
    rows = [HEADER]
    for i in range(50_000):
        for g, bus in ((0, "18"), (1, "2A")):
            mask = "0x0000000000000048" if g == 1 and 20_000 <= i < 20_100 else "0x0000000000000000"
            rows.append(f"2026/09/14 {8 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.{g:03d}, {g}, 00000000:{bus}:00.0, 60, 650.00 W, 1980 MHz, {mask}")
    df, warns = parse_text("gpu_csv", "\n".join(rows) + "\n", options=UTC_OPTS)
    assert warns == []
    # 50,000 s of 1 s samples on 2 GPUs: one routine sample per GPU per minute (834 each)
    # plus the 100 throttled samples, 2 inventory events and one throttle run.
    tel = df.filter(df["kind"] == "gpu_telemetry")
    assert tel.height == 2 * 834 + 100 - 1  # one throttled sample (i=20040) is also a minute's first
    (thr,) = _events(df.filter(df["kind"] == "gpu_throttle"))
    assert thr["attrs"]["run_samples"] == 100


def test_unreadable_gpu_gives_one_log_error() -> None:
    text = ("timestamp, index, pci.bus_id, temperature.gpu, power.draw [W]\n"
            "2026/09/14 08:00:00.000, 1, 00000000:2A:00.0, 40, 300.00 W\n"
            "2026/09/14 08:00:05.000, 1, 00000000:2A:00.0, [Unknown Error], [Unknown Error]\n"
            "2026/09/14 08:00:10.000, 1, 00000000:2A:00.0, [Unknown Error], [Unknown Error]\n")
    df, _ = parse_text("gpu_csv", text, options=UTC_OPTS)
    (err,) = _events(df, "log_error")
    assert err["line"] == 3 and err["severity"] == "error" and err["gpu"] == "0000:2a:00.0"
    assert len(_events(df, "gpu_telemetry")) == 1


_FIELDS = st.one_of(
    st.sampled_from(["[N/A]", "[Not Supported]", "", "0", "1e-05", "0.00001", "123456789012345678", "-3.5"]),
    st.integers(-(10**6), 10**18).map(str),
    st.floats(0, 1e6, allow_nan=False).map(lambda x: f"{x!r}"),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0", "1", "[N/A]"]), st.sampled_from(["00000000:18:00.0", "[N/A]"]), _FIELDS, _FIELDS,
                          st.sampled_from(["P0", "P8", '"P\\x', "Pé", "[N/A]"]), st.sampled_from(["Yes", "No", "[N/A]"]),
                          st.sampled_from(["0x0000000000000048", "0x0000000000000001", "[N/A]"]), st.sampled_from(["GPU-1", "[N/A]"])),
                min_size=1, max_size=12))
def test_telemetry_message_and_attrs_are_those_of_their_values(samples) -> None:
    """The columnar telemetry texts say what an event built from its attrs dict says: the
    compact JSON as attrs_text encodes it, and ``GPU <id> k=v ...`` with Python's str of each
    value, the fields in column order, uuid and reasons left out of the message."""
    header = ("timestamp, index, pci.bus_id, uuid, temperature.gpu, power.draw [W], pstate, remapped_rows.pending, "
              "clocks_event_reasons.active")
    rows = [header]
    for i, (idx, bus, temp, power, pstate, pending, mask, uuid) in enumerate(samples):
        rows.append(f"2026/09/14 08:{i:02d}:00.000, {idx}, {bus}, {uuid}, {temp}, {power} W, {pstate}, {pending}, {mask}")
    df, _ = parse_text("gpu_csv", "\n".join(rows) + "\n", options=UTC_OPTS)
    tel = df.filter(df["kind"] == "gpu_telemetry").to_dicts()
    assert tel, "every sample has its mask or pstate or another field set"
    for r in tel:
        attrs = json.loads(r["attrs"])
        assert r["attrs"] == attrs_text(attrs)
        gpu = r["message"].split(" ", 2)[1]
        assert r["message"] == f"GPU {gpu} " + " ".join(f"{k}={v}" for k, v in attrs.items() if k not in ("reasons", "uuid"))
        if "reasons_mask" in attrs:
            assert attrs["reasons"] == reason_names(attrs["reasons_mask"])
        if "uuid" in attrs:  # the only identity
            assert r["gpu"] is None and r["gpu_index"] is None
