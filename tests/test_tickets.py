"""Tickets against a real local HTTP server (stdlib ThreadingHTTPServer on 127.0.0.1:0)
that implements the GitHub, GitLab, Jira and webhook endpoints crashscope uses, checks
each request's authentication and shape the way the services do, and records every
request."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import threading
import time
import urllib.parse
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from crashscope.cli import app
from crashscope.errors import EXIT_TICKET_AUTH, EXIT_TICKET_NOT_FOUND
from crashscope.tickets import TicketSettings, file_ticket, queued

MINI = Path(__file__).parent / "data" / "mini_ib_job"
GH_TOKEN = "ghp_TESTtoken0123456789abcdefghijABCDEFGH"
GL_TOKEN = "glpat-TESTtoken0123456789abcd"
JIRA_TOKEN = "ATATT3xFfGF0TESTjiraApiToken0123456789"
JIRA_USER = "oncall@example.org"
WEBHOOK_PATH = "/services/T0000/B0000/XXXXsecretXXXXwebhook"
TOKENS = (GH_TOKEN, GL_TOKEN, JIRA_TOKEN, WEBHOOK_PATH.rsplit("/", 1)[1])
runner = CliRunner()


def _multipart(headers: Any, body: bytes) -> list[dict[str, Any]]:
    msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" + body)
    parts = []
    for part in msg.iter_parts():
        parts.append({"name": part.get_param("name", header="content-disposition"), "filename": part.get_filename(),
                      "type": part.get_content_type(), "bytes": part.get_payload(decode=True)})
    return parts


class FakeServices:
    """State of the fake services plus the request log."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.faults: list[tuple[str, str, int, dict[str, str]]] = []  # (method, path prefix, status, headers), used once each
        self.gh_issues: list[dict[str, Any]] = []
        self.gh_comments: dict[int, list[str]] = {}
        self.gl_issues: list[dict[str, Any]] = []
        self.gl_notes: dict[int, list[str]] = {}
        self.gl_uploads: list[dict[str, Any]] = []
        self.jira_issues: list[dict[str, Any]] = []
        self.jira_comments: dict[str, list[str]] = {}
        self.jira_attachments: dict[str, list[dict[str, Any]]] = {}
        self.webhook: list[dict[str, Any]] = []
        self.jira_data_center = False  # no enhanced search: /rest/api/2/search only
        self.lock = threading.Lock()


