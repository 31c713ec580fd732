"""Tickets: open an issue for a crash, or comment on the open one with the same
fingerprint, on GitHub, GitLab, Jira or a chat webhook (``docs/tickets.md``).

The library entry point is :func:`file_ticket` ``(report, settings) -> TicketResult``; the
CLI (``crashscope ticket``) and the Slurm epilog are thin callers. Redaction is on unless
``settings.redact`` is False: the report is redacted once (:func:`crashscope.redact.redact_report`)
and every view sent (Markdown, JSON, HTML when that view exists) is rendered from the
redacted copy. The fingerprint (:attr:`crashscope.report.model.Report.fingerprint`, cause +
culprit) is taken from the report *before* redaction, so the same incident finds the same
issue whatever placeholders a run drew; it goes into a label ``crashscope:<fp>`` (how the
open issue is found) and the body.

Credentials come only from the environment: ``GITHUB_TOKEN``, ``GITLAB_TOKEN``,
``JIRA_URL`` + ``JIRA_USER`` + ``JIRA_API_TOKEN``, or the variable the config's
``[ticket] token_env`` names. They are sent in a header and appear in no message, log,
result or queue file.

When the service cannot be reached (connection refused, timeouts, 429/5xx after the
retries) nothing is lost: the ticket is written to ``<reports_dir>/ticket-queue/`` (a JSON
file, mode 0600, holding the already redacted report, never a credential or a webhook URL)
and :func:`send_queue` (``crashscope ticket --retry``) delivers it later.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from crashscope.errors import CrashscopeError, UsageError
from crashscope.tickets.http import Http, ServiceDown
from crashscope.tickets.services import GITHUB_API, GITLAB_API, Ticket

SERVICES = ("github", "gitlab", "jira", "webhook")
DEFAULT_TOKEN_ENV = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN", "jira": "JIRA_API_TOKEN", "webhook": ""}
QUEUE_DIR = "ticket-queue"
QUEUE_VERSION = 1


@dataclass
class TicketSettings:
    to: str
    repo: str = ""
    project: str = ""
    url: str = ""  # the webhook URL
    api_url: str = ""  # another base URL: a self-hosted instance, a test server
    token_env: str = ""  # the variable that holds the token (default per service)
    labels: list[str] = field(default_factory=list)
    issue_type: str = "Task"  # Jira: Task exists in every Jira Cloud project template
    redact: bool = True
    redact_map: Path | None = None  # where to write the placeholder mapping (mode 0600)
    reports_dir: Path | None = None  # the queue lives under it
    queue: bool = True  # queue the ticket when the service is down
    timeout_s: float = 20.0
    retries: int = 4
    backoff_s: float = 0.5
    env: Mapping[str, str] | None = None  # the environment to read credentials from (tests)
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> TicketSettings:
        """The ``[ticket]`` table of a :class:`crashscope.config.Config`, then ``overrides``
        (None values ignored): what the epilog calls."""
        t = dict(getattr(config, "ticket", {}) or {})
        values: dict[str, Any] = {
            "to": t.get("to", ""), "repo": t.get("repo", ""), "project": str(t.get("project", "") or ""),
            "url": t.get("url", ""), "api_url": t.get("api_url", ""), "token_env": t.get("token_env", ""),
            "labels": list(t.get("labels") or []), "reports_dir": getattr(config, "reports_dir", None),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass
class TicketResult:
    action: str  # created | commented | queued
    url: str | None
    service: str
    fingerprint: str
    issue: str | None = None
    attachments: list[str] = field(default_factory=list)
    queued: str | None = None  # the queue file
    error: str | None = None  # why it was queued
    requests: int = 0
    waits: list[float] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "url": self.url}


# --- what is sent ---------------------------------------------------------------------


def _culprit(report: Any) -> str:
    from crashscope.hostlist import compress

    imp = report.implicated.to_dict()
    nodes = [str(n) for n in imp.get("nodes") or []]
    ranks = [str(r) for r in imp.get("ranks") or []]
    out = []
    if nodes:
        out.append(compress(nodes))
    if ranks:
        out.append("rank " + ",".join(ranks[:8]) + ("…" if len(ranks) > 8 else ""))
    return " ".join(out)


def build_ticket(report: Any, *, fingerprint: str, labels: list[str] | None = None) -> Ticket:
    """The views of ``report`` (already redacted when it should be) as one :class:`Ticket`."""
    from crashscope.report.render import RENDERERS
    from crashscope.report.safe import escape_controls, json_text

    d = report.to_dict()
    d["fingerprint"] = fingerprint
    jtext = json_text(json.dumps(d, indent=2, ensure_ascii=False)) + "\n"
    html = RENDERERS["html"](report) if "html" in RENDERERS else None
    culprit = _culprit(report)
    job = (report.job or {}).get("id")
    title = escape_controls(f"crashscope: {report.cause}" + (f" on {culprit}" if culprit else "") + (f" (job {job})" if job else ""), 240)
    summary = escape_controls(report.summary or f"{report.cause} (confidence {report.confidence:.2f})", 1000)
    verdict = {"cause": report.cause, "confidence": report.confidence, "culprit": culprit, "job": job, "summary": summary}
    return Ticket(
        fingerprint=fingerprint, title=title, summary_line=summary,
        markdown=RENDERERS["markdown"](report), json_text=jtext,
        text=RENDERERS["terminal"](report, width=100, color=False, full=True),
        html=html, labels=list(labels or []), verdict=verdict,
    )


def prepare(report: Any, settings: TicketSettings) -> tuple[Any, str, dict[str, int]]:
    """``(report to send, fingerprint, redaction counts)``; writes the redaction map when asked."""
    fp = report.fingerprint
    if not settings.redact:
        return report, fp, {}
    from crashscope.redact import redact_report

    red, redactor = redact_report(report)
    if settings.redact_map is not None:
        redactor.write_map(settings.redact_map)
    return red, fp, redactor.counts()


# --- sending --------------------------------------------------------------------------


def _env(settings: TicketSettings) -> Mapping[str, str]:
    return settings.env if settings.env is not None else os.environ


def _need(env: Mapping[str, str], name: str, service: str) -> str:
    v = env.get(name, "")
    if not v:
        raise UsageError(f"--to {service}: no credentials: set the environment variable {name} (credentials are never taken on the command line)")
    return v


def _http_for(settings: TicketSettings) -> tuple[Http, str]:
    """The client for the service (with its auth headers) and its API base URL."""
    env = _env(settings)
    to = settings.to
    token_env = settings.token_env or DEFAULT_TOKEN_ENV.get(to, "")
    common: dict[str, Any] = {"timeout_s": settings.timeout_s, "retries": settings.retries, "backoff_s": settings.backoff_s, "sleep": settings.sleep}
    if to == "github":
        token = _need(env, token_env, to)
        return Http("GitHub", headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                                      "X-GitHub-Api-Version": "2022-11-28"}, **common), settings.api_url or GITHUB_API
    if to == "gitlab":
        token = _need(env, token_env, to)
        return Http("GitLab", headers={"PRIVATE-TOKEN": token}, **common), settings.api_url or GITLAB_API
    if to == "jira":
        import httpx

        base = settings.api_url or env.get("JIRA_URL", "")
        if not base:
            raise UsageError("--to jira: set JIRA_URL (https://your-site.atlassian.net) or pass --api-url")
        user = _need(env, "JIRA_USER", to)
        token = _need(env, token_env, to)
        return Http("Jira", headers={"Accept": "application/json"}, auth=httpx.BasicAuth(user, token), **common), base
    if to == "webhook":
        headers = {}
        if settings.token_env:
            headers["Authorization"] = f"Bearer {_need(env, settings.token_env, to)}"
        return Http("webhook", headers=headers, **common), settings.url
    raise UsageError(f"--to must be one of {', '.join(SERVICES)}, got {to!r}")


def _check(settings: TicketSettings) -> None:
    if settings.to not in SERVICES:
        raise UsageError(f"--to must be one of {', '.join(SERVICES)}, got {settings.to!r}")
    if settings.to == "github" and not settings.repo:
        raise UsageError("--repo owner/name is required for --to github")
    if settings.to in ("gitlab", "jira") and not settings.project:
        raise UsageError(f"--project is required for --to {settings.to}")
    if settings.to == "webhook" and not settings.url:
        raise UsageError("--url is required for --to webhook")


def send(ticket: Ticket, settings: TicketSettings) -> TicketResult:
    """Deliver ``ticket`` now. Raises :class:`ServiceDown` when the service is unreachable,
    :class:`crashscope.errors.CrashscopeError` subclasses on refusals."""
    from crashscope.tickets import services

    _check(settings)
    http, api = _http_for(settings)
    with http:
        try:
            if settings.to == "github":
                out = services.github(http, api, settings.repo, ticket)
            elif settings.to == "gitlab":
                out = services.gitlab(http, api, settings.project, ticket)
            elif settings.to == "jira":
                out = services.jira(http, api, settings.project, ticket, settings.issue_type)
            else:
                out = services.webhook(http, api, ticket)
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CrashscopeError):
                raise
            from crashscope.errors import TicketRejected

            raise TicketRejected(f"{http.where}: an answer without the expected fields ({type(e).__name__})") from None
    return TicketResult(out.action, out.url, settings.to, ticket.fingerprint, issue=out.issue, attachments=out.attachments,
                        requests=http.requests, waits=list(http.waits))


def file_ticket(report: Any, settings: TicketSettings | Any) -> TicketResult:
    """Open (or comment on) the ticket for ``report``; queue it when the service is down.

    Raises :class:`crashscope.errors.UsageError` for missing options or credentials,
    :class:`~crashscope.errors.TicketAuthError` (401/403), :class:`~crashscope.errors.TicketNotFound`
    (404), :class:`~crashscope.errors.TicketRejected` (other 4xx).

    ``settings`` may also be a :class:`crashscope.config.Config` (the epilog's call): its
    ``[ticket]`` table then applies, with short timeouts and one retry, so a service that is
    down queues the ticket well within the epilog's budget."""
    if not isinstance(settings, TicketSettings):
        budget = float(getattr(settings, "budget_s", 20.0) or 20.0)
        settings = TicketSettings.from_config(settings, timeout_s=max(1.0, min(10.0, budget / 4)), retries=1)
    _check(settings)
    _http_for(settings)  # credentials present? (fails before any work)
    red, fp, counts = prepare(report, settings)
    ticket = build_ticket(red, fingerprint=fp, labels=settings.labels)
    try:
        result = send(ticket, settings)
    except ServiceDown as e:
        if not settings.queue:
            raise CrashscopeError(str(e)) from None
        path = enqueue(red, fp, settings, reason=str(e))
        result = TicketResult("queued", None, settings.to, fp, queued=str(path), error=str(e))
    result.redactions = counts
    return result


# --- the queue ------------------------------------------------------------------------


def queue_dir(reports_dir: Path | str | None) -> Path:
    if reports_dir is None:
        from crashscope.config import Config

        reports_dir = Config().reports_dir
    return Path(reports_dir) / QUEUE_DIR


def _write_private(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)


def enqueue(report: Any, fingerprint: str, settings: TicketSettings, *, reason: str = "", attempts: int = 1) -> Path:
    """Write the ticket to the queue. The webhook URL and every credential stay out: they are
    read again (``--url``, the config, the environment) when the queue is sent."""
    d = queue_dir(settings.reports_dir)
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise CrashscopeError(f"the service is down and the ticket cannot be queued in {d}: {e.strerror or e}") from None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = d / f"{stamp}-{settings.to}-{fingerprint}-{os.getpid()}.json"
    entry = {
        "version": QUEUE_VERSION, "queued_at": stamp, "to": settings.to, "repo": settings.repo,
        "project": settings.project, "api_url": settings.api_url if settings.to != "webhook" else "",
        "token_env": settings.token_env, "labels": settings.labels, "issue_type": settings.issue_type,
        "fingerprint": fingerprint, "redacted": settings.redact, "attempts": attempts, "last_error": reason,
        "report": report.to_dict(),
    }
    _write_private(path, entry)
    return path


def queued(reports_dir: Path | str | None) -> list[Path]:
    d = queue_dir(reports_dir)
    return sorted(p for p in d.glob("*.json") if p.is_file()) if d.is_dir() else []


def send_queue(settings: TicketSettings) -> list[tuple[Path, TicketResult | CrashscopeError]]:
    """Send every queued ticket (oldest first). Delivered ones leave the queue; those whose
    service is still down stay (their attempt count goes up); a refusal (401/403/404/4xx)
    is reported and the file stays for a person to look at. ``settings`` supplies what the
    queue does not hold: the webhook URL, the environment, timeouts."""
    from crashscope.report.model import Report

    out: list[tuple[Path, TicketResult | CrashscopeError]] = []
    for path in queued(settings.reports_dir):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            report = Report.from_dict(entry["report"])
            fp = str(entry["fingerprint"])
            s = replace(settings, to=entry["to"], repo=entry.get("repo", ""), project=entry.get("project", ""),
                        api_url=settings.api_url or entry.get("api_url", ""), token_env=settings.token_env or entry.get("token_env", ""),
                        labels=list(entry.get("labels") or []), issue_type=entry.get("issue_type") or settings.issue_type,
                        url=settings.url if entry["to"] == "webhook" else "")
        except (OSError, ValueError, KeyError, TypeError) as e:
            out.append((path, CrashscopeError(f"{path.name}: not a readable queue entry ({type(e).__name__})")))
            continue
        try:
            ticket = build_ticket(report, fingerprint=fp, labels=s.labels)
            result = send(ticket, s)
        except ServiceDown as e:
            entry["attempts"] = int(entry.get("attempts", 1)) + 1
            entry["last_error"] = str(e)
            _write_private(path, entry)
            out.append((path, TicketResult("queued", None, s.to, fp, queued=str(path), error=str(e))))
            continue
        except CrashscopeError as e:
            out.append((path, e))
            continue
        path.unlink()
        out.append((path, result))
    return out
