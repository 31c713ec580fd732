"""A minimal secret filter for reports the epilog writes (always on; the full redaction of
crashscope/redact.py runs first when the configuration asks for ``redact``).

Jobs print their environment (``env``, ``printenv``, a launcher's config dump); a report
quoting such a line must not carry the credential. Masked: the value of any
``NAME=value`` / ``NAME: value`` whose name says token, secret, password, key or
credential; and well-known token shapes wherever they stand (GitHub ``ghp_``/``github_pat_``,
Hugging Face ``hf_``, AWS access key ids ``AKIA...``, Slack ``xox?-``, ``Bearer`` headers,
PEM private keys, URLs with a password).
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "<redacted>"
_NAMED = re.compile(
    r"(?i)\b([A-Z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?|AUTH)[A-Z0-9_.-]*)"
    r"(\s*[=:]\s*)(['\"]?)([^\s'\"]+)"
)
_SHAPES = [
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
]
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)")
# What every pattern above needs somewhere in the text (the same flags: a name's word
# case-insensitively, each shape's fixed part as is): a text without any is left as it is,
# in one pass instead of ten (most of a report's strings are hosts, paths and kinds).
_MAYBE = re.compile(
    r"(?i:TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|Bearer)"
    r"|gh[pousr]_|github_pat_|hf_|AKIA|ASIA|xox[abprs]-|-----BEGIN |sk-|://"
)


def scrub(text: str) -> str:
    if not text or not _MAYBE.search(text):
        return text
    return _scrub_all(text)


def _scrub_all(text: str) -> str:
    out = _NAMED.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", text)
    for p in _SHAPES:
        out = p.sub(MASK, out)
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", out)


def scrub_report(report: Any, *, full: bool = False) -> Any:
    """The report with secrets masked; with ``full`` (config ``redact``) first through the
    project's redactor (crashscope/redact.py: hosts, users, addresses too) where it exists."""
    if full:
        try:
            from crashscope.redact import redact_report

            report = redact_report(report)[0]
        except Exception:  # noqa: BLE001 - absent or broken: the secret filter below still runs
            pass
    # a report repeats its strings (hosts, files, kinds): each distinct one is scrubbed once
    return report.map_strings(functools.lru_cache(maxsize=1 << 16)(scrub))
