"""The ONE way to find and read rule files, shared by the engine, the validators, the tests
and the docs generator.

``load_rules()`` reads every ``rules/**/*.yaml`` (except ``*.schema.*`` and files starting
with ``_``), keeps the line of every key for ``path:line`` messages, checks the structure
strictly (unknown keys, types, enums) and returns the rules that parsed together with the
issues found. ``strict=True`` raises :class:`RuleError` on the first error instead.

Where rules come from (:func:`rule_dirs`): the shipped rules first -- ``rules/`` of the
repository in a checkout, else the package data ``crashscope._rules`` of the installed wheel
(the same ``rules/`` folder, mapped by ``setup.py``), read with :mod:`importlib.resources` --
then a site's own folders, on top: ``$CRASHSCOPE_RULES`` (``os.pathsep``-separated) and
``--rules DIR`` (:func:`set_extra_rule_dirs`). A site rule with a shipped rule's ``id``
replaces it. :func:`rule_set_warnings` says, in words for the report and stderr, when the
rule set is missing, empty or partly broken.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crashscope.engine import condition as cond
from crashscope.engine.model import (
    ATTR_OPS,
    CULPRITS,
    DIRECTIONS,
    ROLES,
    SAME_KEYS,
    STATUSES,
    AttrTest,
    BundleTest,
    Example,
    Issue,
    Rule,
    RuleTests,
    Selection,
    Window,
)

if TYPE_CHECKING:
    import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PACKAGE = "crashscope._rules"


def _shipped_rules_dir() -> Path:
    """``rules/`` of the checkout this package runs from, else the installed package data."""
    checkout = REPO_ROOT / "rules"
    if checkout.is_dir() and (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "crashscope").is_dir():
        return checkout
    try:
        from importlib.resources import files

        root = files(SHIPPED_PACKAGE)
        paths = getattr(root, "_paths", None)  # a namespace package: MultiplexedPath
        path = Path(str(paths[0] if paths else root))
        if path.is_dir():
            return path
    except (ImportError, TypeError, ValueError, OSError, IndexError):
        pass
    return checkout  # missing: load_rules reports it


DEFAULT_RULES_DIR = _shipped_rules_dir()
_EXTRA_DIRS: list[Path] = []

# Fixed order (Sigma): a validator warns when a file departs from it.
FIELD_ORDER: tuple[str, ...] = (
    "id", "title", "status", "description", "cause", "role", "weight", "severity", "sources",
    "kinds", "match", "culprit", "explanation", "actions", "references", "falsepositives", "tests",
)
REQUIRED: tuple[str, ...] = (
    "id", "title", "status", "description", "cause", "role", "weight", "severity", "sources",
    "kinds", "match", "explanation", "actions", "tests",
)
MATCH_KEYS: tuple[str, ...] = (
    "condition", "within", "not_within", "min_ranks", "min_fraction_of_ranks",
    "differs_across_hosts", "group_by", "absent", "detector", "detector_args", "ranks_from",
)
SELECTION_KEYS: tuple[str, ...] = ("kinds", "sources", "severity", "message|re", "message|contains")
WINDOW_KEYS: tuple[str, ...] = ("selection", "seconds", "direction", "same")


class RuleError(ValueError):
    """A rule file is malformed; carries ``path`` and ``line``."""

    def __init__(self, issue: Issue):
        super().__init__(str(issue))
        self.issue = issue
        self.path = issue.path
        self.line = issue.line


@dataclass
class RuleSet:
    rules: list[Rule] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    root: Path = DEFAULT_RULES_DIR
    roots: list[Path] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)  # shipped rules a site rule replaced

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}


def default_rule_set() -> RuleSet:
    """The rule set ``load_rules()`` reads now, loaded once per set of folders (the health
    check and the evaluation share it)."""
    return _rule_set_of(tuple(rule_dirs()))


@lru_cache(maxsize=8)
def _rule_set_of(dirs: tuple[Path, ...]) -> RuleSet:
    return load_rules()


def rule_set_warnings(rs: RuleSet | None = None) -> list[str]:
    """What is wrong with the rule set, as report warnings (empty when all is well): no
    rules at all (every verdict would be ``unknown``), a folder that is missing, files that
    failed to load. Default: the set ``load_rules()`` reads now."""
    rs = rs if rs is not None else default_rule_set()
    out = []
    for i in rs.issues:
        if i.check == "load" and i.message == "rules folder not found":
            out.append(f"rules folder {i.path} not found")
    if not rs.rules:
        where = ", ".join(str(r) for r in (rs.roots or [rs.root]))
        out.append(f"no detection rules loaded (looked in {where}): every verdict will be unknown; reinstall crashscope or pass --rules DIR")
    broken = sorted({i.path for i in rs.issues if i.severity == "error" and i.check != "load"})
    if broken:
        out.append(f"{len(broken)} rule file(s) failed to load and were skipped: {', '.join(broken[:5])}{' ...' if len(broken) > 5 else ''} (crashscope rules check)")
    return out


def rules_dir(root: str | Path | None = None) -> Path:
    """``root`` if given, else the shipped rules folder."""
    return Path(root) if root is not None else DEFAULT_RULES_DIR


def set_extra_rule_dirs(dirs: list[str | Path] | None) -> None:
    """A site's own rule folders (``--rules DIR``), loaded on top of the shipped rules by
    ``load_rules()`` without a root; clears the engine's cached default rule set."""
    _EXTRA_DIRS[:] = [Path(d) for d in dirs or []]
    try:
        from crashscope.engine.evaluate import default_rules

        default_rules.cache_clear()
    except ImportError:  # pragma: no cover
        pass


