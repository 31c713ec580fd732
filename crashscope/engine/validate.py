"""pySigma-style rule validators: one small class per check.

Each validator has a ``ClassVar`` ``name``, ``description`` and ``severity``; ``validate(rule)``
returns issues for one rule and ``finalize()`` those that need every rule (duplicate ids).
Validators are collected automatically from this module (every ``Validator`` subclass).
Exemptions are data: ``rules/_exemptions.yaml`` maps a rule id to the check names it is
exempt from (Sigma's ``exclusions``). Every issue gives ``path:line`` and a fix.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import polars as pl
import regex
import yaml

from crashscope.engine.evaluate import DETECTORS, rule_kinds
from crashscope.engine.load import FIELD_ORDER, REPO_ROOT, RuleSet, load_rules
from crashscope.engine.model import Issue, Rule
from crashscope.schema import CAUSES, KINDS, SEVERITIES, SOURCE_NAMES

_KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class Validator:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    severity: ClassVar[str] = "error"

    def issue(self, rule: Rule, key: str, message: str, fix: str = "") -> Issue:
        return Issue(rule.path, rule.line_of(key), rule.id, self.name, self.severity, message, fix)

    def validate(self, rule: Rule) -> list[Issue]:
        return []

    def finalize(self) -> list[Issue]:
        return []


class DuplicateId(Validator):
    name = "duplicate-id"
    description = "Rule ids are unique and never reused."

    def __init__(self) -> None:
        self.seen: dict[str, Rule] = {}
        self.found: list[Issue] = []

    def validate(self, rule: Rule) -> list[Issue]:
        if rule.id in self.seen:
            first = self.seen[rule.id]
            return [self.issue(rule, "id", f"id {rule.id!r} is already used by {first.where('id')}", "pick a new id; never reuse a retired one")]
        self.seen[rule.id] = rule
        return []


class DuplicateTitle(Validator):
    name = "duplicate-title"
    description = "Titles are unique so reports are unambiguous."
    severity = "warning"

    def __init__(self) -> None:
        self.seen: dict[str, Rule] = {}

    def validate(self, rule: Rule) -> list[Issue]:
        key = rule.title.strip().lower()
        if key in self.seen:
            return [self.issue(rule, "title", f"title also used by {self.seen[key].id}", "make the title name the symptom precisely")]
        self.seen[key] = rule
        return []


class IdFormat(Validator):
    name = "id-format"
    description = "Ids are kebab-case."

    def validate(self, rule: Rule) -> list[Issue]:
        if not _KEBAB.match(rule.id):
            return [self.issue(rule, "id", f"id {rule.id!r} is not kebab-case", "use lower-case words joined by '-', e.g. nccl-ib-completion-error")]
        return []


class UnknownCause(Validator):
    name = "unknown-cause"
    description = "cause is a taxonomy label."

    def validate(self, rule: Rule) -> list[Issue]:
        if rule.cause not in CAUSES:
            return [self.issue(rule, "cause", f"cause {rule.cause!r} is not a taxonomy label", f"use one of {', '.join(CAUSES)}")]
        return []


class UnknownSeverity(Validator):
    name = "unknown-severity"
    description = "severity is one of the schema severities."

    def validate(self, rule: Rule) -> list[Issue]:
        bad = []
        if rule.severity not in SEVERITIES:
            bad.append(self.issue(rule, "severity", f"severity {rule.severity!r} unknown", f"use one of {', '.join(SEVERITIES)}"))
        for n, s in rule.selections.items():
            for v in s.severity:
                if v not in SEVERITIES:
                    bad.append(self.issue(rule, f"match.{n}.severity", f"severity {v!r} unknown", f"use one of {', '.join(SEVERITIES)}"))
        return bad


class UnknownKind(Validator):
    name = "unknown-kind"
    description = "Every kind named by the rule is in schema.Kind."

    def validate(self, rule: Rule) -> list[Issue]:
        out = [self.issue(rule, "kinds", f"unknown kind {k!r}", f"use one of {', '.join(KINDS)}") for k in rule.kinds if k not in KINDS]
        for n, s in rule.selections.items():
            out += [self.issue(rule, f"match.{n}.kinds", f"unknown kind {k!r}", f"use one of {', '.join(KINDS)}") for k in s.kinds if k not in KINDS]
        if not rule.kinds:
            out.append(self.issue(rule, "kinds", "kinds is empty", "list the event kinds the rule reads; the engine filters on them first"))
        return out


class SelectionKindsListed(Validator):
    name = "selection-kinds-listed"
    description = "Kinds used in selections are listed in the rule's top-level kinds."
    severity = "warning"

    def validate(self, rule: Rule) -> list[Issue]:
        extra = sorted(rule_kinds(rule) - set(rule.kinds))
        if extra:
            return [self.issue(rule, "kinds", f"selections use kinds not in `kinds`: {', '.join(extra)}", "add them to `kinds`")]
        return []


class UnknownSource(Validator):
    name = "unknown-source"
    description = "Every source named (rule, selections, examples) is a registered source."

    def validate(self, rule: Rule) -> list[Issue]:
        fix = f"use one of {', '.join(SOURCE_NAMES)}"
        out = [self.issue(rule, "sources", f"unknown source {s!r}", fix) for s in rule.sources if s not in SOURCE_NAMES]
        for n, sel in rule.selections.items():
            out += [self.issue(rule, f"match.{n}.sources", f"unknown source {s!r}", fix) for s in sel.sources if s not in SOURCE_NAMES]
        for tier, exs in (("hit", rule.tests.hit), ("miss", rule.tests.miss)):
            for i, ex in enumerate(exs):
                for src, *_ in ex.inputs:
                    if src not in SOURCE_NAMES:
                        out.append(self.issue(rule, f"tests.{tier}.{i}", f"example source {src!r} unknown", fix))
                    elif rule.sources and src not in rule.sources and tier == "hit":
                        out.append(Issue(rule.path, rule.line_of(f"tests.{tier}.{i}"), rule.id, self.name, "warning",
                                         f"hit example uses source {src!r} that the rule does not read", f"add {src} to `sources` or drop the example"))
        return out


class RegexCompiles(Validator):
    name = "regex-compiles"
    description = "Every `|re` pattern compiles in Python `regex` and in polars (Rust regex, which the engine runs)."

    def validate(self, rule: Rule) -> list[Issue]:
        out = []
        for n, s in rule.selections.items():
            pats = [(f"match.{n}.message|re", p) for p in s.message_re]
            pats += [(f"match.{n}.attrs.{t.key}", str(t.value)) for t in s.attrs if t.op == "re"]
            for key, p in pats:
                try:
                    regex.compile(p)
                    pl.Series([""]).str.contains(p)
                except Exception as e:  # both libraries raise their own types
                    msg = str(e).splitlines()[0][:160]
                    out.append(self.issue(rule, key, f"regex {p!r} does not compile: {msg}", "no lookaround or backreferences (Rust regex); escape ( ) [ ] . |"))
        return out


class Examples(Validator):
    name = "examples"
    description = "Rules carry hit and miss examples; stable rules must."

    def validate(self, rule: Rule) -> list[Issue]:
        out = []
        for tier in ("hit", "miss"):
            if not getattr(rule.tests, tier):
                sev = "error" if rule.status == "stable" else "warning"
                out.append(Issue(rule.path, rule.line_of("tests"), rule.id, self.name, sev, f"no `{tier}` example",
                                 f"add `tests.{tier}: [{{source: ..., lines: [...]}}]` with real-format lines" + (" or set status: experimental" if sev == "error" else "")))
        return out


class StableBundle(Validator):
    name = "stable-bundle"
    description = "Stable rules have a bundle regression test whose folder exists."
    severity = "warning"

    def validate(self, rule: Rule) -> list[Issue]:
        out = []
        if rule.status == "stable" and not rule.tests.bundles:
            out.append(self.issue(rule, "tests", "stable rule without a bundle test", "add `tests.bundles: [{path: fixtures/jobs/<scenario>, expect: {fires: true}}]`"))
        for i, b in enumerate(rule.tests.bundles):
            if not (REPO_ROOT / b.path).exists():
                out.append(self.issue(rule, f"tests.bundles.{i}", f"bundle {b.path} does not exist", "generate it (fixtures/generate.py) or fix the path"))
        return out


class Detector(Validator):
    name = "detector"
    description = "Named detectors exist."

    def validate(self, rule: Rule) -> list[Issue]:
        if rule.detector and rule.detector not in DETECTORS:
            return [self.issue(rule, "match.detector", f"unknown detector {rule.detector!r}", f"use one of {', '.join(DETECTORS)}")]
        return []


class Culprit(Validator):
    name = "culprit"
    description = "culprit modes have the match keys they need."

    def validate(self, rule: Rule) -> list[Issue]:
        if rule.culprit == "minority" and not rule.differs_across_hosts:
            return [self.issue(rule, "culprit", "culprit: minority needs match.differs_across_hosts", "add `differs_across_hosts: version` or use culprit: event")]
        if rule.culprit == "named_ranks" and not rule.ranks_from:
            return [self.issue(rule, "culprit", "culprit: named_ranks needs match.ranks_from", "add `ranks_from: [lagging_ranks]`")]
        if rule.culprit == "absent_ranks" and not rule.absent:
            return [self.issue(rule, "culprit", "culprit: absent_ranks needs match.absent", "add `absent: <selection>` or use culprit: event")]
        return []


class Actions(Validator):
    name = "actions"
    description = "Cause rules recommend at least one action and explain themselves."

    def validate(self, rule: Rule) -> list[Issue]:
        out = []
        if rule.role == "cause" and not rule.actions:
            out.append(self.issue(rule, "actions", "a cause rule without actions", "say what the operator should do (drain, RMA, resubmit...)"))
        if not rule.explanation:
            out.append(self.issue(rule, "explanation", "empty explanation", "say why this evidence points at the cause"))
        return out


class FileLayout(Validator):
    name = "file-layout"
    description = "rules/<cause>/<source>_<symptom>.yaml"
    severity = "warning"

    def validate(self, rule: Rule) -> list[Issue]:
        p = Path(rule.path)
        out = []
        if p.parent.name != rule.cause:
            out.append(self.issue(rule, "cause", f"file is in {p.parent.name}/ but cause is {rule.cause}", f"move it to rules/{rule.cause}/"))
        if rule.sources and not any(p.stem.startswith(f"{s}_") for s in rule.sources):
            out.append(self.issue(rule, "sources", f"file name {p.name!r} does not start with one of the rule's sources", f"name it {rule.sources[0]}_<symptom>.yaml"))
        return out


class FieldOrder(Validator):
    name = "field-order"
    description = "Fields appear in the fixed Sigma-like order."
    severity = "warning"

    def validate(self, rule: Rule) -> list[Issue]:
        present = [k for k in sorted((k for k in rule.lines if "." not in k), key=lambda k: rule.lines[k])]
        expected = [k for k in FIELD_ORDER if k in present]
        if present != expected:
            return [self.issue(rule, "id", f"fields out of order: {', '.join(present)}", f"order them: {', '.join(expected)}")]
        return []


def all_validators() -> list[type[Validator]]:
    return [c for c in Validator.__subclasses__() if c.name]


def load_exemptions(root: Path) -> dict[str, set[str]]:
    p = (root if root.is_dir() else root.parent) / "_exemptions.yaml"
    if not p.exists():
        return {}
    data = yaml.safe_load(p.read_text()) or {}
    return {str(k): set(v or ()) for k, v in data.items()}


def check(root: str | Path | None = None, ruleset: RuleSet | None = None) -> list[Issue]:
    """Load every rule and run every validator. Returns all issues (errors and warnings)."""
    rs = ruleset or load_rules(root)
    exempt = load_exemptions(rs.root)
    validators = [cls() for cls in all_validators()]
    issues = list(rs.issues)
    for rule in rs.rules:
        for v in validators:
            issues += [i for i in v.validate(rule) if i.check not in exempt.get(rule.id, ())]
    for v in validators:
        issues += v.finalize()
    issues.sort(key=lambda i: (i.path, i.line, i.check))
    return issues


def check_examples(rs: RuleSet) -> list[Issue]:
    """Run every rule's hit/miss examples (semgrep --test); an issue per failing example.
    Examples whose source emits no events are reported as warnings (source not ready)."""
    from crashscope.engine.evaluate import run_example

    out = []
    for rule in rs.rules:
        for tier in ("hit", "miss"):
            for i, ex in enumerate(getattr(rule.tests, tier)):
                key = f"tests.{tier}.{i}"
                try:
                    events, finding = run_example(rule, ex)
                except Exception as e:  # a broken source must not hide the other results
                    out.append(Issue(rule.path, rule.line_of(key), rule.id, "example", "error", f"{tier} example {i} raised {type(e).__name__}: {e}"))
                    continue
                if tier == "hit" and events.height == 0:
                    out.append(Issue(rule.path, rule.line_of(key), rule.id, "example", "warning", f"hit example {i} produced no events", "check the line format against the source"))
                elif tier == "hit" and finding is None:
                    out.append(Issue(rule.path, rule.line_of(key), rule.id, "example", "error", f"hit example {i} does not fire", "fix the match block or the example"))
                elif tier == "miss" and finding is not None:
                    out.append(Issue(rule.path, rule.line_of(key), rule.id, "example", "error", f"miss example {i} fires", "tighten the match block"))
    return out
