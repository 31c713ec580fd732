"""The HTML view in a real browser: Debian's headless Chromium, driven over the DevTools
protocol on ``--remote-debugging-pipe`` (fds 3 and 4, NUL-separated JSON messages; the
transport puppeteer and playwright use), so no extra Python package and no TCP port.

Per fixture scenario: the page loads from a file:// URL, the verdict text and the timeline
SVG are in the DOM and the verdict is above the fold, nothing logs a console error, a
JavaScript exception or a CSP violation, no request other than the page itself is made,
and a screenshot is a non-blank PNG. A 1,024-rank job simulated with ``crashscope simulate``
stays under 5 MB and loads (navigation to the load event) in under 2 s.

Skipped, with the reason, when no Chromium is installed (CI installs Debian's ``chromium``).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from crashscope.report.model import Report
from crashscope.report.render import render_html

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
CHROMIUM = next((p for p in (os.environ.get("CRASHSCOPE_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                             shutil.which("google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; or set CRASHSCOPE_CHROMIUM)")

# One per scenario: each cause, a healthy run, a job with two problems, one without Slurm.
SCENARIOS = ["sample_fabric_timeout", "driver_drift_cuda_node002", "gpu_throttle_node001_gpu0_two_problems", "healthy_2x4", "node_failure_node001",
             "oom_cuda_rank0", "preemption_2x4", "software_error_indexerror_rank3", "storage_stall_nfs_node001", "time_limit_2x4", "xid79_node001"]
VIEWPORT = (1280, 900)


class CDPError(RuntimeError):
    pass


class Browser:
    """Headless Chromium and a minimal DevTools client over the debugging pipe."""

    def __init__(self, profile: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:  # the pipe transport reads fd 3 and writes fd 4
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [str(CHROMIUM), "--headless", "--disable-gpu", "--no-sandbox", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "about:blank"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise CDPError("timed out waiting for the browser")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise CDPError(f"the browser closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self._id:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error']}")
                return m.get("result") or {}
            self.events.append(m)

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method and m.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m.get("method") == method and m.get("sessionId") == session:
                return m
            self.events.append(m)

    def open(self, url: str) -> Tab:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False}, session=session)
        self.events.clear()
        started = time.monotonic()
        nav = self.send("Page.navigate", {"url": url}, session=session)
        if nav.get("errorText"):
            raise CDPError(f"navigation failed: {nav['errorText']}")
        self.wait_for("Page.loadEventFired", session, timeout=60)
        return Tab(self, session, time.monotonic() - started)


class Tab:
    def __init__(self, browser: Browser, session: str, load_s: float):
        self.browser, self.session, self.load_s = browser, session, load_s

    def js(self, expression: str) -> Any:
        r = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session)
        if "exceptionDetails" in r:
            raise CDPError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def settle(self) -> None:
        """Let late console messages and requests arrive (a round trip flushes them)."""
        self.js("document.readyState")
        time.sleep(0.2)
        self.js("document.readyState")

    def problems(self) -> list[str]:
        out = []
        for m in self.browser.events:
            if m.get("sessionId") != self.session:
                continue
            p = m.get("params") or {}
            if m["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                out.append(f"console.{p['type']}: {p.get('args')}")
            elif m["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails')}")
            elif m["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log: {p['entry'].get('text')}")
        return out

    def requests(self) -> list[str]:
        return [m["params"]["request"]["url"] for m in self.browser.events
                if m.get("sessionId") == self.session and m.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, full: bool = False) -> bytes:
        params: dict[str, Any] = {"format": "png"}
        if full:
            size = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size[0], "height": min(size[1], 16000), "scale": 1})
        data = base64.b64decode(self.browser.send("Page.captureScreenshot", params, session=self.session, timeout=60)["data"])
        path.write_bytes(data)
        return data


def png_detail(data: bytes) -> int:
    """A measure of detail in a PNG: distinct byte values of its decompressed, filtered
    scanlines (a blank page, all one colour, has a handful; a rendered report well over a
    hundred). Also checks the PNG is whole: the scanlines are exactly width x height."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, bpp = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    assert width and height and len(raw) == height * (width * bpp + 1)
    return len(set(raw))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        b.send("Browser.getVersion", timeout=60)
        yield b
    finally:
        b.close()


