"""Rule engine: loader (path:line issues), validators, evaluation semantics, CLI, docs."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from crashscope.engine import evaluate, load_rules
from crashscope.engine.docs import render_rules_md
from crashscope.engine.evaluate import evaluate_rule
from crashscope.engine.load import REPO_ROOT, RuleError
from crashscope.engine.validate import check
from crashscope.schema import EVENT_SCHEMA, KINDS, SEVERITIES, SOURCE_NAMES, Kind, one_of
from factories import SEC, T0, make_event, make_events

BASE = """\
id: {id}
title: {title}
status: {status}
description: d
cause: {cause}
role: {role}
weight: 0.5
severity: error
sources: [{sources}]
kinds: [{kinds}]
match:
{match}
culprit: {culprit}
explanation: e
actions: [do something]
tests:
  hit: [{{source: nccl, lines: ['x']}}]
  miss: [{{source: nccl, lines: ['y']}}]
"""


def write_rule(tmp: Path, name: str = "r.yaml", *, id: str = "test-rule", title: str = "T", status: str = "experimental",
               cause: str = "gpu_hardware", role: str = "cause", sources: str = "kernel", kinds: str = "xid",
               match: str = "  sel:\n    kinds: [xid]\n", culprit: str = "event", folder: str = "gpu_hardware") -> Path:
    d = tmp / folder
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text(BASE.format(id=id, title=title, status=status, cause=cause, role=role, sources=sources, kinds=kinds, match=match, culprit=culprit))
    return p


def one(tmp: Path, **kw) -> object:
    write_rule(tmp, **kw)
    rs = load_rules(tmp)
    assert not [i for i in rs.issues if i.severity == "error"], rs.issues
    return rs.rules[0]


# --- factories -------------------------------------------------------------------------------


def test_make_event_is_in_schema() -> None:
    df = make_event(kind="xid", source="kernel", attrs={"xid": 79}, t=3)
    assert df.schema == EVENT_SCHEMA
    assert df["time"].cast(pl.Int64)[0] == T0 + 3 * SEC
    assert json.loads(df["attrs"][0]) == {"xid": 79}


# --- selections ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sel,attrs,fires",
    [
        ("attrs.xid: 79", {"xid": 79}, True),
        ("attrs.xid: 79", {"xid": 48}, False),
        ("attrs.xid: [48, 79]", {"xid": 48}, True),
        ("attrs.xid: {gte: 60}", {"xid": 79}, True),
        ("attrs.xid: {lte: 60}", {"xid": 79}, False),
        ("attrs.pci: {exists: true}", {"pci": "0000:3b:00.0"}, True),
        ("attrs.pci: {exists: true}", {"xid": 1}, False),
        ("attrs.pci: {exists: false}", {"xid": 1}, True),
        ("attrs.text: {re: 'fallen off'}", {"text": "GPU has fallen off the bus."}, True),
        ("attrs.text: {contains: 'bus.'}", {"text": "GPU has fallen off the bus."}, True),
        ("attrs.fatal: true", {"fatal": True}, True),
        ("attrs.fatal: true", {"fatal": False}, False),
        ("attrs.category: MEM", {"category": "MEM"}, True),
        ("attrs.reasons: {re: hw_slowdown}", {"reasons": ["sw_power_cap", "hw_slowdown"]}, True),
    ],
)
def test_attr_operators(tmp_path: Path, sel: str, attrs: dict, fires: bool) -> None:
    rule = one(tmp_path, match=f"  sel:\n    {sel}\n")
    ev = make_event(kind="xid", source="kernel", attrs=attrs)
    assert (evaluate_rule(rule, ev) is not None) is fires


def test_message_modifiers_and_condition(tmp_path: Path) -> None:
    match = """  a:
    message|re: 'RETRY_EXC|error 12'
  b:
    message|contains: [flush]
  condition: a and not b