def _handler(state: FakeServices, base: list[str]) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, status: int, data: Any = None, headers: dict[str, str] | None = None) -> None:
            raw = b"" if data is None else (data if isinstance(data, bytes) else json.dumps(data).encode())
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            u = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(u.query))
            with state.lock:
                state.log.append({"method": method, "path": u.path, "query": q, "headers": dict(self.headers.items()), "body": body})
                for i, (m, prefix, status, hdrs) in enumerate(state.faults):
                    if m == method and u.path.startswith(prefix):
                        del state.faults[i]
                        return self._send(status, {"message": "try later"}, hdrs)
                return self._route(method, u.path, q, body)

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        # --- the services -------------------------------------------------------------

        def _route(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
            p = path.split("/")
            if path.startswith("/gh/"):
                return self._github(method, p[2:], q, body)
            if path.startswith("/gitlab/api/v4/"):
                return self._gitlab(method, path[len("/gitlab/api/v4/"):], q, body)
            if path.startswith("/jira/rest/api/2/"):
                return self._jira(method, path[len("/jira/rest/api/2/"):], q, body)
            if path == WEBHOOK_PATH and method == "POST":
                if self.headers.get("Content-Type") != "application/json":
                    return self._send(400, b"invalid_payload")
                data = json.loads(body)
                if not isinstance(data.get("text"), str) or not data["text"]:
                    return self._send(400, b"no_text")
                state.webhook.append(data)
                return self._send(200, b"ok")
            return self._send(404, {"message": "Not Found"})

        def _github(self, method: str, p: list[str], q: dict[str, str], body: bytes) -> None:
            if self.headers.get("Authorization") != f"Bearer {GH_TOKEN}":
                return self._send(401, {"message": "Bad credentials"})
            if self.headers.get("X-GitHub-Api-Version") != "2022-11-28" or "application/vnd.github+json" not in (self.headers.get("Accept") or ""):
                return self._send(400, {"message": "missing API version or media type"})
            if p[:3] != ["repos", "org", "incidents"]:
                return self._send(404, {"message": "Not Found"})
            rest = p[3:]
            if rest == ["issues"] and method == "GET":
                want = set(filter(None, q.get("labels", "").split(",")))
                items = [i for i in state.gh_issues if i["state"] == q.get("state", "open") and want <= {lb["name"] for lb in i["labels"]}]
                return self._send(200, items)
            if rest == ["issues"] and method == "POST":
                d = json.loads(body)
                if not isinstance(d.get("title"), str) or not d["title"] or len(d.get("body", "")) > 65536:
                    return self._send(422, {"message": "Validation Failed"})
                num = len(state.gh_issues) + 1
                issue = {"number": num, "state": "open", "title": d["title"], "body": d["body"], "labels": [{"name": x} for x in d.get("labels", [])],
                         "html_url": f"{base[0]}/gh-web/org/incidents/issues/{num}"}
                state.gh_issues.append(issue)
                return self._send(201, issue)
            if len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments" and method == "POST":
                num = int(rest[1])
                if num > len(state.gh_issues):
                    return self._send(404, {"message": "Not Found"})
                d = json.loads(body)
                state.gh_comments.setdefault(num, []).append(d["body"])
                cid = sum(len(v) for v in state.gh_comments.values())
                return self._send(201, {"id": cid, "body": d["body"], "html_url": f"{base[0]}/gh-web/org/incidents/issues/{num}#issuecomment-{cid}"})
            return self._send(404, {"message": "Not Found"})

        def _gitlab(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
            if self.headers.get("PRIVATE-TOKEN") != GL_TOKEN:
                return self._send(401, {"message": "401 Unauthorized"})
            # the project is one URL-encoded path segment: /projects/group%2Fcluster/...
            raw = self.path.split("?")[0][len("/gitlab/api/v4/"):]
            segs = raw.split("/")
            if segs[:2] != ["projects", "group%2Fcluster"]:
                return self._send(404, {"message": "404 Project Not Found"})
            rest = segs[2:]
            if rest == ["issues"] and method == "GET":
                want = set(filter(None, q.get("labels", "").split(",")))
                items = [i for i in state.gl_issues if i["state"] == q.get("state", "opened") and want <= set(i["labels"])]
                return self._send(200, items)
            if rest == ["uploads"] and method == "POST":
                parts = _multipart(self.headers, body)
                if [x["name"] for x in parts] != ["file"]:
                    return self._send(400, {"message": "file is missing"})
                secret = f"{len(state.gl_uploads) + 1:032x}"
                up = {"id": len(state.gl_uploads) + 1, "alt": parts[0]["filename"], "url": f"/uploads/{secret}/{parts[0]['filename']}",
                      "full_path": f"/-/project/7/uploads/{secret}/{parts[0]['filename']}",
                      "markdown": f"[{parts[0]['filename']}](/uploads/{secret}/{parts[0]['filename']})", "bytes": parts[0]["bytes"]}
                state.gl_uploads.append(up)
                return self._send(201, {k: v for k, v in up.items() if k != "bytes"})
            if rest == ["issues"] and method == "POST":
                d = json.loads(body)
                if not isinstance(d.get("labels"), str):
                    return self._send(400, {"message": "labels is invalid"})
                iid = len(state.gl_issues) + 1
                issue = {"id": 100 + iid, "iid": iid, "state": "opened", "title": d["title"], "description": d["description"],
                         "labels": d["labels"].split(","), "web_url": f"{base[0]}/gitlab-web/group/cluster/-/issues/{iid}"}
                state.gl_issues.append(issue)
                return self._send(201, issue)
            if len(rest) == 3 and rest[0] == "issues" and rest[2] == "notes" and method == "POST":
                iid = int(rest[1])
                state.gl_notes.setdefault(iid, []).append(json.loads(body)["body"])
                return self._send(201, {"id": 500 + sum(len(v) for v in state.gl_notes.values()), "body": "..."})
            return self._send(404, {"message": "404 Not Found"})

        def _jira(self, method: str, path: str, q: dict[str, str], body: bytes) -> None:
            want = "Basic " + base64.b64encode(f"{JIRA_USER}:{JIRA_TOKEN}".encode()).decode()
            if self.headers.get("Authorization") != want:
                return self._send(401, {"errorMessages": ["You are not authenticated."]})
            if path == "search/jql" and state.jira_data_center:
                return self._send(404, {"errorMessages": ["null for uri: /rest/api/2/search/jql"]})
            if (path == "search/jql" or (path == "search" and state.jira_data_center)) and method == "GET":
                jql = q.get("jql", "")
                hits = [i for i in state.jira_issues if f'labels = "{i["fields"]["labels"][1]}"' in jql and f'project = "{i["fields"]["project"]["key"]}"' in jql]
                return self._send(200, {"issues": [{"id": i["id"], "key": i["key"]} for i in hits][:1], "isLast": True})
            if path == "issue" and method == "POST":
                f = json.loads(body)["fields"]
                if f.get("project", {}).get("key") != "OPS":
                    return self._send(400, {"errorMessages": [], "errors": {"project": "valid project is required"}})
                if not f.get("summary") or not f.get("issuetype", {}).get("name") or any(" " in x for x in f.get("labels", [])):
                    return self._send(400, {"errorMessages": [], "errors": {"summary": "required"}})
                n = len(state.jira_issues) + 1
                issue = {"id": str(10000 + n), "key": f"OPS-{n}", "self": f"{base[0]}/jira/rest/api/2/issue/{10000 + n}", "fields": f}
                state.jira_issues.append(issue)
                return self._send(201, {k: issue[k] for k in ("id", "key", "self")})
            parts = path.split("/")
            if len(parts) == 3 and parts[0] == "issue" and parts[2] == "comment" and method == "POST":
                state.jira_comments.setdefault(parts[1], []).append(json.loads(body)["body"])
                return self._send(201, {"id": "1", "body": "..."})
            if len(parts) == 3 and parts[0] == "issue" and parts[2] == "attachments" and method == "POST":
                if self.headers.get("X-Atlassian-Token") != "no-check":
                    return self._send(403, b"XSRF check failed")
                files = _multipart(self.headers, body)
                if not files or any(x["name"] != "file" for x in files):
                    return self._send(400, {"errorMessages": ["the multipart parameter must be named file"]})
                state.jira_attachments.setdefault(parts[1], []).extend(files)
                return self._send(200, [{"id": str(i), "filename": x["filename"]} for i, x in enumerate(files)])
            return self._send(404, {"errorMessages": ["Not found"]})

    return H


@pytest.fixture
def server() -> Iterator[tuple[str, FakeServices]]:
    state = FakeServices()
    base: list[str] = [""]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state, base))
    base[0] = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield base[0], state
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def report_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from crashscope.pipeline import analyze

    rep, _, _ = analyze(MINI, tz="UTC")
    p = tmp_path_factory.mktemp("rep") / "report.json"
    p.write_text(json.dumps(rep.to_dict()))
    return p


