"""Log text is data: every view on every job we have, and on hostile input.

For every job directory (fixtures/jobs, fixtures/recorded, fixtures/recorded_fr, tests/data/real: globbed now, so
corpora other people add are covered) and for a hostile corpus generated here (rich markup,
ANSI/OSC/DCS escapes, C1 controls, carriage returns, NUL, bidi overrides, zero-width and
odd Unicode, 1 MB lines, file names with control characters, newlines and invalid UTF-8):

* no view crashes;
* no output holds a raw control, format or separator character (Unicode categories Cc, Cf,
  Cs, Zl, Zp) other than ``\\n`` -- checked with :mod:`unicodedata`, not with the sanitizer;
* the JSON view is valid JSON and reads back as the same report;
* the Markdown view has only the structure the view makes (checked by parsing it with
  markdown-it): no HTML, links, images, emphasis or extra headings from log text, and a
  report whose every string is hostile parses to exactly the same block structure as one
  whose every string is a plain word.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest

from crashscope.pipeline import analyze
from crashscope.report.model import Coverage, EventRef, Report, SymptomGroup
from crashscope.report.render import (
    COMPACT_LINES,
    RENDERERS,
    render_json,
    render_markdown,
    render_terminal,
)

ROOT = Path(__file__).resolve().parent.parent


def _job_dirs() -> list[Path]:
    out: list[Path] = []
    for base in (ROOT / "fixtures" / "jobs", ROOT / "fixtures" / "recorded", ROOT / "fixtures" / "recorded_fr", ROOT / "tests" / "data" / "real", ROOT / "tests" / "data" / "torchrun_local"):
        if base.is_dir():
            out += sorted(p for p in base.iterdir() if p.is_dir())
    return out


JOBS = _job_dirs()

HOSTILE = [
    "[bold]x[/]", "[/path/pair.cc:553]", "[link=http://evil.example]click[/link]", ":smile: :warning:",
    "\x1b[31mRED\x1b[0m", "\x1b]0;pwned title\x07", "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\x1bP+q544e\x1b\\", "\x9b31mC1-CSI", "\x9d0;osc\x9c", "\r\rover", "NUL\x00byte", "\x08\x08bs\x7f",
    "\u202eevil.exe\u202c", "\u2066iso\u2069\u200f", "zero\u200bwidth\u200d\u2060", "\ufeffbom", "line\u2028sep\u2029par",
    "\U000e0041tag", "soft\u00adhyphen", "e\u0301\u0301\u0301", "\U0001d573\U0001d58a", "\U0001f600 日本語 עברית",
    "| a | b |", "`tick` ``` fence", "<script>alert(1)</script>", "# heading", "> quote", "- item", "+ item", "1. ordered",
    "[x](http://evil.example)", "![i](http://evil.example/i.png)", "***", "&amp; &#x41;", "<http://auto.example>",
    "www.evil.example", "~~strike~~", "*em* __strong__", "a\\", "<!-- c -->", "line\nbreak", "tab\there",
]


def _raw_controls(text: str) -> list[str]:
    return sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")})


def _md_parser():  # type: ignore[no-untyped-def]
    mdit = pytest.importorskip("markdown_it")
    return mdit.MarkdownIt("commonmark").enable("table").enable("strikethrough")


ALLOWED_INLINE = {"text", "code_inline", "softbreak"}
SECTIONS = ("First failure", "Evidence", "Collapsed symptoms", "Also seen in the correlation window", "Layers", "Recommended actions", "Missing data", "Warnings")


def _check_markdown(md: str) -> None:
    tokens = _md_parser().parse(md)
    blocks = {t.type for t in tokens}
    assert not blocks & {"html_block", "blockquote_open", "hr", "ordered_list_open", "code_block"}, blocks
    inline = {c.type for t in tokens if t.children for c in t.children}
    assert inline <= ALLOWED_INLINE, inline - ALLOWED_INLINE
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings and headings[0].startswith("crashscope: "), headings[:1]
    for h in headings[1:]:
        assert h.startswith(SECTIONS), h
    assert sum(t.type == "fence" for t in tokens) <= 1


def _views(report: Report) -> dict[str, str]:
    out = {name: fn(report) for name, fn in RENDERERS.items() if name != "terminal"}
    out["terminal"] = render_terminal(report, width=80)
    out["terminal-full"] = render_terminal(report, width=80, full=True)
    out["terminal-color"] = render_terminal(report, width=120, color=True, full=True)
    return out


def _check_html(page: str) -> None:
    """Nothing in the HTML view can run or fetch: no such element, no handler, no URL but an
    in-page fragment (tests/test_html.py checks more)."""
    from html.parser import HTMLParser

    tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, attrs))

    Tags().feed(page)
    assert not {t for t, _ in tags} & {"script", "iframe", "object", "embed", "img", "link", "base", "form"}
    assert all(not n.startswith("on") and (n not in ("src", "href") or (v or "").startswith("#")) for _, a in tags for n, v in a)


def _check_views(report: Report) -> dict[str, str]:
    views = _views(report)
    for name, text in views.items():
        if name == "terminal-color":
            # ANSI styles are ours; strip them, then nothing else may be a control.
            import re

            text = re.sub(r"\x1b\[[0-9;]*m", "", text)
        assert _raw_controls(text) == [], (name, _raw_controls(text)[:10])
        text.encode("utf-8")  # strictly encodable: no lone surrogates
    assert json.loads(views["json"]) == json.loads(json.dumps(report.to_dict()))
    _check_markdown(views["markdown"])
    _check_html(views["html"])
    return views


@pytest.mark.parametrize("job", JOBS, ids=[f"{j.parent.name}/{j.name}" for j in JOBS])
def test_every_view_on_every_job(job: Path) -> None:
    report, _, _ = analyze(job)
    views = _check_views(report)
    # The compact view keeps the verdict on one 80-column screen; its first line is the verdict.
    assert views["terminal"].count("\n") <= COMPACT_LINES, views["terminal"].count("\n")
    assert views["terminal"].startswith("crashscope: ")
    # Context read back around evidence lines is text, never the bytes of a binary trace.
    for e in report.evidence:
        for c in e.context:
            controls = [u for u in _raw_controls(c["text"]) if u != "U+0009"]  # a tab is text
            assert not controls and "\\x00" not in c["text"], (e.file, e.line, c["text"][:40])
            c["text"].encode("utf-8")


# --- the hostile corpus -------------------------------------------------------------------


def _write_hostile_job(root: Path) -> Path:
    job = root / "hostile"
    (job / "node001").mkdir(parents=True)
    huge = "A" * (1 << 20)
    out = []
    for i, h in enumerate(HOSTILE):
        h1 = h.replace("\n", " ")  # one line each; embedded newlines go in file names below
        out.append(f"0: node001:31001:31188 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.3<51234> with error 12, opcode 0, len 0, vendor err 129 (Recv) {h1}")
        out.append(f"{i % 4}: [rank{i % 4}]:[E0914 08:22:{10 + i % 40:02d}.160918398 ProcessGroupNCCL.cpp:632] [Rank {i % 4}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE) {h1} ran for 600047 milliseconds before timing out.")
        out.append(f"[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.1]:29500 {h1}")
    out.append(f"0: node001:31001:31188 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.3<51234> with error 12 {huge}")
    out.append(huge)
    out.append("srun: error: node001: tasks 0-1: Aborted (core dumped) [bold]x[/] \x1b[2J")
    (job / "slurm-77.out").write_text("\n".join(out) + "\n", encoding="utf-8", errors="surrogateescape")
    dmesg = [f"[86401.{i:06d}] mlx5_core 0000:17:00.0 ibp23s0: Link down {h.replace(chr(10), ' ')}" for i, h in enumerate(HOSTILE)]
    dmesg.append("[86402.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=py\x1b]0;x\x07thon, GPU has fallen off the bus.")
    (job / "node001" / "dmesg.txt").write_text("\n".join(dmesg) + "\n", encoding="utf-8")
    wline = "0: node001:31001:31188 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.3<51234> with error 12, opcode 0\n"
    for name in ("evil\x1b[31mred\n[bold]name|x`.log", "cr\rname\u202etxt.log", "#head <b>&amp;.log", "[bold]pair.cc:553[red].log"):
        (job / "node001" / name).write_text(wline)
    with open(job / "node001" / "rawbytes.log", "wb") as f:
        f.write(wline.encode() + b"0: node001:1:1 [0] NCCL WARN raw bytes \xff\xfe\x1b[5m \xc2\x9b31m\n")
    return job


def _add_undecodable_file_name(job: Path) -> None:
    bad = os.fsencode(str(job / "node001")) + b"/bad\xff\xfename.log"
    with open(bad, "wb") as f:
        f.write(b"0: node001:31001:31188 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.10.1.3<51234> with error 12\n")


@pytest.fixture(scope="module")
def hostile_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_hostile_job(tmp_path_factory.mktemp("views"))


def test_hostile_corpus_reaches_the_report_and_every_view_is_safe(hostile_job: Path) -> None:
    report, _, result = analyze(hostile_job)
    strings: list[str] = []
    report.map_strings(lambda v: strings.append(v) or v)
    data = "\n".join(strings)
    # The test is only worth something if hostile text made it into the report as data.
    assert "\x1b" in data and "[bold]x[/]" in data and "pair.cc:553]" in data, "hostile text did not reach the report"
    assert any("\x1b" in f.file or "\n" in f.file for f in result.files)
    views = _check_views(report)
    assert "[/path/pair.cc:553]" in views["terminal-full"] or "pair.cc:553]" in views["terminal-full"]
    assert "\\x1b" in views["terminal-full"] + views["markdown"]


def test_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    job = _write_hostile_job(tmp_path)
    _add_undecodable_file_name(job)
    report, _, result = analyze(job)
    assert any("\udcff" in f.file for f in result.files)
    _check_views(report)


def test_hostile_job_through_the_cli(hostile_job: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crashscope.cli import app

    runner = CliRunner()
    for args in ([], ["--full"], ["-f", "markdown"], ["-f", "json"]):
        res = runner.invoke(app, ["analyze", str(hostile_job), *args], env={"COLUMNS": "80"})
        assert res.exit_code == 0, (args, res.stderr[-500:])
        assert _raw_controls(res.stdout) == [] and _raw_controls(res.stderr) == [], args
    for args in (["sources", str(hostile_job)], ["sources", str(hostile_job), "-f", "markdown"], ["sources", str(hostile_job), "-f", "json"],
                 ["timeline", str(hostile_job), "--limit", "50"]):
        res = runner.invoke(app, args, env={"COLUMNS": "100"})
        assert res.exit_code == 0, (args, res.stderr[-500:])
        assert _raw_controls(res.stdout) == [], (args, _raw_controls(res.stdout)[:5])
    json.loads(runner.invoke(app, ["sources", str(hostile_job), "-f", "json"]).stdout)


def _mapped(report: Report, hostile: bool) -> Report:
    i = [0]

    def fn(s: str) -> str:
        i[0] += 1
        return HOSTILE[i[0] % len(HOSTILE)] + s[:40] if hostile else "word"

    return report.map_strings(fn)


def _shape(md: str) -> list[str]:
    """Block structure plus table cell and list item counts."""
    return [t.type for t in _md_parser().parse(md) if t.type != "inline"]


@pytest.mark.parametrize("job", JOBS[:6] + [j for j in JOBS if j.name == "sample_fabric_timeout"], ids=lambda p: p.name)
def test_every_string_hostile_keeps_the_structure(job: Path) -> None:
    report, _, _ = analyze(job)
    hostile, plain = _mapped(report, True), _mapped(report, False)
    views = _check_views(hostile)
    assert _shape(views["markdown"]) == _shape(render_markdown(plain))
    back = Report.from_dict(json.loads(render_json(hostile)))
    assert back.to_dict() == hostile.to_dict()  # a report JSON read back is the same report


def test_huge_values_are_cut_not_rendered_whole() -> None:
    from crashscope.report.model import EvidenceItem

    big = "x" * (1 << 20)
    r = Report(job={"id": big, "nodes": [big], "ranks": 4}, cause="oom", summary=big, warnings=[big],
               evidence=[EvidenceItem(rule="r", cause="oom", time=None, node=big, rank=1, file=big, line=3, message=big)],
               first_failure=EventRef.from_dict({"time": None, "node": big, "rank": None, "message": big, "file": big, "line": 1}))
    for name, text in _views(r).items():
        if name != "json":
            assert len(text) < 60_000, (name, len(text))


def test_unknown_values_are_said_once_or_left_out() -> None:
    r = Report(job={"id": None, "nodes": [], "ranks": None}, cause="unknown",
               first_failure=EventRef.from_dict({"time": None, "node": None, "rank": None, "source": None, "message": "boom", "file": "f.log", "line": None}),
               symptoms=[SymptomGroup.from_dict({"kind": "signal", "count": 3, "n_ranks": 0, "hosts": [], "first": {"file": "f.log", "line": None, "message": "SIGTERM"}, "missing_ranks": []})],
               coverage=Coverage.from_dict({"files": 1, "recognized": 1, "unrecognized": 0, "unreadable": 0, "events": 3, "hosts": {"?": {}}, "ranks_seen": 0, "ranks_expected": None}))
    for name in ("terminal", "markdown"):
        text = RENDERERS[name](r) if name != "terminal" else render_terminal(r, width=100, full=True)
        for bad in ("None", "?", "0 hosts", "0 nodes", "f.log:None", "rank None"):
            assert bad not in text, (name, bad, text)
    assert render_terminal(r, width=100).count("unknown") <= 3


def test_sanitizer_cases() -> None:
    from crashscope.report.safe import escape_controls, json_text, md_code, md_text

    assert escape_controls("a\x1b[31mb\r\n\t\x00\x9b\u202e\u200b\udcff") == "a\\x1b[31mb\\r\\n\\t\\x00\\x9b\\u202e\\u200b\\udcff"
    assert escape_controls("x" * 10, 5) == "xxxx…"
    assert escape_controls(None) == "" and escape_controls(7) == "7"
    assert md_text("# a | <b> *c* [d](e)") == "\\# a \\| \\<b\\> \\*c\\* \\[d\\](e)"
    assert md_code("a`b") == "``a`b``" and md_code("`x`") == "`` `x` ``" and md_code("a|b", table=True) == "`a\\|b`"
    s = "\u202e\x85\udcff\U000e0041"
    assert json.loads(json_text(json.dumps(s, ensure_ascii=False))) == s
    assert _raw_controls(json_text(json.dumps(s, ensure_ascii=False))) == []