"""
    rule = one(tmp_path, match=match, sources="nccl", kinds="network_error")
    mk = lambda m: make_event(kind="network_error", source="nccl", message=m)  # noqa: E731
    assert evaluate_rule(rule, mk("status=IBV_WC_RETRY_EXC_ERR(12)")) is not None
    assert evaluate_rule(rule, mk("RETRY_EXC then flush")) is None
    assert evaluate_rule(rule, mk("other")) is None


def test_prefilter_by_kind_and_source(tmp_path: Path) -> None:
    rule = one(tmp_path, match="  sel:\n    attrs.xid: 79\n")
    assert evaluate_rule(rule, make_event(kind="xid", source="nccl", attrs={"xid": 79})) is None
    assert evaluate_rule(rule, make_event(kind="log_error", source="kernel", attrs={"xid": 79})) is None


# --- finding shape ---------------------------------------------------------------------------


def test_finding_fields_evidence_cap_and_order(tmp_path: Path) -> None:
    rule = one(tmp_path, match="  sel:\n    kinds: [xid]\n")
    rows = [dict(kind="xid", source="kernel", attrs={"xid": 79}, t=20 - i, host=f"node00{i % 3 + 1}", rank=i,
                 gpu="0000:3b:00.0", gpu_index=i % 2, line=i + 1, message=f"m{i}") for i in range(15)]
    f = evaluate(make_events(*rows), [rule], include_experimental=True)[0]
    assert f.count == 15 and len(f.evidence) == 10
    assert f.first_time == T0 + 6 * SEC
    assert [e.time for e in f.evidence] == sorted(e.time for e in f.evidence)
    assert f.evidence[0].message == "m14"
    assert set(f.hosts) == {"node001", "node002", "node003"}
    assert f.hosts[0] == "node003"  # ordered by first occurrence in time
    assert ("node003", "0000:3b:00.0", 0) in f.gpus
    assert f.rule_id == "test-rule" and f.role == "cause" and f.status == "experimental"


def test_culprit_earliest(tmp_path: Path) -> None:
    rule = one(tmp_path, culprit="earliest")
    ev = make_events(dict(kind="xid", source="kernel", host="node002", rank=5, t=5), dict(kind="xid", source="kernel", host="node001", rank=1, t=1))
    f = evaluate_rule(rule, ev)
    assert f.hosts == ("node001",) and f.ranks == (1,) and f.count == 2


def test_status_filtering(tmp_path: Path) -> None:
    rule = one(tmp_path, status="experimental")
    ev = make_event(kind="xid", source="kernel")
    assert evaluate(ev, [rule]) == []
    assert len(evaluate(ev, [rule], include_experimental=True)) == 1
    dep = one(tmp_path / "d", status="deprecated")
    assert evaluate(ev, [dep], include_experimental=True) == []


def test_empty_events() -> None:
    assert evaluate(pl.DataFrame(schema=EVENT_SCHEMA)) == []


# --- cross-event conditions --------------------------------------------------------------------

WINDOW = """  stall:
    kinds: [storage_error]
  ok:
    kinds: [storage_recovered]
  condition: stall
  {key}:
    selection: ok
    direction: after
    same: host
{extra}"""


@pytest.mark.parametrize("key,recover_host,recover_t,fires", [
    ("not_within", "node001", 30, False),
    ("not_within", "node002", 30, True),   # recovery on another host does not count
    ("not_within", "node001", -30, True),  # a recovery before the stall does not count
    ("within", "node001", 30, True),
    ("within", "node002", 30, False),
])
def test_within_and_not_within(tmp_path: Path, key: str, recover_host: str, recover_t: int, fires: bool) -> None:
    rule = one(tmp_path, match=WINDOW.format(key=key, extra=""), sources="kernel", kinds="storage_error, storage_recovered", cause="storage_stall", folder="storage_stall")
    ev = make_events(dict(kind="storage_error", source="kernel", t=0), dict(kind="storage_recovered", source="kernel", host=recover_host, t=recover_t))
    assert (evaluate_rule(rule, ev) is not None) is fires


def test_within_seconds_limit(tmp_path: Path) -> None:
    m = WINDOW.format(key="within", extra="").replace("    same: host\n", "    same: host\n    seconds: 10\n")
    rule = one(tmp_path, match=m, sources="kernel", kinds="storage_error, storage_recovered", cause="storage_stall", folder="storage_stall")
    near = make_events(dict(kind="storage_error", source="kernel", t=0), dict(kind="storage_recovered", source="kernel", t=5))
    far = make_events(dict(kind="storage_error", source="kernel", t=0), dict(kind="storage_recovered", source="kernel", t=50))
    assert evaluate_rule(rule, near) is not None
    assert evaluate_rule(rule, far) is None


def test_window_without_times_uses_line_order(tmp_path: Path) -> None:
    rule = one(tmp_path, match=WINDOW.format(key="not_within", extra=""), sources="kernel", kinds="storage_error, storage_recovered", cause="storage_stall", folder="storage_stall")
    after = make_events(dict(kind="storage_error", source="kernel", time=None, line=3), dict(kind="storage_recovered", source="kernel", time=None, line=9))
    before = make_events(dict(kind="storage_error", source="kernel", time=None, line=9), dict(kind="storage_recovered", source="kernel", time=None, line=3))
    assert evaluate_rule(rule, after) is None
    assert evaluate_rule(rule, before) is not None


def test_min_ranks_and_fraction(tmp_path: Path) -> None:
    rule = one(tmp_path, match="  t:\n    kinds: [collective_timeout]\n  min_ranks: 2\n", sources="pytorch", kinds="collective_timeout")
    one_rank = make_events(dict(kind="collective_timeout", source="pytorch", rank=0))
    two = make_events(dict(kind="collective_timeout", source="pytorch", rank=0), dict(kind="collective_timeout", source="pytorch", rank=1))
    assert evaluate_rule(rule, one_rank) is None
    assert evaluate_rule(rule, two) is not None
    frac = one(tmp_path / "f", match="  t:\n    kinds: [collective_timeout]\n  min_fraction_of_ranks: 0.75\n", sources="pytorch", kinds="collective_timeout")
    assert evaluate_rule(frac, two, expected_ranks=4) is None
    assert evaluate_rule(frac, two, expected_ranks=2) is not None


def test_absent_ranks(tmp_path: Path) -> None:
    m = "  t:\n    kinds: [collective_timeout]\n  absent: t\n"
    rule = one(tmp_path, match=m, sources="pytorch, nccl", kinds="collective_timeout, comm_init", culprit="absent_ranks")
    ev = make_events(
        dict(kind="comm_init", source="nccl", host="node002", rank=2, attrs={"nranks": 4}),
        dict(kind="collective_timeout", source="pytorch", host="node001", rank=0),
        dict(kind="collective_timeout", source="pytorch", host="node001", rank=1),
        dict(kind="collective_timeout", source="pytorch", host="node002", rank=3),
    )
    f = evaluate_rule(rule, ev)
    assert f.ranks == (2,) and f.hosts == ("node002",)
    assert f.count == 3  # evidence: the ranks that did report
    everyone = make_events(*[dict(kind="collective_timeout", source="pytorch", rank=r) for r in range(4)])
    assert evaluate_rule(rule, everyone) is None


def test_named_ranks(tmp_path: Path) -> None:
    m = "  d:\n    kinds: [desync_report]\n  ranks_from: [lagging_ranks, joined_not_finished]\n"
    rule = one(tmp_path, match=m, sources="pytorch", kinds="desync_report", culprit="named_ranks")
    ev = make_events(dict(kind="desync_report", source="pytorch", rank=0, attrs={"lagging_ranks": [13, 14], "joined_not_finished": []}),
                     dict(kind="comm_init", source="pytorch", rank=13, host="node004"))
    f = evaluate_rule(rule, ev)
    assert f.ranks == (13, 14) and f.hosts == ("node004",)


def _versions(*pairs: tuple[str, str]) -> pl.DataFrame:
    return make_events(*[dict(kind="version", source="versions", host=h, attrs={"component": "driver", "version": v}) for h, v in pairs])


def test_version_drift_minority(tmp_path: Path) -> None:
    m = "  v:\n    kinds: [version]\n  differs_across_hosts: version\n  group_by: [component, source]\n"
    rule = one(tmp_path, match=m, sources="versions", kinds="version", culprit="minority", cause="driver_drift", folder="driver_drift")
    f = evaluate_rule(rule, _versions(("node001", "535.154.05"), ("node002", "535.154.05"), ("node003", "550.90.07")))
    assert f.hosts == ("node003",)
    assert any(e.host == "node001" for e in f.evidence)  # one majority row for contrast
    tie = evaluate_rule(rule, _versions(("node001", "535.154.05"), ("node002", "550.90.07")))
    assert tie.hosts == ("node001", "node002")
    assert evaluate_rule(rule, _versions(("node001", "535.154.05"), ("node002", "535.154.05 "))) is None
    # other components are compared separately
    mixed = make_events(dict(kind="version", source="versions", host="node001", attrs={"component": "nccl", "version": "2.21.5"}),
                        dict(kind="version", source="versions", host="node002", attrs={"component": "driver", "version": "550.90.07"}))
    assert evaluate_rule(rule, mixed) is None


# --- detectors ---------------------------------------------------------------------------------


def test_slow_rank_detector(tmp_path: Path) -> None:
    m = "  s:\n    kinds: [train_step]\n  detector: slow_rank\n"
    rule = one(tmp_path, match=m, sources="pytorch", kinds="train_step", cause="gpu_throttle", folder="gpu_throttle")
    rows = [dict(kind="train_step", source="pytorch", rank=r, t=i, attrs={"step": i, "step_ms": (3000.0 if r == 2 else 1000.0) + i}) for r in range(4) for i in range(4)]
    f = evaluate_rule(rule, make_events(*rows))
    assert f.ranks == (2,)
    even = [dict(kind="train_step", source="pytorch", rank=r, t=i, attrs={"step_ms": 1000.0 + r}) for r in range(4) for i in range(4)]
    assert evaluate_rule(rule, make_events(*even)) is None


def test_hot_gpu_detector(tmp_path: Path) -> None:
    m = "  s:\n    kinds: [gpu_telemetry]\n  detector: hot_gpu\n"
    rule = one(tmp_path, match=m, sources="nvidia_smi", kinds="gpu_telemetry", cause="gpu_throttle", folder="gpu_throttle")
    rows = [dict(kind="gpu_telemetry", source="nvidia_smi", gpu_index=i, attrs={"temperature": 92 if i == 3 else 60}) for i in range(4)]
    f = evaluate_rule(rule, make_events(*rows))
    assert f.gpus == (("node001", None, 3),)


# --- loader and validators -----------------------------------------------------------------------


def test_loader_reports_path_and_line(tmp_path: Path) -> None:
    p = write_rule(tmp_path, match="  sel:\n    kinds: [xid]\n    bogus: 1\n")
    rs = load_rules(tmp_path)
    assert not rs.rules
    (issue,) = rs.issues
    assert issue.path.endswith("gpu_hardware/r.yaml") and issue.line == 14
    assert "bogus" in str(issue) and "Fix:" in str(issue)
    with pytest.raises(RuleError) as e:
        load_rules(tmp_path, strict=True)
    assert e.value.line == 14
    assert p.exists()


def test_loader_bad_yaml_and_bad_condition(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("id: [unclosed\n")
    write_rule(tmp_path, match="  sel:\n    kinds: [xid]\n  condition: sel and nothere\n")
    rs = load_rules(tmp_path)
    msgs = sorted(str(i) for i in rs.issues)
    assert any("invalid YAML" in m for m in msgs)
    assert any("unknown selection 'nothere'" in m and ":14:" in m for m in msgs)


def _checks(tmp_path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in check(tmp_path):
        out.setdefault(i.check, []).append(str(i))
    return out


def test_validators(tmp_path: Path) -> None:
    write_rule(tmp_path, "a.yaml", id="dup-id")
    write_rule(tmp_path, "b.yaml", id="dup-id", title="Other")
    write_rule(tmp_path, "c.yaml", id="Bad_Id", title="C", cause="nonsense", kinds="nokind", sources="nosource")
    write_rule(tmp_path, "d.yaml", id="bad-re", title="D", match="  sel:\n    message|re: '(?<=x)y('\n")
    write_rule(tmp_path, "e.yaml", id="bad-culprit", title="E", culprit="minority")
    write_rule(tmp_path, "f.yaml", id="no-detector", title="F", match="  sel:\n    kinds: [xid]\n  detector: nope\n")
    found = _checks(tmp_path)
    assert "already used by" in found["duplicate-id"][0]
    assert any("kebab" in m for m in found["id-format"])
    assert "unknown-cause" in found and "unknown-kind" in found and "unknown-source" in found
    assert ":12:" in found["regex-compiles"][0] or ":13:" in found["regex-compiles"][0]
    assert "culprit" in found and "detector" in found


def test_stable_rule_needs_examples(tmp_path: Path) -> None:
    p = write_rule(tmp_path, status="stable")
    p.write_text(p.read_text().replace("  miss: [{source: nccl, lines: ['y']}]\n", ""))
    found = _checks(tmp_path)
    assert any("error" in m and "no `miss` example" in m for m in found["examples"])
    assert any("without a bundle test" in m for m in found["stable-bundle"])


def test_exemptions_are_data(tmp_path: Path) -> None:
    write_rule(tmp_path, id="x-rule", folder="elsewhere")
    assert "file-layout" in _checks(tmp_path)
    (tmp_path / "_exemptions.yaml").write_text("x-rule: [file-layout]\n")
    assert "file-layout" not in _checks(tmp_path)


def test_repository_rules_pass_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = json.loads((REPO_ROOT / "rules" / "schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    from crashscope.engine.load import discover

    for p in discover():
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(p.read_text()))]
        assert not errors, f"{p}: {errors}"


def test_rule_schema_knows_every_source() -> None:
    """Adding a source is one module and one registry line; the rule schema's source lists
    must follow, or a rule matching the new source fails validation."""
    from crashscope.schema import SOURCE_NAMES

    schema = json.loads((REPO_ROOT / "rules" / "schema.json").read_text())
    lists: list[list[str]] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "enum" and isinstance(v, list) and "nccl" in v and "kernel" in v:
                    lists.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(schema)
    assert lists
    for enum in lists:
        assert set(enum) == set(SOURCE_NAMES)


# --- CLI and docs ------------------------------------------------------------------------------


def _app() -> typer.Typer:
    from crashscope.cli import rules_cmd

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    rules_cmd.register(app)
    return app


def test_cli_rules_check(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(_app(), ["rules", "check", "--no-examples"])
    assert ok.exit_code == 0, ok.output
    write_rule(tmp_path, match="  sel:\n    kinds: [xid]\n    bogus: 1\n")
    bad = runner.invoke(_app(), ["rules", "check", "--rules", str(tmp_path)])
    assert bad.exit_code == 1
    assert "gpu_hardware/r.yaml:14: error" in bad.output


def test_cli_rules_list() -> None:
    res = CliRunner().invoke(_app(), ["rules", "list", "--cause", "oom"])
    assert res.exit_code == 0 and "cuda-out-of-memory" in res.output and "slurm-time-limit" not in res.output


def test_docs_rules_md_is_current() -> None:
    expected = render_rules_md(load_rules().rules)
    actual = (REPO_ROOT / "docs" / "rules.md").read_text()
    assert actual == expected, "docs/rules.md is stale: run `crashscope rules docs -o docs/rules.md`"
    for r in load_rules().rules:
        assert f"### `{r.id}`" in actual


@pytest.mark.parametrize("job", ["driver_drift_nccl_node002", "driver_drift_cuda_node002", "healthy_2x4", "xid79_node001"])
def test_drift_precheck_agrees_with_drift(job: str) -> None:
    """_may_drift (the distinct attrs and group columns of the matched rows) says exactly
    whether _drift (every matched row) finds a group of two values, for the version rows of
    real fixtures grouped as the rule groups them and more coarsely, one host's row changed."""
    import importlib

    from crashscope.ingest import ingest

    ev_mod = importlib.import_module("crashscope.engine.evaluate")
    root = Path(__file__).resolve().parents[1] / "fixtures" / "jobs" / job
    if not root.is_dir():
        pytest.skip(f"fixture {job} missing")
    ev = ingest(root).events
    rule = next(r for r in ev_mod.default_rules() if r.id == "version-drift-across-hosts")
    ctx = ev_mod._Context(ev, None)
    plan = ctx.plan(rule)
    frame = ev.filter(plan.pre).with_row_index("_i").with_columns(pl.col("time").cast(pl.Int64).alias("_t"), *plan.columns)
    matched = frame.filter(ev_mod._cond_expr(ev_mod.cond.parse(rule.condition, set(rule.selections))))
    assert matched.height
    bumped = matched.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit('{"component": "nccl", "version": "9.9"}'))
                                  .otherwise(pl.col("attrs")).alias("attrs"))
    seen = set()
    for frame_ in (matched, bumped):
        for group_by in (rule.group_by, ("component",), ("source",), ()):
            want = ev_mod._drift(ev_mod._dicts(frame_, rule), rule.differs_across_hosts, group_by) is not None
            assert ev_mod._may_drift(frame_, rule.differs_across_hosts, group_by) == want, (group_by, want)
            seen.add(want)
    assert True in seen


