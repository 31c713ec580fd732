"""The isolation logic on its own, against a simulated cluster (run_group replaced): a bad node
among 8, a bad link between two nodes, a fault everywhere, a flaky fault. Real processes are in
test_repro_gloo.py; here the same algorithm drives srun-style node units."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from crashscope.repro import bisect
from crashscope.repro.plan import direct_plan

NODES = [f"gpu{i:02d}" for i in range(8)]


def _fake(monkeypatch: pytest.MonkeyPatch, bad: Callable[[set[str]], str | None]) -> list[list[str]]:
    calls: list[list[str]] = []

    def run_group(g, results: Path, **_kw):  # type: ignore[no-untyped-def]
        units = list(g.unit_names)
        calls.append(units)
        status = bad(set(units)) or "ok"
        return {"op": g.op, "bytes": g.sizes[0], "units": units, "ranks": [], "nranks": g.world, "time": 0.01,
                "algbw": 1.0, "busbw": 1.0 if status == "ok" else None, "status": status, "error": None if status == "ok" else status,
                "stuck": [], "exited": [], "errored": units if status == "error" else [], "late": [], "invalid": [], "sizes": []}

    monkeypatch.setattr(bisect, "run_group", run_group)
    return calls


def _investigate(tmp_path: Path, implicated: list[str] | None = None) -> dict:
    plan = direct_plan("all_reduce", 1 << 20, "bf16", nproc=None, nodes=list(NODES), gpus_per_node=8)
    if implicated:
        plan.implicated_units = implicated
        plan.reference_units = [n for n in NODES if n not in implicated]
    return bisect.Isolation(plan, bisect.Settings(launcher="srun", results=tmp_path)).investigate()


def test_bad_node_among_eight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, lambda units: "error" if "gpu05" in units else None)
    out = _investigate(tmp_path)
    assert out["verdict"] == "confirmed" and out["implicated"]["nodes"] == ["gpu05"]
    assert out["implicated"]["ranks"] == list(range(40, 48))  # the node's 8 GPUs
    assert out["units"]["gpu05"] == "bad" and not out["links"]
    assert len(calls) <= 8  # halves then pairs, not every pair of 8


def test_bad_link_between_two_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, lambda units: "hang" if {"gpu01", "gpu06"} <= units else None)
    out = _investigate(tmp_path)
    assert out["verdict"] == "confirmed" and out["implicated"]["nodes"] == []
    assert [sorted(lk["between"]) for lk in out["links"]] == [["gpu01", "gpu06"]]


def test_bad_link_inside_one_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, lambda units: "slow" if {"gpu02", "gpu03"} <= units else None)
    out = _investigate(tmp_path)
    assert out["verdict"] == "confirmed" and [sorted(lk["between"]) for lk in out["links"]] == [["gpu02", "gpu03"]]
    assert out["implicated"]["nodes"] == []


def test_everything_fails_is_inconclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, lambda units: "error")
    out = _investigate(tmp_path)
    assert out["verdict"] == "inconclusive" and out["implicated"]["nodes"] == []


def test_flaky_failure_is_inconclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, lambda units: "error" if len(units) == 8 else None)  # only at full scale
    out = _investigate(tmp_path)
    assert out["verdict"] == "inconclusive" and "no smaller group" in out["reason"]


def test_clean_group_is_cleared_in_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake(monkeypatch, lambda units: None)
    out = _investigate(tmp_path, implicated=["gpu03"])
    assert out["verdict"] == "cleared" and len(calls) == 1 and calls[0] == NODES
