"""One HTTP client for every ticket service: timeouts, retries with exponential backoff on
429 and 5xx (honouring ``Retry-After``, RFC 9110 section 10.2.3: seconds or an HTTP date)
and on connection failures, and errors that name the status but never a credential.

Outcomes:

* 2xx: the response;
* 401/403: :class:`crashscope.errors.TicketAuthError` (exit 5), 404:
  :class:`~crashscope.errors.TicketNotFound` (exit 6), any other 4xx:
  :class:`~crashscope.errors.TicketRejected` (exit 7) -- not retried, not queued;
* still 429/5xx or unreachable after the retries: :class:`ServiceDown`, which
  :func:`crashscope.tickets.file_ticket` turns into a queued ticket.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from crashscope import __version__
from crashscope.errors import TicketAuthError, TicketNotFound, TicketRejected
from crashscope.report.safe import escape_controls

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_WAIT_S = 60.0


class ServiceDown(Exception):
    """The service did not answer usefully after every retry (the ticket can be queued)."""


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    if not value:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


def _server_message(resp: httpx.Response) -> str:
    """The service's own error text (GitHub/GitLab ``message``, Jira ``errorMessages`` /
    ``errors``), escaped and cut; the body never holds our credentials."""
    try:
        data = resp.json()
    except Exception:
        return escape_controls(resp.text, 200)
    parts: list[str] = []
    if isinstance(data, dict):
        for k in ("message", "error", "error_description"):
            if isinstance(data.get(k), str):
                parts.append(data[k])
        if isinstance(data.get("errorMessages"), list):
            parts.extend(str(x) for x in data["errorMessages"])
        if isinstance(data.get("errors"), dict):
            parts.extend(f"{k}: {v}" for k, v in data["errors"].items())
    return escape_controls("; ".join(parts) or resp.text, 200)


@dataclass
class Http:
    """Requests to one service. ``where`` names it in messages (never with a token)."""

    where: str
    headers: dict[str, str] = field(default_factory=dict)
    auth: Any = None
    timeout_s: float = 20.0
    retries: int = 4
    backoff_s: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    waits: list[float] = field(default_factory=list)  # every wait, for the caller's log
    requests: int = 0
    _client: httpx.Client | None = None

    def __enter__(self) -> Http:
        self._client = httpx.Client(
            headers={"User-Agent": f"crashscope/{__version__}", **self.headers},
            auth=self.auth,
            timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            follow_redirects=False,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def request(self, method: str, url: str, *, what: str, ok_404: bool = False, **kw: Any) -> httpx.Response | None:
        """``what`` says what the request does ("create the issue"); ``ok_404``: a 404 is an
        answer (None), not an error."""
        assert self._client is not None
        last = ""
        for attempt in range(self.retries + 1):
            wait: float | None = None
            try:
                self.requests += 1
                resp = self._client.request(method, url, **kw)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}"
            else:
                if resp.status_code < 300:
                    return resp
                if resp.status_code in RETRY_STATUS:
                    last = f"HTTP {resp.status_code}"
                    wait = retry_after_s(resp.headers.get("Retry-After"))
                elif resp.status_code in (401, 403):
                    raise TicketAuthError(f"{self.where}: HTTP {resp.status_code} to {what}: the credentials were refused ({_server_message(resp)}); check the token and its scopes")
                elif resp.status_code == 404:
                    if ok_404:
                        return None
                    raise TicketNotFound(f"{self.where}: HTTP 404 to {what}: not found ({_server_message(resp)}); check --repo/--project/--api-url (a token without access also gets 404)")
                else:
                    raise TicketRejected(f"{self.where}: HTTP {resp.status_code} to {what}: {_server_message(resp)}")
            if attempt == self.retries:
                break
            backoff = self.backoff_s * (2 ** attempt)
            delay = min(MAX_WAIT_S, max(backoff, wait) if wait is not None else backoff)
            self.waits.append(delay)
            self.sleep(delay)
        raise ServiceDown(f"{self.where}: could not {what} after {self.retries + 1} attempts ({last})")
