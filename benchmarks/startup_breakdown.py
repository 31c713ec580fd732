"""Where the CPU time of one ``crashscope analyze`` goes, in exclusive buckets.

Run as ``python benchmarks/startup_breakdown.py JOB -f json -o FILE`` (what
``startup_bench.py --breakdown`` does in a fresh child). It wraps, before the CLI runs:

* ``importlib._bootstrap._find_and_load`` (what every ``import`` of a module not yet loaded
  calls): a third-party import started from crashscope code is the bucket ``import <top
  package>`` (all it imports in turn included; ``pydantic``, which typer imports lazily when
  it coerces the first option, is its own bucket); a crashscope module's body is
  ``crashscope module bodies``;
* ``regex`` compiles (``regex._main._compile``: every ``regex.compile`` and cache miss) and
  ``re.compile``: ``compile regex`` / ``compile re``;
* the stages: ``crashscope.catalogs.load`` (the catalogs: cache or YAML), the rules
  (``crashscope.engine.load._load_dir``), ``ingest``, ``build_timeline``, ``find`` (rules and
  analyses), the classifier, ``decide`` and ``build_report``;
* the CLI: ``typer`` from ``main()`` to the analyze body (option parsing and coercion).

Time goes to the innermost bucket running (a regex compiled inside the ingest counts as
``compile regex``, not ``ingest``); what is left is ``other`` (rendering, writing, the CLI's
own work). CPU seconds (``time.process_time``), from the first line of this script, so
the interpreter's own start-up (``python -c pass``) is not in it: the bench prints it.
The wrappers cost a little (~1 us per wrapped call).
"""

from __future__ import annotations

import time

_T0 = time.process_time()

import importlib._bootstrap as _bootstrap  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any, Callable  # noqa: E402

_acc: Counter[str] = Counter()
_stack: list[str] = ["other"]
_last = [_T0]


def _push(cat: str) -> None:
    now = time.process_time()
    _acc[_stack[-1]] += now - _last[0]
    _last[0] = now
    _stack.append(cat)


def _pop() -> None:
    now = time.process_time()
    _acc[_stack.pop()] += now - _last[0]
    _last[0] = now


def _timed(cat: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **kw: Any) -> Any:
        _push(cat)
        try:
            return fn(*a, **kw)
        finally:
            _pop()

    wrapper._cs_timed = True  # type: ignore[attr-defined]
    return wrapper


# module -> [(attribute, bucket)] wrapped as soon as the module is loaded
PATCHES: dict[str, list[tuple[str, str]]] = {
    "crashscope.catalogs": [("load", "catalogs (cache or YAML)")],
    "crashscope.engine.load": [("load_rules", "rules (cache or YAML)"), ("_load_dir", "rules (cache or YAML)")],
    "crashscope.pipeline": [("ingest", "ingest"), ("build_timeline", "timeline"), ("find", "findings (rules, analyses)")],
    "crashscope.verdict": [("_classifier", "classifier"), ("decide", "decide")],
    "crashscope.report.build": [("build_report", "build_report")],
}
_orig_find_and_load = _bootstrap._find_and_load  # type: ignore[attr-defined]
_third_party_depth = [0]


def _find_and_load(name: str, import_: Any) -> Any:
    top = name.partition(".")[0]
    if top == "crashscope":
        cat = "crashscope module bodies"
    elif _third_party_depth[0] == 0 or top == "pydantic" and "pydantic" not in _stack[-1]:
        cat = "import pydantic (typer's coercion)" if top == "pydantic" else f"import {top}"
    else:
        cat = ""
    if cat and not cat.startswith("crashscope"):
        _third_party_depth[0] += 1
    if cat:
        _push(cat)
    try:
        mod = _orig_find_and_load(name, import_)
    finally:
        if cat:
            _pop()
            if not cat.startswith("crashscope"):
                _third_party_depth[0] -= 1
    for attr, bucket in PATCHES.get(name, ()):
        fn = getattr(mod, attr, None)
        if fn is not None and not hasattr(fn, "_cs_timed"):
            setattr(mod, attr, _timed(bucket, fn))
    return mod


_bootstrap._find_and_load = _find_and_load  # type: ignore[attr-defined]

import re  # noqa: E402

import regex  # noqa: E402
import regex._main as _regex_main  # noqa: E402

_regex_main._compile = _timed("compile regex", _regex_main._compile)  # type: ignore[attr-defined]
re.compile = _timed("compile re", re.compile)  # type: ignore[assignment]
del regex


def main() -> None:
    _push("import crashscope.cli (typer, click)")
    import crashscope.cli
    import crashscope.cli.analyze_cmd as analyze_cmd

    _pop()
    # the CLI's parsing: from main() to the analyze body's first import
    real_stage = analyze_cmd._run_analysis
    _push("typer: parse and coerce options")
    parsing = [True]

    def end_parsing() -> None:
        if parsing[0]:  # the bucket may be below an import's by now: take it out where it is
            parsing[0] = False
            _push("other")
            _stack.pop()
            i = len(_stack) - 1 - _stack[::-1].index("typer: parse and coerce options")
            del _stack[i]

    class _Mark:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
            if fullname == "crashscope.report.render":
                end_parsing()
            return None

    sys.meta_path.insert(0, _Mark())

    def run_analysis(*a: Any, **kw: Any) -> Any:
        end_parsing()
        return real_stage(*a, **kw)

    analyze_cmd._run_analysis = run_analysis
    sys.argv = ["crashscope", "analyze", *sys.argv[1:]]
    try:
        crashscope.cli.main()
    except SystemExit:
        pass
    end_parsing()
    now = time.process_time()
    _acc[_stack[-1]] += now - _last[0]
    total = now - _T0
    print(json.dumps({"total": total, "buckets": dict(_acc)}), file=sys.__stderr__)


if __name__ == "__main__":
    main()
