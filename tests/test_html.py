"""The HTML view (crashscope/report/html.py): every fixture renders to one self-contained,
inert page.

The page is parsed with the standard library's HTML parser (the same tokenizer rules a
browser uses for tags and attributes), and the checks are on what it finds:

* no element that can run or fetch anything (script, iframe, object, embed, link, img,
  base, form, meta refresh), no ``on*`` attribute, no ``src``/``href``/``url()`` that is
  not an in-page ``#fragment``, and the strict Content-Security-Policy meta tag first;
* the verdict (cause, confidence, culprit, summary) comes before the timeline, which comes
  before the evidence, symptoms, hosts and actions;
* a report whose every string is hostile makes exactly the same elements and attributes as
  one whose every string is a plain word (the Markdown test's idea, for HTML), and the
  hostile text is on the page as visible text;
* the odd host is highlighted where the fixture has one (driver drift on node002), and a
  1,024-rank job's picture groups ranks by node and names the outliers.

The real-browser checks are in tests/test_html_browser.py.
"""

from __future__ import annotations

import html as htmllib
import json
import re
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from crashscope.report.html import CSP, crash_window, render_html, timeline_picture
from crashscope.report.model import Activity, EventRef, EvidenceItem, Implicated, Report, SymptomGroup

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
RECORDED = sorted(p for p in (ROOT / "fixtures" / "recorded").iterdir() if p.is_dir())
JOBS = sorted(p for p in (ROOT / "fixtures" / "jobs").iterdir() if p.is_dir())

FORBIDDEN_TAGS = {"script", "iframe", "frame", "object", "embed", "link", "img", "image", "base", "form", "input", "video", "audio", "source", "use", "foreignobject"}
URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "data", "srcset", "background"}


