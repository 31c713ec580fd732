"""`crashscope repro` with real torch.distributed gloo processes on 127.0.0.1 (4 ranks, small
sizes): a clean run is cleared with consistent numbers; the isolation names the injected slow,
hung or exiting rank; a hang is caught within the timeout and leaves no process behind."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from crashscope.repro import bandwidths, torch_available

pytestmark = pytest.mark.skipif(not torch_available(), reason="torch is not installed (pip install 'crashscope[repro]')")

GOLDEN = Path(__file__).resolve().parent / "golden" / "reports"
TIMEOUT = 2.0


def _isolate(tmp_path: Path, inject: list[str], *, nproc: int = 4, op: str = "all_reduce", nbytes: int = 1 << 16, sweep=None):
    from crashscope.repro.bisect import Isolation, Settings
    from crashscope.repro.plan import direct_plan

    plan = direct_plan(op, nbytes, "float32", nproc=nproc, nodes=None, gpus_per_node=1)
    s = Settings(iters=4, warmup=1, timeout=TIMEOUT, inject=inject, sweep=sweep or [], results=tmp_path / "res")
    return Isolation(plan, s).investigate()


def _no_worker_left(results: Path) -> None:
    for f in results.rglob("rank*.json"):
        pid = json.loads(f.read_text())["pid"]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"])
def test_clean_run_is_cleared_with_consistent_numbers(tmp_path: Path, op: str) -> None:
    out = _isolate(tmp_path, [], op=op, sweep=[0.5, 2] if op == "all_reduce" else None)
    assert out["verdict"] == "cleared" and out["implicated"] == {"nodes": [], "ranks": []}
    (run,) = out["runs"]
    assert run["status"] == "ok" and run["ranks"] == [0, 1, 2, 3] and run["op"] == op
    algbw, busbw = bandwidths(op, 4, run["bytes"], run["time"])
    assert run["algbw"] == pytest.approx(algbw) and run["busbw"] == pytest.approx(busbw)
    # the per-rank files: every rank validated the known values and timed 4 calls
    for r in range(4):
        d = json.loads((Path(out["results_dir"]) / "run01" / f"rank{r}.json").read_text())
        assert d["status"] == "ok" and all(s["valid"] and len(s["seconds"]) == 4 for s in d["sizes"])
    if op == "all_reduce":
        assert [s["bytes"] for s in run["sizes"]] == [1 << 16, 1 << 15, 1 << 17]


def test_slow_rank_is_named(tmp_path: Path) -> None:
    out = _isolate(tmp_path, ["2:delay=0.25"])
    assert out["verdict"] == "confirmed" and out["implicated"]["ranks"] == [2]
    assert out["runs"][0]["status"] == "slow" and out["runs"][0]["late"] == ["rank2"]
    assert out["units"]["rank2"] == "bad" and all(out["units"][f"rank{i}"] in ("ok", "untested") for i in (0, 1, 3))
    assert any(r["status"] == "ok" and "rank2" not in r["units"] for r in out["runs"])  # a reference group passed


def test_exiting_rank_is_named(tmp_path: Path) -> None:
    out = _isolate(tmp_path, ["1:exit"])
    assert out["verdict"] == "confirmed" and out["implicated"]["ranks"] == [1]
    full = out["runs"][0]
    assert full["status"] == "error" and full["exited"] == ["rank1"]
    assert "rank 1 exited with status 1" in full["error"]


def test_hang_is_caught_within_the_timeout_and_named(tmp_path: Path) -> None:
    t0 = time.monotonic()
    out = _isolate(tmp_path, ["3:hang"])
    assert out["verdict"] == "confirmed" and out["implicated"]["ranks"] == [3]
    full = out["runs"][0]
    assert full["status"] == "hang" and full["stuck"] == ["rank3"]
    # caught: timeout + the watchdog's grace + start-up, not the 60 s default or forever
    assert full["wall_s"] < TIMEOUT + 2.0 + 6.0
    for r in out["runs"]:
        if r["status"] == "hang":
            assert r["stuck"] == ["rank3"]
    _no_worker_left(Path(out["results_dir"]))
    assert time.monotonic() - t0 < 90


def test_cli_json_exit_codes_and_report_update(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crashscope.cli import app

    runner = CliRunner()
    base = ["--iters", "3", "--warmup", "1", "--timeout", str(TIMEOUT), "--sweep", "none", "--format", "json"]
    res = runner.invoke(app, ["repro", "--op", "all_reduce", "--bytes", "4096", "--nproc", "4", *base])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["verdict"] == "cleared" and set(d) >= {"verdict", "implicated", "runs"}
    assert set(d["runs"][0]) >= {"op", "bytes", "ranks", "time", "algbw", "busbw", "status", "error"}

    report = tmp_path / "report.json"
    shutil.copy(GOLDEN / "fabric_timeout_ib_node002.json", report)
    md = tmp_path / "report.md"
    res = runner.invoke(app, ["repro", str(report), "--bytes", "4096", "--inject", "1:exit", "--update-report", "-o", str(md), *base])
    assert res.exit_code == 1, res.output
    d = json.loads(res.stdout)
    assert d["verdict"] == "confirmed" and d["implicated"]["nodes"] == ["node002"] and d["implicated"]["ranks"] == [4, 5, 6, 7]
    saved = json.loads(report.read_text())
    assert saved["repro"]["verdict"] == "confirmed" and saved["cause"] == "fabric_timeout"
    assert "## Reproduction (crashscope repro)" in md.read_text()


def test_hang_without_the_fork_server_kills_the_process_group(tmp_path: Path) -> None:
    """The argv itself (as srun/torchrun groups run): the hung worker's process group is
    signalled and reaped."""
    from crashscope.repro.launch import Group, run_group

    g = Group(op="all_reduce", sizes=[4096], dtype="float32", unit_ids=[0, 1], unit_names=["rank0", "rank1"], iters=2,
              warmup=1, timeout=TIMEOUT, inject=["1:hang"])
    rec = run_group(g, tmp_path / "run", preload=False)
    assert rec["status"] == "hang" and rec["stuck"] == ["rank1"]
    assert rec["launcher_rc"][1] in (-15, -9)  # killed and reaped, not left running
    assert rec["launcher_rc"][0] is not None