def _report(path: Path) -> Any:
    from crashscope.report.model import Report

    return Report.from_dict(json.loads(path.read_text()))


ENV = {"GITHUB_TOKEN": GH_TOKEN, "GITLAB_TOKEN": GL_TOKEN, "JIRA_USER": JIRA_USER, "JIRA_API_TOKEN": JIRA_TOKEN, "NO_PROXY": "127.0.0.1,localhost"}


def _settings(tmp_path: Path, **kw: Any) -> TicketSettings:
    return TicketSettings(env=ENV, reports_dir=tmp_path / "reports", backoff_s=0.01, **kw)


def _no_tokens(*texts: Any) -> None:
    for t in texts:
        s = t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t)
        for tok in TOKENS:
            assert tok not in s


def _hosts(report_path: Path) -> set[str]:
    from crashscope.redact import known_hosts

    return set(known_hosts(json.loads(report_path.read_text())))


def request_log(state: FakeServices) -> list[str]:
    keys = ("Authorization", "PRIVATE-TOKEN", "X-Atlassian-Token", "X-GitHub-Api-Version", "Accept", "Content-Type")
    out = []
    for r in state.log:
        h = []
        for k in keys:
            v = next((val for name, val in r["headers"].items() if name.lower() == k.lower()), None)
            if v is None:
                continue
            if k in ("Authorization", "PRIVATE-TOKEN"):
                v = v.split(" ")[0] + " <token>" if " " in v else "<token>"
            elif k == "Content-Type":
                v = v.split(";")[0]
            h.append(f"{k}: {v}")
        out.append(f"{r['method']} {r['path']} [{'; '.join(h)}]")
    return out