class Page(HTMLParser):
    """Every start tag with its attributes, the text, and the CSP meta tags, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.styles if self._in_style else self.text).append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


def check_inert(page: str) -> Page:
    """The page can run nothing and fetch nothing."""
    p = parse(page)
    assert page.startswith("<!DOCTYPE html>")
    metas = [dict(a) for t, a in p.tags if t == "meta"]
    csp = [m for m in metas if (m.get("http-equiv") or "").lower() == "content-security-policy"]
    assert len(csp) == 1 and csp[0]["content"] == CSP
    assert "default-src 'none'" in CSP and "script-src" not in CSP  # scripts fall under 'none'
    # The CSP is the first thing in <head> after the charset, before any styled content.
    assert [t for t, _ in p.tags][:4] == ["html", "head", "meta", "meta"]
    for tag, attrs in p.tags:
        assert tag not in FORBIDDEN_TAGS, tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name)
            if name in URL_ATTRS:
                assert (value or "").startswith("#"), (tag, name, value)
            if name == "style":
                assert "url(" not in (value or "").lower() and "expression(" not in (value or "").lower(), value
            if name == "http-equiv":
                assert (value or "").lower() == "content-security-policy", value
    styles = "".join(p.styles).lower()
    assert "url(" not in styles and "@import" not in styles and "@font-face" not in styles
    return p


def structure(page: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(t, tuple(sorted(n for n, _ in a))) for t, a in parse(page).tags]


def golden(name: str) -> Report:
    return Report.from_dict(json.loads((GOLDEN / f"{name}.json").read_text()))


def text_of(page: str) -> str:
    return " ".join(" ".join(parse(page).text).split())


SECTIONS = ["verdict", "timeline", "evidence", "symptoms", "hosts", "actions", "data"]


def check_page(report: Report, page: str) -> None:
    p = check_inert(page)
    ids = [dict(a).get("id") for t, a in p.tags if t == "section"]
    assert [i for i in ids if i in SECTIONS] == SECTIONS, ids
    text = text_of(page)
    assert f"crashscope: {report.cause}" in text
    assert f"{report.confidence:.2f}" in text
    if report.summary:
        assert " ".join(report.summary.split())[:80] in text
    for n in report.implicated.nodes:
        assert n in text
    times = [e.time for e in report.evidence if e.time] + [report.activity.ranks[0].time if report.activity is not None and report.activity.ranks else None]
    if any(times):
        assert any(t == "svg" for t, _ in p.tags), "no timeline picture"
    for e in report.evidence[:40]:
        if e.file and e.line:
            assert f"{e.file}:{e.line}" in text


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_every_fixture_report_renders(name: str) -> None:
    report = golden(name)
    page = render_html(report)
    check_page(report, page)
    assert len(page.encode()) < 1 << 20


@pytest.mark.parametrize("job", RECORDED, ids=lambda p: p.name)
def test_every_recorded_job_renders(job: Path) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(job)
    check_page(report, render_html(report))


def test_evidence_shows_the_lines_around_it() -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(ROOT / "fixtures" / "jobs" / "sample_fabric_timeout")
    ev = next(e for e in report.evidence if e.rule == "nccl-ib-completion-error")
    assert [c["line"] for c in ev.context] == list(range(ev.line - 3, ev.line + 4))
    lines = (ROOT / "fixtures" / "jobs" / "sample_fabric_timeout" / ev.file).read_text().splitlines()
    assert [c["text"] for c in ev.context] == [ln[:400] for ln in lines[ev.line - 4:ev.line + 3]]
    text = text_of(render_html(report))
    for c in ev.context:
        assert " ".join(c["text"].split())[:100] in text


def test_evidence_context_inside_an_archive_and_of_a_single_file(tmp_path: Path) -> None:
    import tarfile

    from crashscope.pipeline import analyze

    job = ROOT / "fixtures" / "jobs" / "sample_fabric_timeout"
    with tarfile.open(tmp_path / "logs.tar.gz", "w:gz") as tar:
        tar.add(job, arcname="job")
    report, _, _ = analyze(tmp_path / "logs.tar.gz")
    ev = next(e for e in report.evidence if e.rule == "kernel-mlx5-link-down")
    assert ev.file == "logs.tar.gz!job/nodes/node001/journal-kernel-iso.log"
    assert [c["text"] for c in ev.context] == (job / "nodes/node001/journal-kernel-iso.log").read_text().splitlines()[ev.line - 4:ev.line + 3]
    report, _, _ = analyze(job / "slurm-9491422.out")
    assert report.evidence and all(len(e.context) == 7 for e in report.evidence)


def test_the_odd_host_is_highlighted() -> None:
    report = golden("driver_drift_cuda_node002")
    page = render_html(report)
    body = page[page.index('<section id="hosts">'):page.index('<section id="actions">')]
    node_rows = re.findall(r'<tr class="([^"]*)">\s*<td>(node\d+)</td>(.*?)</tr>', body, re.S)
    by_node = {n: (cls, cells) for cls, n, cells in node_rows}
    assert set(by_node) == {"node001", "node002"}
    # node002 runs driver 525.85.12 / CUDA 12.0 where node001 runs 570.124.06 / 12.8: two hosts,
    # no majority, so the implicated one's values are the odd ones.
    assert "culprit" in by_node["node002"][0] and "odd-one" in by_node["node002"][0] and "odd-one" not in by_node["node001"][0]
    assert '<td class="mono odd">525.85.12</td>' in by_node["node002"][1] and '<td class="mono odd">12.0</td>' in by_node["node002"][1]
    assert '<td class="mono">570.124.06</td>' in by_node["node001"][1] and "odd" not in by_node["node001"][1]


def test_odd_one_out_among_many_hosts() -> None:
    hosts = {f"n{i:03d}": {"versions": {"driver": "570.1", "nccl": "2.27.3"}, "gpus": 8, "throttle": [], "xids": [], "ranks": [i], "first": None,
                           "last": "2026-01-01T00:00:10.000000Z"} for i in range(6)}
    hosts["n003"]["versions"]["driver"] = "525.85.12"
    hosts["n004"]["xids"] = [79]
    hosts["n005"]["last"] = "2026-01-01T00:00:01.000000Z"
    r = Report(job={"id": "1", "nodes": sorted(hosts), "ranks": 6}, cause="driver_drift", activity=Activity.from_dict({"ranks": [], "hosts": [{"node": n} | h for n, h in hosts.items()]}))
    page = render_html(r)
    rows = dict((n, (cls, cells)) for cls, n, cells in re.findall(r'<tr class="([^"]*)">\s*<td>(n\d+)</td>(.*?)</tr>', page, re.S))
    assert [n for n, (cls, _) in rows.items() if "odd-one" in cls] == ["n003", "n004", "n005"]
    assert '<td class="mono odd">525.85.12</td>' in rows["n003"][1]
    assert '<td class="mono odd">' not in rows["n000"][1]
    assert '<td class="odd">79</td>' in rows["n004"][1]


def _hostile_report() -> Report:
    r = golden("sample_fabric_timeout")
    r.layers = [{"layer": "fabric", "status": "fail", "reason": "link down", "evidence": [{"file": "a.log", "line": 3, "message": "x"}], "settle": {"cmd": "ibstat"}}]
    r.repro = {"status": "reproduced", "command": "torchrun x.py", "seconds": 1.5}
    r.history = [{"job": "123", "cause": "fabric_timeout", "time": "2026-01-01T00:00:00Z"}]
    return r


HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "' onmouseover='alert(1)", "</pre></div><a href=//evil.example>x</a>",
           "javascript:alert(1)", "<!--", "]]><svg onload=alert(1)>", "&lt;b&gt;", "\x1b[31mred\x1b[0m", "\u202eevil", "a\x00b", "<style>@import url(//e.example/x.css)</style>",
           "</textarea><iframe src=//e.example>", "{{ 7*7 }} {% raw %}", "url(//e.example/i.png)", "line\nbreak\rcr"]


def _map(report: Report, hostile: bool) -> Report:
    """Every string but the stamps (crashscope writes those) prefixed, hostile or plain, by
    its hash: two values are equal, and sort, in one exactly as in the other."""
    order = {h: i for i, h in enumerate(sorted(HOSTILE))}

    def fn(s: str) -> str:
        if re.match(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)$", s):
            return s
        h = HOSTILE[zlib.crc32(s.encode("utf-8", "surrogateescape")) % len(HOSTILE)]
        return h + s if hostile else f"w{order[h]:02d}_" + s

    return report.map_strings(fn)


def test_hostile_strings_make_no_structure() -> None:
    base = _hostile_report()
    hostile, plain = _map(base, True), _map(base, False)
    page = render_html(hostile)
    check_inert(page)
    assert page.count("<svg") == 2 and page.count("<path") > 3  # the picture was drawn, with hostile tooltips
    assert structure(page) == structure(render_html(plain))
    text = " ".join(parse(page).text)
    assert "<script>alert(1)</script>" in text  # shown as text, not made into an element
    assert "\\x1b[31mred" in text and "\\u202eevil" in text and "\x1b" not in page and "\u202e" not in page
    assert "{{ 7*7 }}" in text  # log text is never a template
    assert "onerror=alert(1)>" in htmllib.unescape(page) and 'onerror=alert(1)>' not in page.replace("&gt;", "")


def test_hostile_attribute_values_stay_inside_their_quotes() -> None:
    r = golden("sample_fabric_timeout")
    for e in r.evidence:
        e.role = '" onclick="alert(1)'
    r.symptoms = []
    page = render_html(r)
    check_inert(page)
    assert 'class="role &#34; onclick=&#34;alert(1)"' in page


def test_layers_repro_history_only_when_present() -> None:
    r = golden("sample_fabric_timeout")
    r.layers, r.repro, r.history = [], None, []
    ids = lambda page: [dict(a).get("id") for t, a in parse(page).tags if t == "section"]  # noqa: E731
    assert not {"layers", "repro", "history"} & set(ids(render_html(r)))
    r2 = _hostile_report()
    page = render_html(r2)
    assert {"layers", "repro", "history"} <= set(ids(page))
    text = text_of(page)
    assert "link down" in text and "a.log:3" in text and "ibstat" in text and "torchrun x.py" in text and "123" in text


def test_a_report_without_anything_renders() -> None:
    r = Report(job={})
    page = render_html(r)
    check_inert(page)
    assert "crashscope: unknown" in text_of(page)
    r = Report(job={"id": None}, cause="oom", evidence=[EvidenceItem(rule="r", cause="oom", time="not a time", node=None, rank=None, file="", line=None, message="m")],
               first_failure=EventRef.from_dict({"time": "garbage"}), activity=Activity.from_dict({"ranks": [{"rank": "x"}, {"rank": 1, "last": 5}], "hosts": ["not a dict", {"node": None}]}),
               layers=["x", {"layer": None}], history=[1, {"a": None}], symptoms=[s for s in (SymptomGroup.from_dict(x) for x in [None, {"first": "x"}]) if s is not None])
    check_inert(render_html(r))
    odd = Report.from_dict({"job": [], "implicated": "x", "activity": 3, "clock": None, "coverage": {"hosts": {"h": "x"}}, "cause": "oom"})
    check_inert(render_html(odd))


def test_huge_values_are_cut() -> None:
    big = "x" * (1 << 20)
    r = Report(job={"id": big, "nodes": [big], "ranks": 4}, cause="oom", summary=big, warnings=[big] * 200, actions=[big],
               evidence=[EvidenceItem(rule=big, cause="oom", time=None, node=big, rank=1, file=big, line=3, message=big, context=[{"line": 3, "text": big}])] * 100,
               layers=[{"layer": big, "reason": big, "settle": big, "evidence": [{"file": big, "line": 1}] * 100}], repro={big: big}, history=[{big: big}] * 500)
    assert len(render_html(r)) < 2_000_000


def _thousand_ranks() -> Report:
    """128 nodes x 8 ranks; rank 517's node056 stops early, rank 9 is implicated."""
    ranks, hosts = [], {}
    for rank in range(1024):
        node = f"node{rank // 8 + 1:03d}"
        last = "2026-05-01T10:00:59.500000Z" if node != "node065" else "2026-05-01T10:00:20.000000Z"
        ranks.append({"rank": rank, "node": node, "first": "2026-05-01T09:00:00.000000Z", "last": last, "kind": "log_error", "file": "slurm.out", "line": rank + 1})
        hosts.setdefault(node, {"versions": {"driver": "570.1"}, "gpus": 8, "throttle": [], "xids": [], "ranks": [], "first": None, "last": last})["ranks"].append(rank)
    return Report(job={"id": "9", "nodes": sorted(hosts), "ranks": 1024}, cause="fabric_timeout", confidence=0.9,
                  implicated=Implicated(nodes=["node002"], ranks=[9]),
                  first_failure=EventRef(time="2026-05-01T10:00:30.000000Z", node="node002", rank=9, message="boom", file="slurm.out", line=10),
                  symptoms=[SymptomGroup(kind="collective_timeout", signature="", count=1000, n_ranks=1000, ranks="0-1023", missing_ranks=[512, 513],
                                         first=EventRef(time="2026-05-01T10:00:31.000000Z", file="slurm.out", line=12, message="timeout"))],
                  activity=Activity.from_dict({"ranks": ranks, "hosts": [{"node": n} | h for n, h in hosts.items()]}))


