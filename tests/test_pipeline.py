"""End to end on a hand-composed job in real formats (tests/data/mini_ib_job)."""

from __future__ import annotations

from pathlib import Path

from crashscope.pipeline import analyze

MINI = Path(__file__).parent / "data" / "mini_ib_job"


def test_mini_ib_job_is_attributed_to_the_fabric_on_node002() -> None:
    report, tl, result = analyze(MINI, tz="UTC")
    assert report.cause == "fabric_timeout"
    assert report.implicated.nodes == ["node002"]
    assert report.implicated.ranks == [2]
    assert report.first_failure is not None
    assert report.first_failure.file == "slurm-4242.out" and report.first_failure.line == 14
    # Every evidence item points at a real line of a real file with that text.
    for e in report.evidence:
        text = (MINI / e.file).read_text().splitlines()[e.line - 1]
        assert e.message[:40] in text
    # Three ranks timed out in SeqNum 812; rank 2 did not: the collapsed group says so.
    timeouts = [s for s in report.symptoms if s.kind == "collective_timeout"]
    assert timeouts and timeouts[0].count == 3 and timeouts[0].missing_ranks == [2]
    # c10 lines carry only a rank; the host comes from NCCL's (host, pid) -> rank join.
    assert set(tl.events.filter(tl.events["kind"] == "collective_timeout")["host"].to_list()) == {"node001", "node002"}
    # The mlx5 line of node002 was converted from boot-relative time with /proc/stat btime.
    link = tl.events.filter(tl.events["kind"] == "link_event").row(0, named=True)
    assert link["time_quality"] == "aligned" and link["time"].isoformat().startswith("2026-09-14T08:22:45")
    assert any("node001/dmesg.txt" in w and "boot-relative" in w for w in report.warnings)
    assert {s["file"] for s in report.sources} >= {"slurm-4242.out", "node002/dmesg.txt", "node002/proc_stat"}
    # The IB error names its peer by IP; NCCL's NET/IB lines say node001 owns that IP.
    ib = tl.events.filter(tl.events["kind"] == "network_error").row(0, named=True)
    assert '"peer_host":"node001"' in ib["attrs"]
    assert "peer node001" in report.summary
