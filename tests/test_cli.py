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


def test_profile_says_where_the_time_went() -> None:
    res = subprocess.run([sys.executable, "-m", "crashscope", "analyze", str(MINI), "-f", "json", "--profile"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)  # the report stays on stdout, untouched
    head, *rows = res.stderr.splitlines()
    assert head.startswith("profile: ingest ") and "timeline" in head and "attribution" in head
    table = {r.split()[0]: r.split() for r in rows[1:] if not r.strip().startswith("slowest")}
    assert "nccl" in table or "pytorch" in table, res.stderr
    assert any(r.strip().startswith("slowest files: ") for r in rows)


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
        "import sys; from crashscope.pipeline import analyze; "
        f"analyze({str(MINI)!r}); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


# --- CLI hygiene: one-line errors, exit 2, checks before the analysis --------------------

import os  # noqa: E402

import pytest  # noqa: E402

import crashscope.pipeline as analyze_mod  # noqa: E402
from crashscope.errors import EXIT_CODES  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "jobs" / "sample_fabric_timeout"


@pytest.fixture
def no_analysis(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fails the test if the analysis runs: the error must come before it."""
    calls: list[str] = []

    def boom(*a, **k):  # type: ignore[no-untyped-def]
        calls.append("analyze")
        raise AssertionError("the analysis ran before the usage error was found")

    monkeypatch.setattr(analyze_mod, "analyze", boom)
    monkeypatch.setattr(analyze_mod, "load_timeline", boom)
    return calls


def test_timeline_reads_the_timeline_without_the_analysis(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`crashscope timeline` is the load_timeline stage: no rules, verdict or report."""
    def boom(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("timeline ran the whole analysis")

    monkeypatch.setattr(analyze_mod, "analyze", boom)
    res = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--kind", "collective_timeout", "-o", str(tmp_path / "t.jsonl")])
    assert res.exit_code == 0, res.stderr
    rows = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(rows) == 3 and all('"collective_timeout"' in r for r in rows)


def _one_line_error(res, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    err = res.stderr.strip()
    assert err.startswith("crashscope: ") and "\n" not in err, res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    return err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--source", "bogus=*.log"], "unknown source 'bogus'"),
        (["--source", "nccl"], "NAME=GLOB"),
        (["-o", "/nonexistent-crashscope-dir/r.json"], "does not exist"),
        (["--tz", "Bad/Zone"], "unknown time zone"),
        (["--timezone", "Bad/Zone"], "unknown time zone"),
        (["--tz", "Factory"], "not usable"),
        (["--tz", "posixrules"], "not usable"),
        (["--tz", "localtime"], "not usable"),
        (["--tz", "right/UTC"], "not usable"),
        (["--ranks", "-4"], "--ranks"),
        (["--width", "10"], "--width"),
        (["--rules", "/nonexistent-crashscope-rules"], "not a folder"),
    ],
)
def test_analyze_usage_errors_are_one_line_and_come_first(args: list[str], needle: str, no_analysis: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["analyze", str(MINI), *args])
    assert needle in _one_line_error(res)
    assert no_analysis == []
    assert not (tmp_path / "report.html").exists()


def test_output_into_a_file_as_parent_and_onto_a_directory(tmp_path: Path, no_analysis: list[str]) -> None:
    (tmp_path / "afile").write_text("x")
    assert "not a directory" in _one_line_error(runner.invoke(app, ["analyze", str(MINI), "-o", str(tmp_path / "afile" / "r.json")]))
    assert "is a directory" in _one_line_error(runner.invoke(app, ["analyze", str(MINI), "-o", str(tmp_path)]))
    assert no_analysis == []


def test_timeline_filters_are_checked_before_the_analysis(no_analysis: list[str], tmp_path: Path) -> None:
    assert "unknown event kind 'bogus'" in _one_line_error(runner.invoke(app, ["timeline", str(MINI), "--kind", "bogus"]))
    assert "--severity" in _one_line_error(runner.invoke(app, ["timeline", str(MINI), "--severity", "loud"]))
    assert "ISO 8601" in _one_line_error(runner.invoke(app, ["timeline", str(MINI), "--since", "yesterday"]))
    assert ".parquet" in _one_line_error(runner.invoke(app, ["timeline", str(MINI), "-o", str(tmp_path / "x.txt")]))
    assert "--rank" in _one_line_error(runner.invoke(app, ["timeline", str(MINI), "--rank", "-1"]))
    assert no_analysis == []


def test_timeline_unknown_host_is_an_error_not_an_empty_table() -> None:
    res = runner.invoke(app, ["timeline", str(MINI), "--tz", "UTC", "--host", "nosuchnode"])
    err = _one_line_error(res)
    assert "nosuchnode" in err and "node002" in err
    assert res.stdout == ""


def test_timeline_quality_column_tells_exact_from_estimated() -> None:
    res = runner.invoke(app, ["timeline", str(SAMPLE), "--limit", "400", "--width", "200"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.stderr
    words = set(res.stdout.split())
    assert "exact" in words and "estimated" in words
    assert " e " not in res.stdout


def test_version_short_help_and_exit_codes_in_help() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.startswith("crashscope ")
    for cmd in ([], ["analyze"], ["timeline"], ["sources"], ["simulate"], ["rules", "check"]):
        h = runner.invoke(app, [*cmd, "-h"])
        assert h.exit_code == 0, (cmd, h.stderr)
        assert h.stdout == runner.invoke(app, [*cmd, "--help"]).stdout
        assert "<bool>" not in h.stdout and "[default: False]" not in h.stdout, cmd
        if cmd and cmd[0] != "rules":
            assert "Exit codes:" in h.stdout and all(f"  {k}  " in h.stdout for k in EXIT_CODES), cmd


def test_sources_honours_format_and_output_suffix(tmp_path: Path) -> None:
    md = runner.invoke(app, ["sources", "--format", "markdown"])
    assert md.exit_code == 0 and md.stdout.startswith("# crashscope sources") and "| nccl |" in md.stdout
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["sources", str(MINI), "-o", str(out)])
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    assert {f["file"] for f in data["files"]} >= {"node002/dmesg.txt"}
    assert "inside the analysed directory" in _one_line_error(runner.invoke(app, ["sources", str(MINI), "-o", str(MINI / "claims.json")]))


def test_output_suffix_picks_the_view(tmp_path: Path) -> None:
    for name, check in (("r.json", lambda t: json.loads(t)["cause"] == "fabric_timeout"),
                        ("r.md", lambda t: t.startswith("# crashscope: `fabric_timeout`")),
                        ("r.txt", lambda t: t.startswith("crashscope: fabric_timeout"))):
        res = runner.invoke(app, ["analyze", str(MINI), "--tz", "UTC", "-o", str(tmp_path / name)])
        assert res.exit_code == 0 and res.stdout == "", (name, res.stderr)
        assert check((tmp_path / name).read_text()), name
    res = runner.invoke(app, ["analyze", str(MINI), "--tz", "UTC", "-f", "json", "-o", str(tmp_path / "r.txt")])
    assert json.loads((tmp_path / "r.txt").read_text())["cause"] == "fabric_timeout"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_terminal_view_leads_with_the_verdict_and_fits(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLE)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("crashscope: fabric_timeout") and "confidence" in lines[0]
    head = "\n".join(lines[:8])
    assert "Culprit: node node001" in head and "First failure:" in head
    assert max(len(ln) for ln in lines) <= 80
    assert len(lines) <= 45  # render.COMPACT_LINES: the verdict stays on one screen
    for bad in ("None", " ?", "None:", ":None", "0 hosts", "job ?"):
        assert bad not in res.stdout, bad
    full = runner.invoke(app, ["analyze", str(SAMPLE), "--full"], env={"COLUMNS": "80"})
    assert len(full.stdout.splitlines()) > len(lines) and "Timeline around the first failure" in full.stdout
    wide = runner.invoke(app, ["analyze", str(SAMPLE), "--width", "160"], env={"COLUMNS": "80"})
    assert max(len(ln) for ln in wide.stdout.splitlines()) > 80


def test_simulate_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    out = tmp_path / "job"
    assert runner.invoke(app, ["simulate", str(out), "--seed", "1"]).exit_code == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    err = _one_line_error(runner.invoke(app, ["simulate", str(out), "--seed", "2"]))
    assert "not empty" in err and "--force" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert runner.invoke(app, ["simulate", str(out), "--seed", "2", "--force"]).exit_code == 0


@pytest.mark.parametrize("args, needle", [
    (["--cause", "gpu_hardware", "--variant", "999"], "--variant"),
    (["--timezone", "Bad/Zone"], "unknown time zone"),
    (["--timezone", "Factory"], "not usable"),
    (["--cause", "bogus"], "--cause"),
    (["--cause", "node_failure", "--nodes", "1"], "at least 2 nodes"),
])
def test_simulate_usage_errors(args: list[str], needle: str, tmp_path: Path) -> None:
    out = tmp_path / "job"
    assert needle in _one_line_error(runner.invoke(app, ["simulate", str(out), *args]))
    assert not out.exists()  # no half-written job


def test_simulate_into_an_unwritable_place(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    assert "not a directory" in _one_line_error(runner.invoke(app, ["simulate", str(tmp_path / "afile" / "job")]))


def test_site_rules_add_to_the_shipped_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crashscope.engine.load import load_rules, set_extra_rule_dirs

    shipped = len(load_rules().rules)
    site = tmp_path / "site"
    site.mkdir()
    src = next((Path(__file__).resolve().parent.parent / "rules" / "oom").glob("*cuda_oom*.yaml"))
    text = src.read_text().replace("\nid: ", "\nid: site-", 1) if "\nid: " in src.read_text() else "id: site-" + src.read_text().split("id: ", 1)[1]
    (site / "site_rule.yaml").write_text(text)
    try:
        res = runner.invoke(app, ["rules", "list", "--rules", str(site)])
        assert res.exit_code == 0, res.stderr
        assert len(res.stdout.splitlines()) == shipped + 1 and "site-" in res.stdout
        only = runner.invoke(app, ["rules", "list", "--no-shipped", "--rules", str(site)])
        assert len(only.stdout.splitlines()) == 1
        monkeypatch.setenv("CRASHSCOPE_RULES", str(site))
        set_extra_rule_dirs([])
        assert len(load_rules().rules) == shipped + 1
    finally:
        set_extra_rule_dirs([])


def test_missing_rules_are_loud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crashscope.engine.load as load
    from crashscope.engine.evaluate import default_rules

    empty = tmp_path / "norules"
    empty.mkdir()
    monkeypatch.setattr(load, "DEFAULT_RULES_DIR", empty)
    default_rules.cache_clear()
    try:
        res = runner.invoke(app, ["analyze", str(MINI), "--tz", "UTC", "-f", "json"])
        assert res.exit_code == 0
        assert "no detection rules loaded" in res.stderr
        assert any("no detection rules loaded" in w for w in json.loads(res.stdout)["warnings"])
    finally:
        monkeypatch.undo()
        default_rules.cache_clear()


def test_a_broken_classifier_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    import crashscope.classify.model as cm

    def broken():  # type: ignore[no-untyped-def]
        raise ValueError("feature mismatch")

    monkeypatch.setattr(cm, "default_model", broken)
    from crashscope.health import component_warnings

    assert any("classifier failed to load" in w and "feature mismatch" in w for w in component_warnings())


# --- output safety ---------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_output_parent_swapped_for_a_symlink_into_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The -o directory is checked, then (during the analysis) replaced by a symlink into the
    analysed directory: the report must land in the directory that was checked."""
    import shutil

    job = tmp_path / "job"
    shutil.copytree(MINI, job)
    victim = "slurm-4242.out"
    before = _snapshot(job)
    outdir = tmp_path / "out"
    outdir.mkdir()
    real = analyze_mod.analyze

    def swap_then_analyze(*a, **k):  # type: ignore[no-untyped-def]
        outdir.rename(tmp_path / "moved")
        os.symlink(job, outdir)
        return real(*a, **k)

    monkeypatch.setattr(analyze_mod, "analyze", swap_then_analyze)
    res = runner.invoke(app, ["analyze", str(job), "--tz", "UTC", "-f", "json", "-o", str(outdir / victim)])
    assert res.exit_code == 0, res.stderr
    assert _snapshot(job) == before  # no input overwritten, nothing added
    assert json.loads((tmp_path / "moved" / victim).read_text())["cause"] == "fabric_timeout"


def test_output_into_a_directory_moved_inside_the_job_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    job = tmp_path / "job"
    shutil.copytree(MINI, job)
    outdir = tmp_path / "out"
    outdir.mkdir()
    real = analyze_mod.analyze

    def move_then_analyze(*a, **k):  # type: ignore[no-untyped-def]
        outdir.rename(job / "out")  # the opened directory now lies inside the evidence
        return real(*a, **k)

    monkeypatch.setattr(analyze_mod, "analyze", move_then_analyze)
    before = _snapshot(job)
    res = runner.invoke(app, ["analyze", str(job), "--tz", "UTC", "-o", str(outdir / "r.json")])
    assert "inside the analysed directory" in _one_line_error(res)
    assert _snapshot(job) == before


def test_output_name_that_is_a_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    import shutil

    job = tmp_path / "job"
    shutil.copytree(MINI, job)
    before = _snapshot(job)
    link = tmp_path / "r.json"
    os.symlink(job / "slurm-4242.out", link)
    res = runner.invoke(app, ["analyze", str(job), "--tz", "UTC", "-o", str(link)])
    assert res.exit_code == 0, res.stderr
    assert not link.is_symlink() and json.loads(link.read_text())["cause"] == "fabric_timeout"
    assert _snapshot(job) == before


def test_output_via_symlinked_path_into_the_job_is_refused(tmp_path: Path) -> None:
    import shutil

    job = tmp_path / "job"
    shutil.copytree(MINI, job)
    os.symlink(job / "node002", tmp_path / "alias")
    before = _snapshot(job)
    res = runner.invoke(app, ["analyze", str(job), "-o", str(tmp_path / "alias" / "r.json")])
    assert "inside the analysed directory" in _one_line_error(res)
    assert _snapshot(job) == before