def test_a_thousand_ranks_are_grouped_by_node_with_the_outliers() -> None:
    r = _thousand_ranks()
    pic = timeline_picture(r)
    host_rows = [row for row in pic["rows"] if row["kind"] == "host"]
    rank_rows = [row["label"] for row in pic["rows"] if row["kind"] == "rank"]
    assert len(host_rows) == 128 and not pic["per_rank"]
    assert rank_rows == ["rank 9"] + [f"rank {k}" for k in range(512, 520)]  # implicated, then node065 (early)
    assert crash_window(r) is not None  # the crash is seconds of an hour: drawn again on its own
    page = render_html(r)
    check_inert(page)
    assert len(page.encode()) < 5 << 20
    assert page.count("<svg") == 2
    assert "not reported by ranks 512-513" in text_of(page)


def test_the_cli_writes_html(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crashscope.cli import app

    runner = CliRunner()
    job = ROOT / "fixtures" / "jobs" / "healthy_2x2"
    out = tmp_path / "report.html"
    res = runner.invoke(app, ["analyze", str(job), "--format", "html", "--output", str(out)])
    assert res.exit_code == 0, res.stderr[-500:]
    check_inert(out.read_text())
    res = runner.invoke(app, ["analyze", str(job), "-o", str(tmp_path / "r.htm")])
    assert res.exit_code == 0 and (tmp_path / "r.htm").read_text().startswith("<!DOCTYPE html>")
    res = runner.invoke(app, ["sources", str(job), "-f", "html"])
    assert res.exit_code == 2 and "no html view" in res.stderr