@pytest.mark.parametrize("col,values", [
    ("kind", [Kind.COMM_INIT, "exception", "no_such_kind"]),
    ("kind", []),
    ("source", ["nccl", "slurm", "catalog", "nope"]),
    ("severity", ["error", "critical"]),
])
def test_one_of_is_the_string_cast_is_in(col: str, values: list) -> None:
    """schema.one_of (an Enum compare) selects what the row-by-row string cast did: unknown
    values match nothing, nulls stay null, a column still of plain strings alike."""
    vocab = {"kind": KINDS, "source": SOURCE_NAMES, "severity": SEVERITIES}[col]
    cells = [*vocab, None, *vocab[:3]]
    enum_frame = pl.DataFrame({col: pl.Series(cells, dtype=EVENT_SCHEMA[col])})
    plain = [v.value if isinstance(v, Kind) else v for v in values]
    want = enum_frame.select(pl.col(col).cast(pl.String).is_in(plain)).to_series().to_list()
    assert any(want) or not [v for v in plain if v in vocab]
    assert enum_frame.select(one_of(col, values)).to_series().to_list() == want
    assert enum_frame.select(~one_of(col, values)).to_series().to_list() == [None if w is None else not w for w in want]
    strings = enum_frame.with_columns(pl.col(col).cast(pl.String))
    assert strings.select(one_of(col, values)).to_series().to_list() == want
