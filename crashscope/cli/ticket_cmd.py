"""`crashscope ticket`: open an issue for a report (or comment on the open one with the
same fingerprint) on GitHub, GitLab, Jira or a webhook; `--retry` sends the queue.

Credentials come only from the environment (``GITHUB_TOKEN``, ``GITLAB_TOKEN``,
``JIRA_URL`` + ``JIRA_USER`` + ``JIRA_API_TOKEN``, or the variable ``[ticket] token_env``
names): there is deliberately no option for them. See ``docs/tickets.md``.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from crashscope.errors import CrashscopeError, InputError, UsageError

MAX_REPORT_BYTES = 64 << 20


class Service(str, Enum):
    github = "github"
    gitlab = "gitlab"
    jira = "jira"
    webhook = "webhook"


class OutFormat(str, Enum):
    text = "text"
    json = "json"


def _load_report(path: Path) -> Any:
    from crashscope.report.model import Report

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_REPORT_BYTES + 1)
    except OSError as e:
        raise InputError(f"{path}: cannot read the report: {e.strerror or e}") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise InputError(f"{path}: report larger than 64 MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InputError(f"{path}: not a JSON report (write one with `crashscope analyze DIR --format json -o report.json`)") from None
    if not isinstance(data, dict) or "cause" not in data:
        raise InputError(f"{path}: not a crashscope report (no cause)")
    return Report.from_dict(data)


def _say(line: str) -> None:
    from crashscope.report.safe import escape_controls

    print(f"crashscope: {escape_controls(line, 1000)}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    from crashscope.cli.analyze_cmd import _exit_help

    @app.command(epilog=_exit_help())
    def ticket(
        report: Optional[Path] = typer.Argument(None, help="The report JSON (`crashscope analyze DIR --format json -o report.json`).", show_default=False, metavar="REPORT"),
        to: Optional[Service] = typer.Option(None, "--to", help="github | gitlab | jira | webhook (default: the config's [ticket] to).", show_default=False),
        repo: Optional[str] = typer.Option(None, "--repo", metavar="OWNER/NAME", help="GitHub repository."),
        project: Optional[str] = typer.Option(None, "--project", metavar="KEY|ID", help="Jira project key or id; GitLab project id or group/name."),
        url: Optional[str] = typer.Option(None, "--url", metavar="URL", help="Webhook URL (Slack-compatible: a JSON body with `text`)."),
        api_url: Optional[str] = typer.Option(None, "--api-url", metavar="URL", help="Another API base URL (GitHub Enterprise, self-hosted GitLab, Jira; default JIRA_URL for Jira)."),
        issue_type: str = typer.Option("Task", "--issue-type", metavar="NAME", help="Jira issue type of a new issue."),
        label: Optional[list[str]] = typer.Option(None, "--label", metavar="LABEL", help="Another label for a new issue (repeatable)."),
        redact: bool = typer.Option(True, "--redact/--no-redact", help="Redact hosts, IPs, users, e-mails, home paths and secrets (default: on for tickets)."),
        redact_map: Optional[Path] = typer.Option(None, "--redact-map", metavar="FILE", help="Write the placeholder -> original mapping here (mode 0600; never sent)."),
        reports_dir: Optional[Path] = typer.Option(None, "--reports-dir", metavar="DIR", help="Where the queue lives (<DIR>/ticket-queue/; default: the config's reports_dir)."),
        retry: bool = typer.Option(False, "--retry", help="Send the queued tickets (those queued while the service was down)."),
        config: Optional[Path] = typer.Option(None, "--config", metavar="FILE", help="Configuration file (default: $CRASHSCOPE_CONFIG, /etc/crashscope/config.toml)."),
        timeout: float = typer.Option(20.0, "--timeout", min=1.0, max=600.0, metavar="SECONDS", help="Per-request timeout."),
        retries: int = typer.Option(4, "--retries", min=0, max=10, metavar="N", help="Retries on 429/5xx/unreachable (exponential backoff from 0.5 s, Retry-After honoured) before queueing."),
        out_format: OutFormat = typer.Option(OutFormat.text, "--format", "-f", help="text, or json: {\"action\": \"created\"|\"commented\"|\"queued\", \"url\": ...}."),
    ) -> None:
        """Open an issue for a crash report, or comment on the open one with the same fingerprint.

        \b
        Example:
            export GITHUB_TOKEN=...        # never on the command line
            crashscope ticket report.json --to github --repo org/cluster-incidents
            JIRA_URL=https://site.atlassian.net JIRA_USER=me@org JIRA_API_TOKEN=... \\
              crashscope ticket report.json --to jira --project OPS --format json
            crashscope ticket --retry      # send what was queued while the service was down
        """
        from crashscope.config import load_config
        from crashscope.tickets import TicketSettings, file_ticket, send_queue

        cfg = load_config(config)
        settings = TicketSettings.from_config(
            cfg, to=to.value if to else None, repo=repo, project=project, url=url, api_url=api_url,
            labels=list(label) if label else None, issue_type=issue_type, redact=redact, redact_map=redact_map,
            reports_dir=reports_dir, timeout_s=timeout, retries=retries,
        )
        if retry:
            if report is not None:
                raise UsageError("--retry sends the queue; give no REPORT with it")
            results = send_queue(settings)
            rows: list[dict[str, Any]] = []
            worst = 0
            for path, r in results:
                if isinstance(r, CrashscopeError):
                    worst = max(worst, r.exit_code)
                    _say(f"{path.name}: {r}")
                    rows.append({"action": "failed", "url": None, "file": path.name, "error": str(r)})
                else:
                    if r.action == "queued":
                        _say(f"{path.name}: still queued: {r.error}")
                    rows.append({"action": r.action, "url": r.url, "file": path.name})
            if out_format == OutFormat.json:
                typer.echo(json.dumps({"sent": sum(1 for x in rows if x["action"] in ("created", "commented")),
                                       "queued": sum(1 for x in rows if x["action"] == "queued"), "results": rows}))
            else:
                for x in rows:
                    typer.echo(f"{x['action']}: {x['url'] or x['file']}")
                if not rows:
                    typer.echo("the ticket queue is empty")
            if worst:
                raise typer.Exit(worst)
            return
        if report is None:
            raise UsageError("give a REPORT (the report JSON), or --retry")
        if redact_map is not None and not redact:
            raise UsageError("--redact-map needs redaction; drop --no-redact")
        if not settings.to:
            raise UsageError("--to github|gitlab|jira|webhook is required (or [ticket] to in the config)")
        rep = _load_report(report)
        result = file_ticket(rep, settings)
        if result.action == "queued":
            _say(f"the service is down; the ticket is queued in {result.queued} (send it with `crashscope ticket --retry`): {result.error}")
        if out_format == OutFormat.json:
            typer.echo(json.dumps(result.to_dict()))
        else:
            typer.echo(f"{result.action}: {result.url or result.queued or ''}".rstrip())