def _check_page(tab: Tab, report: Report, page_url: str) -> None:
    assert tab.js("document.getElementById('cause').textContent") == report.cause
    assert tab.js("document.getElementById('confidence').textContent") == f"{report.confidence:.2f}"
    if report.summary:
        assert tab.js("document.getElementById('summary').textContent.length") > 10
    # The verdict is above the fold: cause, confidence, culprit and summary in the first screen.
    for eid in ("cause", "confidence", "culprit") + (("summary",) if report.summary else ()):
        assert tab.js(f"document.getElementById('{eid}').getBoundingClientRect().bottom") <= VIEWPORT[1], eid
    svgs = tab.js("Array.from(document.querySelectorAll('svg.timeline')).map(s => [s.getBBox().width, s.querySelectorAll('g').length])")
    assert svgs and all(w > 100 and g > 0 for w, g in svgs), svgs
    assert tab.js("document.scripts.length") == 0
    assert tab.js("document.querySelectorAll('img, iframe, object, embed, link').length") == 0
    tab.settle()
    assert tab.problems() == []
    assert [u for u in tab.requests() if u != page_url] == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_scenario_in_the_browser(name: str, browser: Browser, tmp_path: Path) -> None:
    report = Report.from_dict(json.loads((GOLDEN / f"{name}.json").read_text()))
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report), encoding="utf-8")
    url = page.as_uri()
    tab = browser.open(url)
    _check_page(tab, report, url)
    shot = tab.screenshot(tmp_path / f"{name}.png")
    assert len(shot) > 20_000 and png_detail(shot) > 100
    full = tab.screenshot(tmp_path / f"{name}-full.png", full=True)
    assert png_detail(full) > 100


def test_a_page_that_tries_to_fetch_is_caught(browser: Browser, tmp_path: Path) -> None:
    """The checks above can fail: a page with a script, an image and a console error is seen."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><img src='http://192.0.2.1/x.png'><script>console.error('boom')</script></body></html>")
    tab = browser.open(page.as_uri())
    tab.settle()
    assert any("boom" in p for p in tab.problems())
    assert any(u.startswith("http://192.0.2.1/") for u in tab.requests())
    # ...and the same page under the report's CSP is blocked, and says so.
    from crashscope.report.html import CSP

    page.write_text(f"<!DOCTYPE html><html><head><meta http-equiv='Content-Security-Policy' content=\"{CSP}\"></head>"
                    "<body><img src='http://192.0.2.1/x.png'><script>console.error('boom')</script></body></html>")
    tab = browser.open(page.as_uri())
    tab.settle()
    assert not any("boom" in p for p in tab.problems() if p.startswith("console"))
    assert any("Content Security Policy" in p for p in tab.problems())


@pytest.fixture(scope="module")
def job_1024(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from crashscope.cli import app

    out = tmp_path_factory.mktemp("sim1024") / "job"
    res = CliRunner().invoke(app, ["simulate", str(out), "--cause", "fabric_timeout", "--nodes", "128", "--gpus-per-node", "8", "--seed", "5",
                                   "--nccl-info-volume", "2"])
    assert res.exit_code == 0, res.output[-500:]
    return out


def test_a_thousand_ranks_open_fast(job_1024: Path, browser: Browser, tmp_path: Path) -> None:
    from crashscope.pipeline import analyze

    report, _, _ = analyze(job_1024)
    assert report.job["ranks"] == 1024 and report.activity is not None and len(report.activity.ranks) == 1024
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    size = page.stat().st_size
    assert size < 5 << 20
    loads = []
    for _ in range(3):
        tab = browser.open(page.as_uri())
        loads.append(tab.load_s)
    _check_page(tab, report, page.as_uri())
    shot = tab.screenshot(tmp_path / "1024.png")
    assert png_detail(shot) > 100
    best = min(loads)
    print(f"\n1,024 ranks: HTML {size} bytes, browser load {', '.join(f'{s:.3f}' for s in loads)} s (navigation to load event)")
    assert best < 2.0, loads