# --- GitHub ---------------------------------------------------------------------------


def test_github_creates_then_comments_on_the_same_fingerprint(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    args = ["ticket", str(report_json), "--to", "github", "--repo", "org/incidents", "--api-url", f"{base}/gh", "--format", "json", "--reports-dir", str(tmp_path)]
    first = runner.invoke(app, args, env=ENV)
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    assert out == {"action": "created", "url": f"{base}/gh-web/org/incidents/issues/1"}
    second = runner.invoke(app, args, env=ENV)
    assert second.exit_code == 0, second.output
    out2 = json.loads(second.stdout)
    assert out2["action"] == "commented" and out2["url"].startswith(f"{base}/gh-web/org/incidents/issues/1#issuecomment-")
    assert len(state.gh_issues) == 1 and len(state.gh_comments[1]) == 1
    fp = _report(report_json).fingerprint
    issue = state.gh_issues[0]
    assert {lb["name"] for lb in issue["labels"]} == {"crashscope", f"crashscope:{fp}"}
    assert fp in issue["body"] and "<details>" in issue["body"] and '"schema_version": "1"' in issue["body"]
    assert issue["title"].startswith("crashscope: fabric_timeout")
    # the search asked for exactly that label among open issues
    searches = [r for r in state.log if r["method"] == "GET"]
    assert all(r["query"] == {"labels": f"crashscope:{fp}", "state": "open", "per_page": "10"} for r in searches)
    # redaction is on by default: no host name of the job reaches GitHub
    for r in state.log:
        for h in _hosts(report_json):
            assert h not in r["body"].decode(), h
    _no_tokens(first.output, second.output, *(r["body"] for r in state.log))
    print("\n".join(["GitHub:"] + request_log(state)))


def test_github_no_redact_sends_the_host_names(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    res = file_ticket(_report(report_json), _settings(tmp_path, to="github", repo="org/incidents", api_url=f"{base}/gh", redact=False))
    assert res.action == "created"
    assert any(h in state.gh_issues[0]["body"] for h in _hosts(report_json))


def test_bad_token_is_exit_5_and_unknown_repo_exit_6(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    bad = runner.invoke(app, ["ticket", str(report_json), "--to", "github", "--repo", "org/incidents", "--api-url", f"{base}/gh", "--reports-dir", str(tmp_path)],
                        env={**ENV, "GITHUB_TOKEN": "ghp_wrongwrongwrongwrongwrongwrongwrong12"})
    assert bad.exit_code == EXIT_TICKET_AUTH
    assert "401" in bad.stderr and "credentials were refused" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert "ghp_wrong" not in bad.output
    missing = runner.invoke(app, ["ticket", str(report_json), "--to", "github", "--repo", "org/nope", "--api-url", f"{base}/gh", "--reports-dir", str(tmp_path)], env=ENV)
    assert missing.exit_code == EXIT_TICKET_NOT_FOUND
    assert "404" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1
    assert not queued(tmp_path)  # refusals are not queued
    _no_tokens(bad.output, missing.output)


def test_missing_credentials_is_a_usage_error_before_any_request(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    env = {k: v for k, v in ENV.items() if k != "GITHUB_TOKEN"}
    old = os.environ.pop("GITHUB_TOKEN", None)
    try:
        res = runner.invoke(app, ["ticket", str(report_json), "--to", "github", "--repo", "org/incidents", "--api-url", f"{base}/gh"], env=env)
    finally:
        if old is not None:
            os.environ["GITHUB_TOKEN"] = old
    assert res.exit_code == 2 and "GITHUB_TOKEN" in res.stderr
    assert state.log == []


def test_retries_on_429_and_503_then_success(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    state.faults = [("POST", "/gh/repos/org/incidents/issues", 429, {"Retry-After": "1"}), ("POST", "/gh/repos/org/incidents/issues", 503, {})]
    t0 = time.monotonic()
    res = file_ticket(_report(report_json), _settings(tmp_path, to="github", repo="org/incidents", api_url=f"{base}/gh"))
    took = time.monotonic() - t0
    assert res.action == "created" and len(state.gh_issues) == 1
    posts = [r for r in state.log if r["method"] == "POST"]
    assert len(posts) == 3  # 429, 503, 201
    assert res.waits[0] >= 1.0 and took >= 1.0  # Retry-After honoured
    assert res.waits[1] < 1.0  # then exponential backoff from backoff_s


# --- GitLab ---------------------------------------------------------------------------


def test_gitlab_uploads_then_links_and_comments(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    s = _settings(tmp_path, to="gitlab", project="group/cluster", api_url=f"{base}/gitlab/api/v4")
    r1 = file_ticket(_report(report_json), s)
    r2 = file_ticket(_report(report_json), s)
    assert r1.action == "created" and r1.url == f"{base}/gitlab-web/group/cluster/-/issues/1"
    assert r2.action == "commented" and r2.url.startswith(r1.url + "#note_")
    assert len(state.gl_issues) == 1 and len(state.gl_notes[1]) == 1
    fp = _report(report_json).fingerprint
    assert state.gl_issues[0]["labels"] == ["crashscope", f"crashscope:{fp}"]
    names = [u["alt"] for u in state.gl_uploads]
    assert "crashscope-report.json" in names and "crashscope-report.md" in names
    from crashscope.report.render import RENDERERS

    assert ("crashscope-report.html" in names) == ("html" in RENDERERS)  # HTML rides along where the view exists
    up_json = next(u for u in state.gl_uploads if u["alt"] == "crashscope-report.json")
    assert json.loads(up_json["bytes"])["fingerprint"] == fp
    assert up_json["markdown"] in state.gl_issues[0]["description"]  # the upload is linked from the issue
    for r in state.log:
        assert r["headers"].get("PRIVATE-TOKEN") == GL_TOKEN
    print("\n".join(["GitLab:"] + request_log(state)))


# --- Jira -----------------------------------------------------------------------------


def test_jira_create_comment_and_multipart_attachment(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    env = {**ENV, "JIRA_URL": f"{base}/jira"}
    args = ["ticket", str(report_json), "--to", "jira", "--project", "OPS", "--format", "json", "--reports-dir", str(tmp_path)]
    a = runner.invoke(app, args, env=env)
    b = runner.invoke(app, args, env=env)
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert json.loads(a.stdout) == {"action": "created", "url": f"{base}/jira/browse/OPS-1"}
    assert json.loads(b.stdout) == {"action": "commented", "url": f"{base}/jira/browse/OPS-1"}
    issue = state.jira_issues[0]["fields"]
    fp = _report(report_json).fingerprint
    assert issue["project"] == {"key": "OPS"} and issue["issuetype"] == {"name": "Task"}
    assert issue["labels"] == ["crashscope", f"crashscope:{fp}"] and "{noformat}" in issue["description"]
    assert len(state.jira_comments["OPS-1"]) == 1
    att = state.jira_attachments["OPS-1"]
    assert {x["filename"] for x in att} >= {"crashscope-report.json", "crashscope-report.md"} and len(att) >= 4  # both runs attach
    html_parts = [x for x in att if x["filename"] == "crashscope-report.html"]
    if html_parts:
        assert html_parts[0]["type"] == "text/html" and b"<html" in html_parts[0]["bytes"].lower()
        for h in _hosts(report_json):
            assert h.encode() not in html_parts[0]["bytes"]  # the attached HTML is the redacted one
    posts = [r for r in state.log if r["path"].endswith("/attachments")]
    assert posts and all(r["headers"].get("X-Atlassian-Token") == "no-check" for r in posts)
    assert all(r["headers"]["Content-Type"].startswith("multipart/form-data; boundary=") for r in posts)
    _no_tokens(a.output, b.output, *(r["body"] for r in state.log))
    print("\n".join(["Jira:"] + request_log(state)))


def test_jira_attachment_without_the_xsrf_header_is_blocked_by_the_fake(server: Any) -> None:
    # the fake enforces what Jira enforces, so the header assertion above can fail
    import httpx

    base, _ = server
    auth = httpx.BasicAuth(JIRA_USER, JIRA_TOKEN)
    r = httpx.post(f"{base}/jira/rest/api/2/issue/OPS-1/attachments", files={"file": ("a.txt", b"x")}, auth=auth)
    assert r.status_code == 403


# --- webhook --------------------------------------------------------------------------


def test_webhook_posts_slack_compatible_text(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    res = runner.invoke(app, ["ticket", str(report_json), "--to", "webhook", "--url", base + WEBHOOK_PATH, "--format", "json", "--reports-dir", str(tmp_path)], env=ENV)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"action": "created", "url": None}
    (msg,) = state.webhook
    fp = _report(report_json).fingerprint
    assert msg["text"].startswith("crashscope: fabric_timeout") and fp in msg["text"]
    assert "<" not in msg["text"] and ">" not in msg["text"]  # Slack's control characters are escaped
    assert msg["crashscope"]["fingerprint"] == fp and msg["crashscope"]["cause"] == "fabric_timeout"
    assert state.log[0]["headers"]["Content-Type"] == "application/json"
    _no_tokens(res.output)
    print("\n".join(["webhook:"] + request_log(state)))


# --- server down: queued, then --retry ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_down_queues_then_retry_delivers(report_json: Path, tmp_path: Path) -> None:
    port = _free_port()
    api = f"http://127.0.0.1:{port}/gh"
    res = runner.invoke(app, ["ticket", str(report_json), "--to", "github", "--repo", "org/incidents", "--api-url", api,
                              "--format", "json", "--reports-dir", str(tmp_path), "--retries", "1"], env=ENV)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {"action": "queued", "url": None}
    assert "queued" in res.stderr and "--retry" in res.stderr
    (q,) = queued(tmp_path)
    assert stat.S_IMODE(q.stat().st_mode) == 0o600
    text = q.read_text()
    entry = json.loads(text)
    assert entry["to"] == "github" and entry["fingerprint"] == _report(report_json).fingerprint and entry["redacted"] is True
    for h in _hosts(report_json):
        assert h not in text  # the queue holds the redacted report
    _no_tokens(text, res.output)

    # the service comes back on the same port
    state = FakeServices()
    base = [f"http://127.0.0.1:{port}"]
    srv = ThreadingHTTPServer(("127.0.0.1", port), _handler(state, base))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        again = runner.invoke(app, ["ticket", "--retry", "--reports-dir", str(tmp_path), "--format", "json"], env=ENV)
    finally:
        srv.shutdown()
        srv.server_close()
    assert again.exit_code == 0, again.output
    out = json.loads(again.stdout)
    assert out["sent"] == 1 and out["queued"] == 0 and out["results"][0]["action"] == "created"
    assert len(state.gh_issues) == 1 and not queued(tmp_path)
    _no_tokens(again.output, *(r["body"] for r in state.log))


def test_webhook_queue_holds_no_url(report_json: Path, tmp_path: Path) -> None:
    port = _free_port()
    res = file_ticket(_report(report_json), _settings(tmp_path, to="webhook", url=f"http://127.0.0.1:{port}{WEBHOOK_PATH}", retries=1))
    assert res.action == "queued"
    (q,) = queued(tmp_path / "reports")
    assert WEBHOOK_PATH not in q.read_text() and str(port) not in q.read_text()


def test_file_ticket_takes_the_config_as_the_epilog_does(server: Any, report_json: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crashscope.config import parse_config

    base, state = server
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    cfg = parse_config(f'reports_dir = "{tmp_path}"\n[ticket]\nto = "gitlab"\nproject = "group/cluster"\napi_url = "{base}/gitlab/api/v4"\n')
    res = file_ticket(_report(report_json), cfg)
    assert res.action == "created" and len(state.gl_issues) == 1


def test_jira_data_center_falls_back_to_the_classic_search(server: Any, report_json: Path, tmp_path: Path) -> None:
    base, state = server
    state.jira_data_center = True
    env = {**ENV, "JIRA_URL": f"{base}/jira"}
    s = _settings(tmp_path, to="jira", project="OPS")
    s.env = env
    assert file_ticket(_report(report_json), s).action == "created"
    assert file_ticket(_report(report_json), s).action == "commented"
    paths = [r["path"] for r in state.log if r["method"] == "GET"]
    assert paths == ["/jira/rest/api/2/search/jql", "/jira/rest/api/2/search"] * 2
