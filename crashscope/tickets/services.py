"""The four ticket services, each: find the open issue with this fingerprint, else create
one; comment on it when found; attach the report. Endpoints and payloads, from each
service's reference:

GitHub REST (docs.github.com/rest, API version 2022-11-28), ``Authorization: Bearer TOKEN``,
``Accept: application/vnd.github+json``, ``X-GitHub-Api-Version: 2022-11-28``:
  ``GET /repos/{owner}/{repo}/issues?labels=L&state=open`` (pull requests are issues too:
  items with ``pull_request`` are skipped), ``POST /repos/{owner}/{repo}/issues``
  ``{"title", "body", "labels": [...]}`` -> 201 ``{"number", "html_url"}``,
  ``POST /repos/{owner}/{repo}/issues/{number}/comments`` ``{"body"}`` -> 201 ``{"html_url"}``.
  GitHub has no attachment API: the Markdown report is the body and the JSON report sits
  in a collapsed ``<details>`` block; bodies are capped at 65,536 characters.

GitLab REST v4 (docs.gitlab.com/api), ``PRIVATE-TOKEN: TOKEN``, project by id or
URL-encoded path:
  ``GET /projects/:id/issues?labels=L&state=opened`` -> ``[{"iid", "web_url"}]``,
  ``POST /projects/:id/uploads`` (multipart ``file``) -> ``{"url", "markdown", "full_path"}``,
  ``POST /projects/:id/issues`` ``{"title", "description", "labels": "a,b"}`` -> 201
  ``{"iid", "web_url"}``, ``POST /projects/:id/issues/:iid/notes`` ``{"body"}`` -> 201 ``{"id"}``.

Jira Cloud REST v2 (developer.atlassian.com/cloud/jira/platform/rest/v2), basic auth
``email:api_token``:
  ``GET /rest/api/2/search/jql?jql=...`` (the enhanced search that replaced
  ``/rest/api/2/search`` on Cloud, CHANGE-2046; Jira Data Center still has only
  ``/rest/api/2/search``, used when the first answers 404),
  ``POST /rest/api/2/issue`` ``{"fields": {"project": {"key"|"id"}, "summary",
  "description", "issuetype": {"name"}, "labels"}}`` -> 201 ``{"id", "key", "self"}``,
  ``POST /rest/api/2/issue/{key}/comment`` ``{"body"}``,
  ``POST /rest/api/2/issue/{key}/attachments`` multipart ``file`` parts with
  ``X-Atlassian-Token: no-check`` (without it the request is blocked as XSRF).
  v2 takes plain/wiki-markup strings (v3 would need Atlassian Document Format).

Webhook (Slack incoming webhooks, docs.slack.dev "Sending messages using incoming
webhooks"): ``POST URL`` with ``Content-Type: application/json`` and ``{"text": ...}``
(``&``, ``<``, ``>`` escaped as ``&amp;`` ``&lt;`` ``&gt;`` per Slack's formatting rules);
Mattermost, Rocket.Chat and most chat webhooks take the same ``text``. A ``crashscope``
object with the fingerprint and verdict rides along for other receivers; a webhook has no
issue to find, so every send is ``created``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from crashscope.errors import UsageError
from crashscope.tickets.http import Http

GITHUB_API = "https://api.github.com"
GITLAB_API = "https://gitlab.com/api/v4"
GITHUB_BODY_LIMIT = 65_536
JIRA_TEXT_LIMIT = 32_767
JIRA_SUMMARY_LIMIT = 255


@dataclass
class Ticket:
    """What is sent: built once from the (redacted) report."""

    fingerprint: str
    title: str
    summary_line: str
    markdown: str
    json_text: str
    text: str  # the plain terminal view, for Jira
    html: str | None
    labels: list[str]
    verdict: dict[str, Any]

    @property
    def fingerprint_label(self) -> str:
        return f"crashscope:{self.fingerprint}"

    def files(self) -> list[tuple[str, bytes, str]]:
        out = [("crashscope-report.json", self.json_text.encode("utf-8"), "application/json"),
               ("crashscope-report.md", self.markdown.encode("utf-8"), "text/markdown")]
        if self.html is not None:
            out.insert(0, ("crashscope-report.html", self.html.encode("utf-8"), "text/html"))
        return out


@dataclass
class Outcome:
    action: str  # created | commented
    url: str | None
    issue: str | None
    attachments: list[str]


def _fence(text: str, lang: str = "") -> str:
    longest = max((len(r) for r in re.findall(r"`+", text)), default=0)
    f = "`" * max(3, longest + 1)
    return f"{f}{lang}\n{text}\n{f}"


def _marker(t: Ticket) -> str:
    return f"<!-- crashscope-fingerprint: {t.fingerprint} -->"


def github_body(t: Ticket, *, comment: bool) -> str:
    head = f"{_marker(t)}\n" + ("**crashscope: the same incident again.**\n\n" if comment else "")
    tail = f"\n\nFingerprint: `{t.fingerprint}` (label `{t.fingerprint_label}`)\n"
    details = f"\n\n<details><summary>report JSON (crashscope-report.json)</summary>\n\n{_fence(t.json_text.rstrip(), 'json')}\n\n</details>"
    body = head + t.markdown.rstrip() + details + tail
    if len(body) <= GITHUB_BODY_LIMIT:
        return body
    note = "\n\n_The JSON report is larger than a GitHub issue allows; it is not included (run `crashscope analyze --format json`)._"
    room = GITHUB_BODY_LIMIT - len(head) - len(tail) - len(note) - 40
    md = t.markdown.rstrip()
    if len(md) > room:
        md = md[:room].rsplit("\n", 1)[0] + "\n\n_(report cut to fit)_"
    return head + md + note + tail


def _headers_json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def github(http: Http, api: str, repo: str, t: Ticket) -> Outcome:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo or ""):
        raise UsageError(f"--repo must be owner/name, got {repo!r}")
    base = f"{api.rstrip('/')}/repos/{repo}"
    r = http.request("GET", f"{base}/issues", what="search the open issues",
                     params={"labels": t.fingerprint_label, "state": "open", "per_page": "10"})
    found = [i for i in (r.json() if r is not None else []) if isinstance(i, dict) and "pull_request" not in i]
    if found:
        n = found[0]["number"]
        c = http.request("POST", f"{base}/issues/{n}/comments", what="comment on the issue",
                         json={"body": github_body(t, comment=True)})
        data = c.json() if c is not None else {}
        return Outcome("commented", data.get("html_url") or found[0].get("html_url"), str(n), [])
    c = http.request("POST", f"{base}/issues", what="create the issue",
                     json={"title": t.title, "body": github_body(t, comment=False), "labels": ["crashscope", t.fingerprint_label, *t.labels]})
    data = c.json() if c is not None else {}
    return Outcome("created", data.get("html_url"), str(data.get("number")), [])


def gitlab(http: Http, api: str, project: str, t: Ticket) -> Outcome:
    if not project:
        raise UsageError("--project (a GitLab project id or group/name path) is required for --to gitlab")
    pid = urllib.parse.quote(str(project), safe="")
    base = f"{api.rstrip('/')}/projects/{pid}"
    r = http.request("GET", f"{base}/issues", what="search the open issues",
                     params={"labels": t.fingerprint_label, "state": "opened", "per_page": "10"})
    found = [i for i in (r.json() if r is not None else []) if isinstance(i, dict)]
    links: list[str] = []
    names: list[str] = []
    for name, content, ctype in t.files():
        u = http.request("POST", f"{base}/uploads", what=f"upload {name}", files={"file": (name, content, ctype)})
        data = u.json() if u is not None else {}
        names.append(name)
        links.append(str(data.get("markdown") or f"[{name}]({data.get('url', '')})"))
    attach = "\n\nAttached: " + " · ".join(links) if links else ""
    tail = f"\n\nFingerprint: `{t.fingerprint}` (label `{t.fingerprint_label}`)\n"
    if found:
        iid, web = found[0]["iid"], found[0].get("web_url")
        n = http.request("POST", f"{base}/issues/{iid}/notes", what="comment on the issue",
                         json={"body": f"{_marker(t)}\n**crashscope: the same incident again.**\n\n{t.markdown.rstrip()}{attach}{tail}"})
        note = n.json() if n is not None else {}
        return Outcome("commented", f"{web}#note_{note['id']}" if web and note.get("id") else web, str(iid), names)
    c = http.request("POST", f"{base}/issues", what="create the issue",
                     json={"title": t.title, "description": f"{_marker(t)}\n{t.markdown.rstrip()}{attach}{tail}",
                           "labels": ",".join(["crashscope", t.fingerprint_label, *t.labels])})
    data = c.json() if c is not None else {}
    return Outcome("created", data.get("web_url"), str(data.get("iid")), names)


def _jira_text(t: Ticket, *, comment: bool) -> str:
    head = ("crashscope: the same incident again.\n\n" if comment else "") + f"{t.summary_line}\n\n"
    tail = f"\n\nFingerprint: {t.fingerprint} (label {t.fingerprint_label}). The full report is attached."
    body = t.text.rstrip().replace("{noformat}", "{ noformat}")
    room = JIRA_TEXT_LIMIT - len(head) - len(tail) - 40
    if len(body) > room:
        body = body[:room].rsplit("\n", 1)[0] + "\n(cut to fit; see the attachment)"
    return head + "{noformat}\n" + body + "\n{noformat}" + tail


def jira(http: Http, api: str, project: str, t: Ticket, issue_type: str) -> Outcome:
    if not project:
        raise UsageError("--project (a Jira project key or id) is required for --to jira")
    base = api.rstrip("/")
    proj = {"id": str(project)} if str(project).isdigit() else {"key": str(project)}
    quoted = str(project) if str(project).isdigit() else '"' + str(project).replace('"', '') + '"'
    jql = f'project = {quoted} AND labels = "{t.fingerprint_label}" AND statusCategory != Done ORDER BY created DESC'
    params = {"jql": jql, "fields": "summary", "maxResults": "1"}
    r = http.request("GET", f"{base}/rest/api/2/search/jql", what="search the open issues", params=params, ok_404=True)
    if r is None:  # Jira Data Center: the classic search
        r = http.request("GET", f"{base}/rest/api/2/search", what="search the open issues", params=params)
    issues = (r.json() or {}).get("issues") or [] if r is not None else []
    if issues:
        key = issues[0]["key"]
        http.request("POST", f"{base}/rest/api/2/issue/{key}/comment", what="comment on the issue",
                     json={"body": _jira_text(t, comment=True)})
        action = "commented"
    else:
        summary = t.title if len(t.title) <= JIRA_SUMMARY_LIMIT else t.title[: JIRA_SUMMARY_LIMIT - 1] + "…"
        labels = [re.sub(r"\s+", "-", x) for x in ["crashscope", t.fingerprint_label, *t.labels]]
        c = http.request("POST", f"{base}/rest/api/2/issue", what="create the issue",
                         json={"fields": {"project": proj, "summary": summary, "description": _jira_text(t, comment=False),
                                          "issuetype": {"name": issue_type}, "labels": labels}})
        key = (c.json() if c is not None else {})["key"]
        action = "created"
    files = [("file", (name, content, ctype)) for name, content, ctype in t.files()]
    http.request("POST", f"{base}/rest/api/2/issue/{key}/attachments", what="attach the report",
                 files=files, headers={"X-Atlassian-Token": "no-check"})
    return Outcome(action, f"{base}/browse/{key}", key, [f[1][0] for f in files])


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def webhook(http: Http, url: str, t: Ticket) -> Outcome:
    if not url or not url.lower().startswith(("http://", "https://")):
        raise UsageError("--url (an http(s) webhook URL) is required for --to webhook")
    text = slack_escape(f"{t.title}\n{t.summary_line}\nfingerprint {t.fingerprint}")
    body = {"text": text, "crashscope": {"fingerprint": t.fingerprint, **t.verdict}}
    http.request("POST", url, what="post to the webhook", content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                 headers={"Content-Type": "application/json"})
    return Outcome("created", None, None, [])