def rule_dirs() -> list[Path]:
    """Every folder ``load_rules()`` reads, in order: shipped, ``$CRASHSCOPE_RULES``, ``--rules``."""
    env = [Path(p) for p in os.environ.get("CRASHSCOPE_RULES", "").split(os.pathsep) if p.strip()]
    out: list[Path] = []
    for d in [DEFAULT_RULES_DIR, *env, *_EXTRA_DIRS]:
        if d not in out:
            out.append(d)
    return out


def discover(root: str | Path | None = None) -> list[Path]:
    base = rules_dir(root)
    if base.is_file():
        return [base]
    return sorted(
        p
        for p in base.rglob("*.y*ml")
        if p.suffix in (".yaml", ".yml") and not p.name.startswith("_") and ".schema." not in p.name
    )


def load_rules(root: str | Path | None = None, *, strict: bool = False) -> RuleSet:
    """Discover and parse every rule file under ``root``.

    Args:
        root: a rules folder or one rule file; default :func:`rules_dir`.
        strict: raise :class:`RuleError` on the first error-severity issue.

    Returns:
        The parsed rules (files with structural errors are left out) and the issues found.
    """
    bases = [Path(root)] if root is not None else rule_dirs()
    rs = RuleSet(root=bases[0], roots=bases)
    by_id: dict[str, int] = {}
    for base in bases:
        if not base.exists():
            rs.issues.append(Issue(str(base), 1, None, "load", "error", "rules folder not found", "pass --rules DIR"))
        for path, (rule, issues) in _load_dir(base):
            rs.files.append(path)
            rs.issues.extend(issues)
            if rule is None:
                continue
            if rule.id in by_id and base != bases[0] and root is None:
                # A site rule replaces the shipped (or an earlier site) rule with its id.
                rs.overridden.append(rs.rules[by_id[rule.id]].path)
                rs.rules[by_id[rule.id]] = rule
                continue
            by_id.setdefault(rule.id, len(rs.rules))
            rs.rules.append(rule)
    if strict:
        for issue in rs.issues:
            if issue.severity == "error":
                raise RuleError(issue)
    return rs


