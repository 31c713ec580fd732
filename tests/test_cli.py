"""CLI behaviour through typer's runner and, for start-up cost, a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from crashscope.cli import app

MINI = Path(__file__).parent / "data" / "mini_ib_job"
runner = CliRunner()


def test_analyze_json_follows_the_contract() -> None:
    res = runner.invoke(app, ["analyze", str(MINI), "--format", "json", "--tz", "UTC"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    required = ["schema_version", "job", "cause", "confidence", "alternatives", "implicated", "first_failure", "evidence", "actions", "warnings", "sources"]
    assert all(k in r for k in required)
    assert r["schema_version"] == "1"
    assert set(r["implicated"]) >= {"nodes", "ranks", "gpus"}
    assert r["cause"] == "fabric_timeout"
    for e in r["evidence"]:
        assert {"rule", "cause", "time", "node", "rank", "file", "line", "message"} <= set(e)
        assert e["time"] is None or e["time"].endswith("Z")
    files = {s["file"] for s in r["sources"]}
    assert "README.md" in files  # every file is listed, recognized or not
    assert {s["kind"] for s in r["sources"]} >= {"unrecognized"}


def test_analyze_terminal_and_markdown() -> None:
    res = runner.invoke(app, ["analyze", str(MINI), "--tz", "UTC", "--width", "100"])
    assert res.exit_code == 0
    assert "fabric_timeout" in res.stdout and "slurm-4242.out:14" in res.stdout
    md = runner.invoke(app, ["analyze", str(MINI), "--format", "markdown", "--tz", "UTC"])
    assert md.stdout.startswith("# crashscope: `fabric_timeout`")
    assert "`slurm-4242.out:14`" in md.stdout


def test_fail_on_crash_and_missing_dir(tmp_path: Path) -> None:
    assert runner.invoke(app, ["analyze", str(MINI), "--fail-on-crash"]).exit_code == 1
    assert runner.invoke(app, ["analyze", str(tmp_path / "nope")]).exit_code == 2


def test_output_inside_the_analysed_directory_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "x.log").write_text("hello\n")
    res = runner.invoke(app, ["analyze", str(job), "--output", str(job / "report.json")])
    assert res.exit_code == 2
    assert not (job / "report.json").exists()


def test_timeline_filters_and_exports(tmp_path: Path) -> None:
    out = tmp_path / "ev.parquet"
    res = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--kind", "collective_timeout", "-o", str(out)])
    assert res.exit_code == 0, res.output
    df = pl.read_parquet(out)
    assert df.height == 3 and set(df["kind"].cast(pl.String)) == {"collective_timeout"}
    res = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--host", "node002", "--severity", "error", "-o", str(tmp_path / "e.jsonl")])
    rows = [json.loads(x) for x in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert rows and all(r["host"] == "node002" and r["severity"] in ("error", "critical") for r in rows)
    res = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--around", "2026-09-14T08:22:45Z", "--window", "2", "-o", str(tmp_path / "w.csv")])
    assert res.exit_code == 0
    w = pl.read_csv(tmp_path / "w.csv")
    assert w.height >= 3
    printed = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--limit", "5"])
    assert printed.exit_code == 0 and "more events" in printed.stdout


def test_sources_lists_registry_and_claims() -> None:
    res = runner.invoke(app, ["sources", "--format", "json"])
    names = [s["name"] for s in json.loads(res.stdout)]
    assert "nccl" in names and "kernel" in names
    res = runner.invoke(app, ["sources", str(MINI), "--format", "json"])
    files = {f["file"]: f for f in json.loads(res.stdout)["files"]}
    assert files["node002/dmesg.txt"]["kind"] == "kernel"
    assert files["node002/proc_stat"]["kind"] == "versions"


def test_help_does_not_import_heavy_modules() -> None:
    code = "import sys; from crashscope.cli import app; print(','.join(m for m in ('torch','sklearn','polars') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"imported at CLI start-up: {out}"


def test_analysis_never_imports_torch() -> None:
    code = (
        "import sys; from crashscope.analyze import analyze; "
        f"analyze({str(MINI)!r}); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
