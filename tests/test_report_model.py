"""The typed report parts: each place writes the keys it always wrote, and a report read
back from its JSON (or from a damaged file) is a report of the right types."""

from __future__ import annotations

import json

from crashscope.report.model import (
    Activity,
    CoOccurring,
    Coverage,
    EventRef,
    EventRow,
    EvidenceItem,
    HostActivity,
    HostSummary,
    Implicated,
    RankActivity,
    Report,
    SymptomGroup,
)


def _report() -> Report:
    ref = EventRef(time="2026-04-11T14:12:39.000000Z", node="node002", rank=None, source="kernel", message="Link down", file="k.log", line=9)
    return Report(
        job={"id": "1", "nodes": ["node001", "node002"], "ranks": 8},
        cause="fabric_timeout", confidence=0.885,
        implicated=Implicated(nodes=["node002"], ranks=[4], gpus=[{"node": "node002", "index": 0, "pci": "0000:18:00.0"}]),
        first_failure=ref,
        evidence=[EvidenceItem(rule="r1", cause="fabric_timeout", time=ref.time, node="node002", rank=4, file="k.log", line=9, message="Link down",
                               gpu="0000:18:00.0", gpu_index=0, source="kernel", kind="link_event", context=[{"line": 9, "text": "Link down"}]),
                  EvidenceItem(rule="r2", cause="fabric_timeout", time=None, node=None, rank=None, file="a.log", line=None, message="m")],
        symptoms=[SymptomGroup(kind="collective_timeout", signature="SeqNum=5", count=3, ranks="0-2", n_ranks=3, hosts=["node001"],
                               first=EventRef(time=None, node="node001", rank=0, file="r0.log", line=2, message="timeout"), missing_ranks=[3])],
        coverage=Coverage(files=2, recognized=2, bytes=10, events=5, hosts={"?": HostSummary(events=1, sources=["sacct"]),
                                                                           "node001": HostSummary(events=4, sources=["nccl"], ranks=2, first="a", last="b")},
                          ranks_seen=3, ranks_expected=4),
        anomalies=[EventRow(time=None, time_quality="missing", node="node001", rank=0, gpu="0000:18:00.0", source="nccl", kind="nccl_error",
                            severity="error", message="x", file="r0.log", line=3, count=2)],
        activity=Activity(ranks=[RankActivity(rank=0, node="node001", first="a", time="b", kind="signal", file="t.log", line=5)],
                          hosts=[HostActivity(node="node001", versions={"driver": "550"}, gpus=8, throttle=["hw_slowdown"], xids=[79], ranks=[0], first="a", last="b")]),
        co_occurring=[CoOccurring(cause="storage_stall", rule="nfs", nodes=["node001"], time=None, file="d.log", line=4, score=0.42)],
        timeline_excerpt=[EventRow(time="t", time_quality="exact", source="kernel", kind="link_event", severity="error", message="y", file="k.log", line=9)],
    )


def test_each_place_writes_its_keys_in_order() -> None:
    d = _report().to_dict()
    assert list(d["first_failure"]) == ["time", "node", "rank", "source", "message", "file", "line"]
    assert list(d["evidence"][0]) == ["rule", "cause", "time", "node", "rank", "file", "line", "message", "gpu", "role", "source", "kind", "context"]
    assert d["evidence"][0]["gpu"] == {"pci": "0000:18:00.0", "index": 0} and d["evidence"][1]["gpu"] is None
    assert list(d["symptoms"][0]) == ["kind", "signature", "count", "ranks", "n_ranks", "hosts", "first", "missing_ranks"]
    assert list(d["symptoms"][0]["first"]) == ["time", "node", "rank", "file", "line", "message"]
    assert list(d["implicated"]) == ["nodes", "ranks", "gpus"]
    assert list(d["coverage"]["hosts"]["node001"]) == ["events", "sources", "ranks", "first", "last"]
    assert list(d["anomalies"][0])[-1] == "count" and "count" not in d["timeline_excerpt"][0]
    assert d["anomalies"][0]["gpu"] == "0000:18:00.0"
    assert d["co_occurring"] == [{"cause": "storage_stall", "rule": "nfs", "nodes": ["node001"], "time": None, "file": "d.log", "line": 4, "score": 0.42}]
    assert d["activity"]["ranks"] == [{"rank": 0, "node": "node001", "first": "a", "last": "b", "kind": "signal", "file": "t.log", "line": 5}]
    assert list(d["activity"]["hosts"][0]) == ["node", "versions", "gpus", "throttle", "xids", "ranks", "first", "last"]
    assert Report(job={}).to_dict()["activity"] == {}
    assert Report(job={}).to_dict()["coverage"] == {} and Report(job={}).to_dict()["first_failure"] is None


def test_json_round_trip() -> None:
    r = _report()
    text = json.dumps(r.to_dict())
    back = Report.from_dict(json.loads(text))
    assert back == r
    assert json.dumps(back.to_dict()) == text
    assert back.fingerprint == r.fingerprint


def test_a_damaged_report_file_still_loads_typed() -> None:
    odd = {"evidence": 3, "symptoms": "x", "anomalies": [None, 5, {"time": 1, "rank": "7", "line": True}], "implicated": {"nodes": 7},
           "coverage": {"hosts": 3, "files": "x"}, "first_failure": [], "timeline_excerpt": None, "cause": "oom"}
    r = Report.from_dict(odd)
    assert r.evidence == [] and r.symptoms == [] and r.first_failure is None and r.timeline_excerpt == []
    assert r.implicated == Implicated() and r.coverage is not None and r.coverage.hosts == {} and r.coverage.files == 0
    row = r.anomalies[0]
    assert row.time is None and row.rank is None and row.line is None
    assert Report.from_dict(r.to_dict()) == r

