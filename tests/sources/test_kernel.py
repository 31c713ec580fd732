"""Explicit checks of the kernel source: containers, times, Xid catalog, blocks, robustness."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from crashscope.sources.base import ParseOptions
from crashscope.sources.kernel import PREFILTER, SOURCE, XID_CATALOG
from crashscope.testing import parse_text

UTC_OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)


def ns(*args: int) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp()) * 1_000_000_000


def parse(text: str | bytes, **kw):
    kw.setdefault("options", UTC_OPTS)
    df, warnings = parse_text("kernel", text, **kw)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


XID_LINES = """\
[ 9120.330217] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[ 9130.004111] NVRM: Xid (PCI:0000:9a:00 GPU-I:02 GPU-CI:01): 94, pid=44123, name=python3, Contained: SM (0x1). RST: No, D-RST: No
[ 9131.000000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
[ 9132.000000] NVRM: Xid (0000:01:00): 13, 0003 00000000 0000a297 00001a0c 00000000 00000000
[ 9133.000000] NVRM: Xid (PCI:0000:9a:00): 45, pid=44123, name=python3, Ch 00000008
[ 9134.000000] NVRM: Xid (PCI:0000:9a:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)
[ 9135.000000] NVRM: Xid (PCI:0000:9a:00): 999, pid=1, name=x, future code
"""


def test_xid_variants_attrs_and_severity():
    rows, warnings = parse(XID_LINES)
    assert warnings == []
    assert [r["kind"] for r in rows] == ["xid"] * 7
    r79, r94, r63, r13, r45, r154, r999 = rows
    assert r79["attrs"]["xid"] == 79 and r79["gpu"] == "0000:3b:00.0" and r79["pid"] is None
    assert r79["attrs"]["pid"] == "<unknown>" and r79["attrs"]["name"] == "<unknown>"
    assert r79["attrs"]["category"] == "PCIE" and r79["attrs"]["action"] == "RESTART_BM" and r79["severity"] == "critical"
    assert r79["attrs"]["mono"] == "9120.330217" and r79["attrs"]["boot"] == 0 and r79["time"] is None
    assert r79["time_quality"] == "missing"
    assert r94["attrs"]["gpu_instance"] == 2 and r94["attrs"]["compute_instance"] == 1
    assert r94["pid"] == 44123 and r94["attrs"]["name"] == "python3" and r94["severity"] == "critical"
    assert "name" not in r63["attrs"]
    assert r63["gpu"] == "0000:10:1c.0" and r63["pid"] == 1896 and r63["attrs"]["category"] == "MEM"
    assert r63["severity"] == "error"
    assert r13["gpu"] == "0000:01:00.0" and r13["attrs"]["category"] == "APP" and r13["severity"] == "error"
    assert r45["attrs"]["category"] == "SYM" and r45["severity"] == "warning"
    assert r154["attrs"]["recovery_action"] == "None" and r154["severity"] == "warning"
    assert r999["attrs"]["xid"] == 999 and "category" not in r999["attrs"] and r999["severity"] == "error"


def test_xid_catalog_covers_reference_codes():
    for code in (8, 13, 31, 32, 43, 45, 48, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119, 120, 121, 136, 137, 140, 143, 144, 150, 154, 155, 158, 159, 162, 167, 171, 172):
        assert code in XID_CATALOG, code
    assert XID_CATALOG[77]["mnemonic"] == "ROBUST_CHANNEL_CE8_ERROR"
    assert XID_CATALOG[98]["mnemonic"] == "ROBUST_CHANNEL_NVDEC7_ERROR"
    assert XID_CATALOG[135]["mnemonic"] == "ROBUST_CHANNEL_CE19_ERROR"
    assert {v["category"] for v in XID_CATALOG.values()} <= {"APP", "MEM", "PCIE", "NVL", "FW", "GPU", "PWR", "SYM"}


def test_boot_counter_and_versions():
    text = (
        "[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (gcc) #101-Ubuntu SMP\n"
        "[    5.234567] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.154.05  Thu Dec 28 15:37:48 UTC 2023\n"
        "[  900.000000] nfs: server fs01 not responding, still trying\n"
        "[    0.000000] Linux version 6.8.0-45-generic (buildd@x) (gcc) #45-Ubuntu SMP\n"
        "[    3.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for aarch64  570.124.06  Release Build  (dvs-builder@U16)  Wed Feb 26 01:45:02 UTC 2025\n"
    )
    rows, warnings = parse(text)
    assert warnings == []
    kinds = [(r["kind"], r["attrs"].get("boot")) for r in rows]
    assert kinds == [("boot", 0), ("version", 0), ("version", 0), ("storage_error", 0), ("boot", 1), ("version", 1), ("version", 1)]
    drivers = [r["attrs"] for r in rows if r["attrs"].get("component") == "driver"]
    assert [(d["version"], d["flavor"], d["arch"]) for d in drivers] == [("535.154.05", "proprietary", "x86_64"), ("570.124.06", "open", "aarch64")]
    assert rows[4]["attrs"]["kernel"] == "6.8.0-45-generic"


def test_local_times_use_configured_zone():
    berlin = ParseOptions(tz=ZoneInfo("Europe/Berlin"), tz_known=False, year=2026, month=9)
    text = (
        "Sep 14 10:12:44 node001 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=python3, DBE\n"
        "[Mon Sep 14 10:12:45 2026] NVRM: Xid (PCI:0000:18:00): 45, pid=1, name=python3, Ch 00000010\n"
        "2026-09-14T08:12:46.5+00:00 node001.cluster.local kernel: nfs: server fs01 OK\n"
        "Sep 14 10:12:44.250000 node001 kernel: [ 8123.456789] nfs: server fs01 not responding, timed out\n"
    )
    rows, _ = parse(text, options=berlin)
    assert rows[0]["time"].timestamp() == ns(2026, 9, 14, 8, 12, 44) / 1e9
    assert rows[0]["time_quality"] == "estimated" and rows[0]["host"] == "node001"
    assert rows[1]["time"].timestamp() == ns(2026, 9, 14, 8, 12, 45) / 1e9 and rows[1]["host"] is None
    assert rows[2]["time_quality"] == "exact" and rows[2]["host"] == "node001"
    assert rows[2]["kind"] == "storage_recovered"
    # syslog keeps the kernel's own stamp next to the receive time
    assert rows[3]["attrs"]["mono"] == "8123.456789" and rows[3]["time"].microsecond == 250000


def test_journal_json_and_other_transports():
    rec = {
        "__REALTIME_TIMESTAMP": "1789373564456789", "_SOURCE_MONOTONIC_TIMESTAMP": "8123456789",
        "_BOOT_ID": "3c7e2a1f9b7d4e0c8a6b5d4c3b2a1f0e", "_TRANSPORT": "kernel", "SYSLOG_IDENTIFIER": "kernel",
        "_HOSTNAME": "node006.cluster.local", "PRIORITY": "4",
        "MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    }
    other = dict(rec, _TRANSPORT="syslog", SYSLOG_IDENTIFIER="myapp", MESSAGE="NVRM: Xid (PCI:0000:3b:00): 79, fake")
    text = json.dumps(rec) + "\n" + json.dumps(other) + "\n" + json.dumps(rec)[:-30] + "\n"
    rows, warnings = parse(text)
    assert len(rows) == 1
    r = rows[0]
    assert r["time"].timestamp() == pytest.approx(1789373564.456789) and r["time_quality"] == "exact"
    assert r["host"] == "node006" and r["attrs"]["mono"] == "8123.456789"
    assert r["attrs"]["boot_id"] == "3c7e2a1f9b7d4e0c8a6b5d4c3b2a1f0e" and "boot" not in r["attrs"]
    assert len(warnings) == 1 and "JSON" in warnings[0].reason and warnings[0].line == 3  # the truncated record


def test_hung_task_block_and_oom_job():
    text = "\n".join([
        "Sep 14 08:14:02 node002 kernel: INFO: task python3:44140 blocked for more than 120 seconds.",
        "Sep 14 08:14:02 node002 kernel:       Tainted: P           OE     5.15.0-91-generic #101-Ubuntu",
        "Sep 14 08:14:02 node002 kernel: Call Trace:",
        "Sep 14 08:14:02 node002 kernel:  __schedule+0x2cd/0x890",
        "Sep 14 08:14:02 node002 kernel:  rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]",
        "Sep 14 08:14:02 node002 kernel:  nfs_getattr+0x1b1/0x3a0 [nfs]",
        "Sep 14 08:15:00 node002 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_0,mems_allowed=0-1,"
        "oom_memcg=/slurm/uid_1001/job_777,task_memcg=/slurm/uid_1001/job_777/step_2/task_1,task=python3,pid=44141,uid=1001",
        "Sep 14 08:15:00 node002 kernel: Memory cgroup out of memory: Killed process 44141 (python3) total-vm:1kB, anon-rss:2kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:1kB oom_score_adj:0",
        "Sep 14 08:16:00 node002 kernel: INFO: task python3:44142 blocked for more than 120 seconds.",
    ]) + "\n"
    rows, warnings = parse(text)
    assert warnings == []
    assert [r["kind"] for r in rows] == ["hung_task", "host_oom", "hung_task"]
    h = rows[0]["attrs"]
    assert h["subsystem"] == "nfs" and h["seconds"] == 120 and h["comm"] == "python3" and rows[0]["pid"] == 44140
    assert h["top_frames"] == ["rpc_wait_bit_killable", "nfs_getattr"]
    o = rows[1]
    assert o["job_id"] == "777" and o["attrs"]["step"] == "2" and o["attrs"]["task"] == 1 and o["pid"] == 44141
    assert o["attrs"]["constraint"] == "CONSTRAINT_MEMCG" and o["attrs"]["anon_rss_kb"] == 2
    assert rows[2]["attrs"]["subsystem"] == "other" and rows[2]["attrs"]["top_frames"] == []  # flushed at end of input


def test_launcher_prefix_and_caller():
    rows, _ = parse("3: [ 8123.456789] [T44120] python3[44120]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]\n")
    assert len(rows) == 1
    r = rows[0]
    assert r["kind"] == "segfault" and r["pid"] == 44120 and r["attrs"]["library"] == "libnccl.so.2"
    assert r["attrs"]["comm"] == "python3" and r["attrs"]["mono"] == "8123.456789"


def test_truncated_line_warns_and_goes_on():
    text = (
        "[ 9130.004111] NVRM: Xid (PCI:0000:9a:0\n"
        "[ 9131.000000] INFO: task python3:44140 blocked for more than 12\n"
        "[ 9132.000000] nfs: server fs01 not responding, still trying\n"
    )
    rows, warnings = parse(text)
    assert [r["kind"] for r in rows] == ["storage_error"]
    assert len(warnings) == 2 and all(w.line in (1, 2) for w in warnings)


def test_garbage_and_binary_do_not_raise():
    rnd = random.Random(7)
    junk = bytes(rnd.randrange(256) for _ in range(20000))
    data = junk + b"\n[ 9120.330217] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n" + junk
    rows, _ = parse(data)
    assert [r["kind"] for r in rows].count("xid") == 1
    # lines that pass the prefilter but are mangled
    odd = "\n".join([
        "{\"MESSAGE\": \"NVRM: Xid (PCI:0000:3b:00): 79,", "{]", "[ 99999999999999999999.1] AER: ", "Call Trace:",
        " foo+0x1/0x2 [nvidia]", "\x00\x01 invoked oom-killer: ", "oom-kill:constraint=,pid=x", "Killed process 1 (",
        "mce: [Hardware Error]: CPU x", "EDAC MC0: 1 CE ", "SXid (PCI:zz)", "Port module event: module x",
    ]) + "\n"
    parse(odd)  # must not raise


def test_empty_input():
    rows, warnings = parse("")
    assert rows == [] and warnings == []
    rows, warnings = parse(b"\n\n\n")
    assert rows == [] and warnings == []


def test_other_sources_lines_give_nothing():
    text = "\n".join([
        "node001:44120:44120 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "node001:44120:44300 [0] transport/net_ib.cc:1297 NCCL WARN NET/IB : Got completion from peer 10.0.1.8<42123> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.1.7 remoteGids::ffff:10.0.1.8 hca mlx5_0",
        "[rank3]:[E914 08:12:44.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=123456.0. Some of the step tasks have been OOM Killed.",
        "Sep 14 08:12:46 node007 myapp[5000]: Killed process 1234 (worker) as requested",
        "  File \"/opt/train.py\", line 12, in <module>",
    ]) + "\n"
    rows, warnings = parse(text)
    assert rows == [] and warnings == []


def test_prefilter_compiles_in_polars_and_is_selective():
    df = pl.DataFrame({"l": [
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, y", " rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]",
        "INFO: task kworker/u16:2:812 blocked for more than 120 seconds.", "nfs: server fs01 OK",
        "NCCL INFO Channel 00/32 :    0   1   2   3", "Epoch 3 step 100 loss 2.31", "[ 1.0] usb 1-1: new high-speed USB device",
    ]})
    hits = df.filter(pl.col("l").str.contains(PREFILTER))["l"].to_list()
    assert len(hits) == 4


def test_sniff():
    dmesg = "[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02) (gcc) #101\n" + "".join(
        f"[ {i:4d}.000000] usb 1-1: something {i}\n" for i in range(1, 50))
    assert SOURCE.sniff(dmesg, "dmesg.txt") >= 0.9
    journal = "".join(f"Sep 14 08:12:{i:02d} node001 kernel: eth0: message {i}\n" for i in range(40))
    assert SOURCE.sniff(journal, "kern.log") >= 0.9
    jl = "".join(json.dumps({"__REALTIME_TIMESTAMP": "1", "_TRANSPORT": "kernel", "MESSAGE": "x"}) + "\n" for _ in range(10))
    assert SOURCE.sniff(jl, "journal.json") >= 0.9
    mixed = "".join(
        f"Sep 14 08:12:{i:02d} node001 {'kernel' if i % 3 == 0 else 'slurmd[2301]'}: message {i}\n" for i in range(60))
    assert SOURCE.sniff(mixed, "messages") == pytest.approx(0.6)
    nccl = "".join(f"node001:44120:44120 [0] NCCL INFO line {i}\n" for i in range(50))
    assert SOURCE.sniff(nccl, "slurm-123.out") == 0.0
    assert SOURCE.sniff("", "x") == 0.0
    assert SOURCE.sniff("\x00\xff garbage", "x") == 0.0


def test_talosctl_dmesg_lines_keep_node_time_and_message():
    # siderolabs/talos `talosctl dmesg`: "<node>: <facility>: <severity %7s>: [<RFC 3339>]: <message>"
    text = (
        "10.5.0.3: kern:    info: [2022-07-28T11:49:42.505423063Z]: cni0: port 1(veth32488a86) entered forwarding state\n"
        "k8s-0: kern:     err: [2026-02-05T19:14:13.467216703Z]: NVRM: Xid (PCI:0000:41:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "k8s-0: user: warning: [2026-02-05T19:14:14.000000000Z]: [talos] NVRM: Xid (PCI:0000:41:00): 79, echoed by a service\n"
    )
    rows, _ = parse(text)
    xids = [r for r in rows if r["kind"] == "xid"]
    assert len(xids) == 1  # the user-facility record is not the kernel's
    r = xids[0]
    assert r["host"] == "k8s-0" and r["time_quality"] == "exact" and r["attrs"]["xid"] == 79
    assert r["time"].timestamp() == pytest.approx(datetime(2026, 2, 5, 19, 14, 13, 467216, tzinfo=timezone.utc).timestamp())
    assert SOURCE.sniff(text * 10, "dmesg.txt") >= 0.9
