"""Every rule's inline examples and bundle tests, from the one loader (``engine.load``).

Test ids: ``<rule_id>::hit::<n>``, ``<rule_id>::miss::<n>``, ``<rule_id>::bundle::<n>``.
An example whose source is still a stub (nothing implemented yet) is skipped, not passed.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import polars as pl
import pytest

from crashscope.engine.evaluate import evaluate_rule, run_example
from crashscope.engine.load import REPO_ROOT, load_rules
from crashscope.engine.model import Rule
from crashscope.engine.validate import check
from crashscope.sources import get_source
from crashscope.sources.base import LineSource

RULESET = load_rules()


def _is_stub(source: str) -> bool:
    src = get_source(source)
    if isinstance(src, LineSource):
        return src.prefilter == r"[^\s\S]"
    body = inspect.getsource(type(src).parse_file).strip().splitlines()
    return body[-1].strip() == "return None" and len(body) <= 3


def _example_cases() -> list:
    out = []
    for rule in RULESET.rules:
        for tier in ("hit", "miss"):
            for i, ex in enumerate(getattr(rule.tests, tier)):
                out.append(pytest.param(rule, tier, ex, id=f"{rule.id}::{tier}::{i}"))
    return out


def _show(events: pl.DataFrame) -> str:
    return "\n".join(f"  {r['kind']} host={r['host']} rank={r['rank']} attrs={r['attrs']} msg={r['message'][:120]!r}" for r in events.iter_rows(named=True))


@pytest.mark.parametrize("rule,tier,example", _example_cases())
def test_rule_example(rule: Rule, tier: str, example) -> None:
    stubs = sorted({s for s, *_ in example.inputs if _is_stub(s)})
    assert not stubs, f"{rule.where()}: example needs a source that parses nothing: {', '.join(stubs)}"
    events, finding = run_example(rule, example)
    where = rule.where(f"tests.{tier}")
    if tier == "hit":
        assert events.height, f"{where}: the example lines produced no events (is the line format real?)"
        assert finding is not None, f"{where}: rule {rule.id} did not fire on its hit example; events:\n{_show(events)}"
    else:
        assert finding is None, f"{where}: rule {rule.id} fired on its miss example; evidence:\n" + "\n".join(e.message for e in finding.evidence)


def _bundle_cases() -> list:
    return [
        pytest.param(rule, b, id=f"{rule.id}::bundle::{i}")
        for rule in RULESET.rules
        for i, b in enumerate(rule.tests.bundles)
    ]


@pytest.mark.parametrize("rule,bundle", _bundle_cases())
def test_rule_bundle(rule: Rule, bundle) -> None:
    path = REPO_ROOT / bundle.path
    assert path.exists(), f"{rule.where('tests.bundles')}: {bundle.path} does not exist (fixture renamed? regenerate or fix the path)"
    from crashscope.ingest import ingest

    events = ingest(path).events
    finding = evaluate_rule(rule, events)
    expect = bundle.expect
    if not expect.get("fires", True):
        assert finding is None, f"{rule.where('tests.bundles')}: fired on {bundle.path}"
        return
    assert finding is not None, f"{rule.where('tests.bundles')}: did not fire on {bundle.path}"
    if "host" in expect:
        assert expect["host"] in finding.hosts
    if "rank" in expect:
        assert expect["rank"] in finding.ranks
    if "gpu_index" in expect:
        assert any(g[2] == expect["gpu_index"] for g in finding.gpus)


def test_rules_check_has_no_errors() -> None:
    errors = [str(i) for i in check() if i.severity == "error"]
    assert not errors, "\n".join(errors)


def test_rules_exist_for_every_family() -> None:
    causes = {r.cause for r in RULESET.rules}
    for c in ("fabric_timeout", "storage_stall", "driver_drift", "preemption", "gpu_throttle", "gpu_hardware", "node_failure", "oom", "software_error", "time_limit"):
        assert c in causes, f"no rule for {c}"


def test_stable_rules_have_examples() -> None:
    for r in RULESET.rules:
        if r.status == "stable":
            assert r.tests.hit and r.tests.miss, r.where("tests")


def test_rules_folder_is_the_default() -> None:
    assert Path(RULESET.root) == REPO_ROOT / "rules"