# What a cached shipped rule set may contain (crashscope.datacache unpickles nothing else).
_CACHE_CLASSES = frozenset(
    {("crashscope.engine.model", n) for n in ("AttrTest", "BundleTest", "Example", "Issue", "Rule", "RuleTests", "Selection", "Window")}
    | {("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "Path")}
)


def _load_dir(base: Path) -> list[tuple[Path, tuple[Rule | None, list[Issue]]]]:
    """Every rule file of ``base`` with what :func:`load_file` makes of it. The shipped folder's
    results come from the user's cache (:mod:`crashscope.datacache`) when its key -- every
    file's path and bytes, and the source of the loader and the rule model -- is unchanged:
    parsing its ~90 YAML files cost every process ~0.08 s. A site's folders are read as is."""
    paths = discover(base)
    if base != DEFAULT_RULES_DIR or not paths:
        return [(p, load_file(p, base)) for p in paths]
    from crashscope import datacache

    parts: list[bytes | str] = [*datacache.source_of(__name__, "crashscope.engine.model", "crashscope.engine.condition"), str(base)]
    try:
        for p in paths:
            parts += [str(p), p.read_bytes()]
    except OSError:  # load_file reports it
        return [(p, load_file(p, base)) for p in paths]
    key = datacache.fingerprint(parts)
    name = datacache.entry_name("rules", str(base))
    cached = datacache.get(name, key, _CACHE_CLASSES)
    if isinstance(cached, list) and len(cached) == len(paths):
        return list(zip(paths, cached))
    results = [load_file(p, base) for p in paths]
    datacache.put(name, key, results)
    return list(zip(paths, results))


def _display(path: Path, base: Path) -> str:
    for anchor in (REPO_ROOT, base.parent if base.is_dir() else base.parent.parent):
        try:
            return str(path.resolve().relative_to(anchor.resolve()))
        except ValueError:
            continue
    return str(path)


# --- YAML with line numbers ---------------------------------------------------------------


def _to_py(node: yaml.Node, key: str, lines: dict[str, int]) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k_node, v_node in node.value:
            k = str(k_node.value)
            sub = f"{key}.{k}" if key else k
            lines[sub] = k_node.start_mark.line + 1
            out[k] = _to_py(v_node, sub, lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, v_node in enumerate(node.value):
            sub = f"{key}.{i}"
            lines[sub] = v_node.start_mark.line + 1
            items.append(_to_py(v_node, sub, lines))
        return items
    # scalar with its resolved type; a bare constructor (a SafeLoader("") per scalar, 4,600
    # of them in the shipped rules, was half the cost of loading the rules)
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _yaml_loader() -> Any:
    """libyaml's loader where PyYAML was built with it: the rules load on every analysis (and
    in every ingest worker), and the pure-Python parser spent seconds there. yaml is imported
    here, not at module level: a cached rule set never needs it."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Builder:
    def __init__(self, path: str, lines: dict[str, int]):
        self.path = path
        self.lines = lines
        self.issues: list[Issue] = []
        self.rule_id: str | None = None

    def err(self, key: str, msg: str, fix: str = "", check: str = "structure") -> None:
        line = 1
        k = key
        while k:
            if k in self.lines:
                line = self.lines[k]
                break
            k = k.rpartition(".")[0]
        self.issues.append(Issue(self.path, line, self.rule_id, check, "error", msg, fix))

    def strs(self, v: Any, key: str) -> tuple[str, ...]:
        if v is None:
            return ()
        if isinstance(v, str):
            return (v,)
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            return tuple(str(x) for x in v)
        self.err(key, "expected a string or a list of strings", "write `key: [a, b]`")
        return ()


def load_file(path: Path, base: Path | None = None) -> tuple[Rule | None, list[Issue]]:
    import yaml

    shown = _display(path, base or path.parent)
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=_yaml_loader())
    except (OSError, UnicodeDecodeError) as e:
        return None, [Issue(shown, 1, None, "load", "error", f"cannot read: {e}")]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        return None, [Issue(shown, line, None, "yaml", "error", f"invalid YAML: {getattr(e, 'problem', e)}", "fix the YAML syntax")]
    lines: dict[str, int] = {}
    if node is None or not isinstance(node, yaml.MappingNode):
        return None, [Issue(shown, 1, None, "structure", "error", "a rule file must be one YAML mapping")]
    doc = _to_py(node, "", lines)
    return build_rule(doc, shown, lines)


def build_rule(doc: dict[str, Any], path: str, lines: dict[str, int]) -> tuple[Rule | None, list[Issue]]:
    b = _Builder(path, lines)
    rid = doc.get("id")
    b.rule_id = rid if isinstance(rid, str) else None
    for k in doc:
        if k not in FIELD_ORDER:
            b.err(k, f"unknown field {k!r}", f"use one of: {', '.join(FIELD_ORDER)}")
    for k in REQUIRED:
        if k not in doc:
            b.err("id", f"missing required field {k!r}", f"add `{k}:` (see rules/schema.json)")
    for k in ("id", "title", "description", "cause", "role", "severity", "status", "explanation"):
        if k in doc and not isinstance(doc[k], str):
            b.err(k, f"{k!r} must be a string")
    if doc.get("status") not in (None, *STATUSES):
        b.err("status", f"status {doc.get('status')!r} is not one of {', '.join(STATUSES)}", "use experimental until it has hit and miss examples")
    if doc.get("role") not in (None, *ROLES):
        b.err("role", f"role {doc.get('role')!r} is not one of {', '.join(ROLES)}")
    weight = doc.get("weight", 0.5)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 <= weight <= 1:
        b.err("weight", f"weight {weight!r} must be a number in 0..1")
        weight = 0.5
    culprit = doc.get("culprit", "event")
    if culprit not in CULPRITS:
        b.err("culprit", f"culprit {culprit!r} is not one of {', '.join(CULPRITS)}")
        culprit = "event"
    sources = b.strs(doc.get("sources"), "sources")
    kinds = b.strs(doc.get("kinds"), "kinds")

    match = doc.get("match")
    selections: dict[str, Selection] = {}
    extras: dict[str, Any] = {}
    condition = ""
    if not isinstance(match, dict):
        if "match" in doc:
            b.err("match", "match must be a mapping of named selections and `condition`")
        match = {}
    for name, body in match.items():
        key = f"match.{name}"
        if name in MATCH_KEYS:
            extras[name] = body
            continue
        if not isinstance(body, dict):
            b.err(key, f"selection {name!r} must be a mapping", f"or use one of the match keys: {', '.join(MATCH_KEYS)}")
            continue
        selections[name] = _selection(b, name, body, key)
    if selections:
        condition = extras.get("condition") or (next(iter(selections)) if len(selections) == 1 else "")
        if not condition:
            b.err("match", "several selections but no `condition`", "add `condition: sel_a and not sel_b`")
        elif not isinstance(condition, str):
            b.err("match.condition", "condition must be a string")
            condition = ""
        else:
            try:
                cond.parse(condition, set(selections))
            except cond.ConditionError as e:
                b.err("match.condition", f"bad condition: {e}", "combine selection names with and/or/not and parentheses")
    elif "match" in doc:
        b.err("match", "match has no selection", "add e.g. `sel: {kinds: [xid], attrs.xid: [79]}`")

    windows: dict[str, tuple[Window, ...]] = {}
    for wkey in ("within", "not_within"):
        raw = extras.get(wkey)
        if raw is None:
            windows[wkey] = ()
            continue
        items = raw if isinstance(raw, list) else [raw]
        out = []
        for _i, w in enumerate(items):
            k = f"match.{wkey}"
            if not isinstance(w, dict) or "selection" not in w:
                b.err(k, f"{wkey} needs a mapping with `selection`", f"`{wkey}: {{selection: other, seconds: 300, direction: after, same: host}}`")
                continue
            for wk in w:
                if wk not in WINDOW_KEYS:
                    b.err(k, f"unknown {wkey} key {wk!r}", f"use {', '.join(WINDOW_KEYS)}")
            if w["selection"] not in selections:
                b.err(k, f"{wkey} refers to unknown selection {w['selection']!r}")
            if w.get("direction", "any") not in DIRECTIONS:
                b.err(k, f"direction must be one of {', '.join(DIRECTIONS)}")
            if w.get("same") not in (None, *SAME_KEYS):
                b.err(k, f"same must be one of {', '.join(SAME_KEYS)}")
            secs = w.get("seconds")
            if secs is not None and (not isinstance(secs, (int, float)) or secs < 0):
                b.err(k, "seconds must be a non-negative number")
                secs = None
            out.append(Window(str(w["selection"]), secs, w.get("direction", "any"), w.get("same")))
        windows[wkey] = tuple(out)
    absent = extras.get("absent")
    if absent is not None and absent not in selections:
        b.err("match.absent", f"absent refers to unknown selection {absent!r}")
    min_ranks = extras.get("min_ranks")
    if min_ranks is not None and (not isinstance(min_ranks, int) or min_ranks < 1):
        b.err("match.min_ranks", "min_ranks must be a positive integer")
        min_ranks = None
    frac = extras.get("min_fraction_of_ranks")
    if frac is not None and (not isinstance(frac, (int, float)) or not 0 < frac <= 1):
        b.err("match.min_fraction_of_ranks", "min_fraction_of_ranks must be in (0, 1]")
        frac = None
    dargs = extras.get("detector_args") or {}
    if not isinstance(dargs, dict):
        b.err("match.detector_args", "detector_args must be a mapping")
        dargs = {}

    tests = _tests(b, doc.get("tests"))
    if any(i.severity == "error" for i in b.issues):
        return None, b.issues
    rule = Rule(
        id=doc["id"],
        title=doc["title"],
        status=doc["status"],
        description=str(doc["description"]).strip(),
        cause=doc["cause"],
        role=doc["role"],
        weight=float(weight),
        severity=doc["severity"],
        sources=sources,
        kinds=kinds,
        selections=selections,
        condition=condition,
        within=windows["within"],
        not_within=windows["not_within"],
        min_ranks=min_ranks,
        min_fraction_of_ranks=float(frac) if frac is not None else None,
        differs_across_hosts=extras.get("differs_across_hosts"),
        group_by=b.strs(extras.get("group_by"), "match.group_by"),
        ranks_from=b.strs(extras.get("ranks_from"), "match.ranks_from"),
        absent=absent,
        detector=extras.get("detector"),
        detector_args=dargs,
        culprit=culprit,
        explanation=str(doc.get("explanation", "")).strip(),
        actions=b.strs(doc.get("actions"), "actions"),
        references=b.strs(doc.get("references"), "references"),
        falsepositives=b.strs(doc.get("falsepositives"), "falsepositives"),
        tests=tests,
        path=path,
        lines=dict(lines),
    )
    return rule, b.issues


def _selection(b: _Builder, name: str, body: dict[str, Any], key: str) -> Selection:
    attrs: list[AttrTest] = []
    for k, v in body.items():
        sub = f"{key}.{k}"
        if k.startswith("attrs."):
            akey = k[len("attrs."):]
            if not akey:
                b.err(sub, "empty attrs key")
                continue
            if isinstance(v, dict):
                for op, val in v.items():
                    if op not in ATTR_OPS:
                        b.err(sub, f"unknown attrs operator {op!r}", f"use one of {', '.join(ATTR_OPS)}")
                        continue
                    if op == "in" and not isinstance(val, list):
                        val = [val]
                    attrs.append(AttrTest(akey, op, val))
            elif isinstance(v, list):
                attrs.append(AttrTest(akey, "in", v))
            else:
                attrs.append(AttrTest(akey, "equals", v))
        elif k not in SELECTION_KEYS:
            b.err(sub, f"unknown selection field {k!r}", f"use {', '.join(SELECTION_KEYS)} or attrs.<key>")
    return Selection(
        name=name,
        kinds=b.strs(body.get("kinds"), f"{key}.kinds"),
        sources=b.strs(body.get("sources"), f"{key}.sources"),
        severity=b.strs(body.get("severity"), f"{key}.severity"),
        attrs=tuple(attrs),
        message_re=b.strs(body.get("message|re"), f"{key}.message|re"),
        message_contains=b.strs(body.get("message|contains"), f"{key}.message|contains"),
    )


def _example(b: _Builder, item: Any, key: str) -> Example | None:
    if not isinstance(item, dict):
        b.err(key, "an example must be a mapping `{source: nccl, lines: [...]}`")
        return None
    raw_inputs = item.get("inputs") if "inputs" in item else [item]
    if not isinstance(raw_inputs, list) or not raw_inputs:
        b.err(key, "`inputs` must be a non-empty list of {source, lines, host}")
        return None
    inputs = []
    for _i, inp in enumerate(raw_inputs):
        if not isinstance(inp, dict) or not isinstance(inp.get("source"), str) or not isinstance(inp.get("lines"), list):
            b.err(key, "each example input needs `source:` and a list of `lines:`")
            return None
        for k in inp:
            if k not in ("source", "lines", "host", "rank", "inputs", "expected_ranks"):
                b.err(key, f"unknown example key {k!r}", "use source, lines, host, rank, inputs, expected_ranks")
        rank = inp.get("rank")
        inputs.append((inp["source"], tuple(str(x) for x in inp["lines"]), inp.get("host"), rank if isinstance(rank, int) else None))
    er = item.get("expected_ranks")
    return Example(tuple(inputs), er if isinstance(er, int) else None)


def _tests(b: _Builder, raw: Any) -> RuleTests:
    if raw is None:
        return RuleTests()
    if not isinstance(raw, dict):
        b.err("tests", "tests must be a mapping with hit/miss/bundles")
        return RuleTests()
    for k in raw:
        if k not in ("hit", "miss", "bundles"):
            b.err(f"tests.{k}", f"unknown tests key {k!r}", "use hit, miss, bundles")
    out: dict[str, list[Any]] = {"hit": [], "miss": [], "bundles": []}
    for tier in ("hit", "miss"):
        items = raw.get(tier) or []
        if not isinstance(items, list):
            b.err(f"tests.{tier}", f"tests.{tier} must be a list")
            continue
        for i, item in enumerate(items):
            ex = _example(b, item, f"tests.{tier}.{i}")
            if ex:
                out[tier].append(ex)
    for i, item in enumerate(raw.get("bundles") or []):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            b.err(f"tests.bundles.{i}", "a bundle test needs `path:` and `expect:`")
            continue
        out["bundles"].append(BundleTest(item["path"], dict(item.get("expect") or {"fires": True})))
    return RuleTests(tuple(out["hit"]), tuple(out["miss"]), tuple(out["bundles"]))
