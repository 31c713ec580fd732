"""Redaction: host names, IP addresses, user names, e-mail addresses, home directories and
secrets become stable placeholders (``host-3``, ``ip-2``, ``user-1``, ``email-1``,
``secret-4``), the same value the same placeholder in every string of one report, so a
redacted report still reads ("host-3 rank 17").

How it works: :func:`redact_report` builds a :class:`Redactor` from what the report knows
(the job's nodes, the implicated nodes, every ``node``/``host`` field, the per-host
coverage keys), lets it *learn* from every string first (user names in home paths and
``USER=`` dumps, secret values in ``KEY=value`` dumps, the domain of fully qualified host
names, so a value seen once in context is replaced everywhere, even where it stands alone),
then applies it to every string (and dict key) through the report's string-mapping hook
(:meth:`crashscope.report.model.Report.map_strings`, :func:`crashscope.report.safe.map_strings`).
The mapping (placeholder -> original) is kept in memory and only written where the caller
asks (``--redact-map FILE``, mode 0600); it never goes into a report or a ticket.

Secret formats, from their issuers' documentation:

* AWS access key ids ``AKIA``/``ASIA``... + 16 upper-case alphanumerics, and the 40-character
  secret access key (``aws_secret_access_key`` in ``~/.aws/credentials``,
  ``AWS_SECRET_ACCESS_KEY`` in the environment) -- AWS IAM "Managing access keys";
* GCP service-account key files: ``"private_key": "-----BEGIN PRIVATE KEY-----\\n...``
  (PEM, PKCS#8) and ``"private_key_id"`` -- Google Cloud IAM "Create and delete
  service account keys"; any PEM ``-----BEGIN ... PRIVATE KEY-----`` block;
* GitHub tokens ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36 alphanumerics and
  fine-grained ``github_pat_`` -- GitHub Docs "About authentication to GitHub";
* GitLab personal access tokens ``glpat-`` -- GitLab Docs "Personal access tokens";
* Hugging Face user access tokens ``hf_`` -- Hugging Face Hub docs "User access tokens";
* Weights & Biases API keys: 40 hexadecimal characters in ``WANDB_API_KEY`` or after
  ``wandb login`` -- W&B docs "Environment variables";
* Slack tokens ``xoxb-``/``xoxp-``/``xoxa-``/``xoxr-``/``xoxs-``/``xapp-`` and incoming
  webhook URLs ``https://hooks.slack.com/services/T.../B.../...`` -- Slack API "Token types";
* JSON Web Tokens (three base64url parts, the first two JSON objects, so ``eyJ``) -- RFC 7519;
* ``Authorization: Bearer|Basic|token ...`` headers -- RFC 6750, RFC 7617;
* credentials in URLs ``scheme://user:password@host`` -- RFC 3986 section 3.2.1;
* ``KEY=value`` / ``key: value`` / ``"key": "value"`` / ``--key value`` where the key's name
  says secret, token, password, passwd, credential, auth or key.

What is never changed: numbers, booleans, and the loopback/unspecified addresses
(127.0.0.1, ::1, 0.0.0.0), which carry meaning ("bound to localhost") and name nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import regex

from crashscope.hostlist import compress, expand

# --- secrets by their own shape --------------------------------------------------------

_PEM = regex.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----.*?(?:-----END[A-Z ]*PRIVATE KEY-----|$)", regex.S
)
_TOKEN_SHAPES = regex.compile(
    r"""
    (?<![A-Za-z0-9])(?:
        (?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}      # AWS key id
      | gh[pousr]_[A-Za-z0-9]{30,255}                                           # GitHub
      | github_pat_[A-Za-z0-9_]{22,255}
      | glpat-[A-Za-z0-9_-]{20,}                                                # GitLab
      | hf_[A-Za-z0-9]{30,}                                                     # Hugging Face
      | xox[abposr]-[A-Za-z0-9-]{10,}                                           # Slack
      | xapp-[A-Za-z0-9-]{10,}
      | AIza[0-9A-Za-z_-]{35}                                                   # Google API key
      | sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}                                    # OpenAI/Anthropic style
      | eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}           # JWT
    )(?![A-Za-z0-9])
    """,
    regex.X,
)
_SLACK_HOOK = regex.compile(r"https?://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+")
_AUTH_HEADER = regex.compile(r"(?i)\b(authorization\s*[:=]\s*[\"']?\s*|proxy-authorization\s*[:=]\s*[\"']?\s*)?\b(bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})")
_URL_CREDS = regex.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s:/@\"'<>]+)(?::([^\s@/\"'<>]*))?@")
_WANDB_LOGIN = regex.compile(r"(?i)\bwandb\s+login\s+(?:--\S+\s+)*([0-9a-f]{40})\b")
# A long run of base64 alphabet with upper, lower case and digits: a key body line, a
# secret access key, a bare token. Paths and words break on '.', '_', '-'.
_ENTROPY = regex.compile(r"(?<![A-Za-z0-9+/=])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])[A-Za-z0-9+/]{32,}={0,2}(?![A-Za-z0-9+/=])")

# --- secrets by the name they are given ------------------------------------------------

# A key is secret-bearing when one of its parts (split on _ - . or case) is one of these...
_SECRET_PARTS = frozenset({
    "token", "secret", "secrets", "password", "passwd", "pass", "pwd", "passphrase",
    "key", "apikey", "credential", "credentials", "auth", "cookie", "session", "sas", "signature",
})
# ...or it contains one of these anywhere.
_SECRET_SUBSTRINGS = ("secret", "password", "passwd", "apikey", "api_key", "private_key", "access_key", "credential")
_NOT_SECRET_KEYS = frozenset({"key_id_type", "keyboard", "keys", "monkey", "token_type", "tokens_per_second", "auth_type"})
_NOT_SECRET_VALUES = frozenset({"", "true", "false", "yes", "no", "on", "off", "none", "null", "nil", "unset", "<redacted>", "***", "xxx", "********"})

_KV = regex.compile(
    r"""
    (?P<key>(?<![A-Za-z0-9_.-])--?[A-Za-z][A-Za-z0-9_.-]*|(?<![A-Za-z0-9_.-])[A-Za-z_][A-Za-z0-9_.-]*)
    (?P<q1>["']?)
    (?P<sep>\s*[=:]\s*|\s+(?=\S)(?<=--[A-Za-z0-9_.-]+\s+))
    (?P<value>"[^"\n]*"|'[^'\n]*'|[^\s,;"'&)}\]]+)
    """,
    regex.X,
)

# --- who and where ----------------------------------------------------------------------

_EMAIL = regex.compile(r"(?<![A-Za-z0-9._%+:/-])[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])")
_HOME = regex.compile(r"(?:/home|/Users|/u|/usr/home|/export/home)/([A-Za-z0-9._-]+)|(?i:[A-Z]:\\Users)\\([A-Za-z0-9._-]+)")
_USER_KEYS = frozenset({"user", "username", "user_name", "logname", "sudo_user", "slurm_job_user", "userid", "user_id", "owner", "login", "pbs_o_logname", "lsb_user"})
_USER_KV = regex.compile(r"(?i)(?<![A-Za-z0-9_])(user|username|user_name|logname|sudo_user|slurm_job_user|userid|user_id|pbs_o_logname|lsb_user)\s*[=:]\s*[\"']?([A-Za-z_][A-Za-z0-9._-]{0,31})(?:\(\d+\))?")
_HOST_KV = regex.compile(r"(?i)(?<![A-Za-z0-9_])(hostname|host|batchhost|nodename|slurmd_nodename|slurm_topology_addr|alloc_node|allocnode)\s*[=:]\s*[\"']?([A-Za-z0-9][A-Za-z0-9.-]{1,252})")
# user names that are also ordinary words or system accounts: redacted in their contexts
# (a home path, USER=), never replaced as a bare word elsewhere
_COMMON_USERS = frozenset({
    "root", "user", "users", "admin", "nobody", "ubuntu", "debian", "centos", "ec2-user", "slurm", "daemon",
    "test", "guest", "shared", "public", "home", "local", "data", "scratch", "work", "bin", "lib", "opt", "tmp",
})
_HOSTLIST = regex.compile(r"(?<![A-Za-z0-9.-])([A-Za-z][A-Za-z0-9-]*)\[([0-9,\-\s]+)\]([A-Za-z0-9-]*)")
_IPV4 = regex.compile(r"(?<![0-9.=v-])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![0-9]|\.\d)")
_IPV6_CANDIDATE = regex.compile(r"(?<![A-Za-z0-9:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{0,4}|(?:\d{1,3}\.){3}\d{1,3})(?:%[A-Za-z0-9_.]+)?(?![A-Za-z0-9:])")
_KEEP_IPS = frozenset({"127.0.0.1", "0.0.0.0", "::1", "::", "255.255.255.255"})
# strings that cannot hold anything to redact: ISO stamps, numbers, hex ids
_PLAIN = regex.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?|[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|0x[0-9a-fA-F]+")
_HOST_END = frozenset(["", " ", "\t", ":", "/", ",", ";", ")", ">", "<", "]", '"', "'", "|", "\n"])
_FILE_EXTS = frozenset({"log", "txt", "out", "err", "json", "csv", "gz", "zst", "xz", "bz2", "tar", "md", "html", "yaml", "yml", "toml", "py", "sh", "pt", "bin"})
_HOST_FIELDS = frozenset({"node", "nodes", "host", "hosts", "hostname", "hostnames", "culprit_node", "batch_host", "nodelist"})


@functools.lru_cache(maxsize=4096)
def _key_is_secret(key: str, sep: str = "=") -> bool:
    k = key.lstrip("-").strip("\"'")
    low = k.lower()
    if low in _NOT_SECRET_KEYS:
        return False
    parts = [p.lower() for p in regex.split(r"[_.\-]+|(?<=[a-z])(?=[A-Z])", k) if p]
    if parts and parts[-1] in ("error", "exception", "warning", "errors", "count", "len", "size", "type", "id_type"):
        return False  # KeyError: 'x', token_count: 3
    if any(s in low.replace("-", "_") for s in _SECRET_SUBSTRINGS):
        return True
    if len(parts) == 1 and parts[0] in ("key", "auth", "session", "pass", "signature", "cookie") and "=" not in sep:
        return False  # "key: value" in prose; KEY=value in a dump is still one
    return any(p in _SECRET_PARTS for p in parts)


def _unquote(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v


_NUMBER = regex.compile(r"[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _looks_secret_value(v: str, key: str = "") -> bool:
    if v.lower() in _NOT_SECRET_VALUES or v.startswith(("$", "%(", "<secret-", "secret-")):
        return False
    if _NUMBER.fullmatch(v):
        # a count or a size, unless the key says it is a password or PIN
        return any(w in key.lower() for w in ("pass", "pwd", "secret", "pin"))
    return True


def _alternation(words: list[str], ignore_case: bool = False) -> str:
    """A pattern matching any of ``words`` (sorted longest first), as their alternation
    ``a|b|...`` matches them: where several match at one place, the longest. ASCII words
    (all lower case when ``ignore_case``: then one branch at most matches a character) are
    written as a trie of their characters, each node trying its longer continuations before
    ending: the words that match at one place are prefixes of one another, tried longest
    first as the sorted alternation tries them. 2,048 hosts compile in ~0.08 s instead of
    ~0.12 s and match ~3x faster. Other word lists stay a plain alternation."""
    if not words or not all(w.isascii() and (not ignore_case or w == w.lower()) for w in words) or len(set(words)) != len(words):
        return "|".join(regex.escape(w) for w in words)
    root: dict[str, Any] = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        alts = [regex.escape(ch) + emit(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return emit(root)


@dataclass
class Redactor:
    """Maps sensitive values to placeholders. :meth:`learn` from every string first, then
    :meth:`redact` each; the same value always gets the same placeholder."""

    hosts: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    _maps: dict[str, dict[str, str]] = field(default_factory=dict)
    _secrets: dict[str, str] = field(default_factory=dict)  # value -> placeholder, for replacing everywhere
    _domains: set[str] = field(default_factory=set)
    _host_re: Any = None
    _user_re: Any = None
    _secret_re: Any = None
    _domain_re: Any = None

    def __post_init__(self) -> None:
        for h in sorted(dict.fromkeys(h for h in self.hosts if self._host_ok(h))):
            self.add_host(h)
        for u in self.users:
            self.add_user(u)

    # --- the mapping ----------------------------------------------------------------

    def _placeholder(self, kind: str, value: str) -> str:
        m = self._maps.setdefault(kind, {})
        if value not in m:
            m[value] = f"{kind}-{len(set(m.values())) + 1}"
            if kind in ("host", "user"):
                self._host_re = self._user_re = None
            if kind == "secret":
                self._secret_re = None
        return m[value]

    @property
    def mapping(self) -> dict[str, dict[str, str]]:
        """``{kind: {placeholder: original}}``: what ``--redact-map`` writes."""
        out: dict[str, dict[str, str]] = {}
        for k, m in self._maps.items():
            inv: dict[str, str] = {}
            for v, p in sorted(m.items(), key=lambda kv: len(kv[0])):
                inv[p] = v  # the longest original (a host's FQDN) wins
            if inv:
                out[k] = dict(sorted(inv.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[1])))
        return out

    def counts(self) -> dict[str, int]:
        return {k: len(set(m.values())) for k, m in self._maps.items() if m}

    def write_map(self, path: Path | str) -> None:
        """The mapping as JSON, created with mode 0600 (never readable by others, even
        for a moment); an existing file is replaced."""
        p = os.fspath(path)
        tmp = f"{p}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.mapping, fh, indent=2, ensure_ascii=False)
                fh.write("\n")
            os.chmod(tmp, 0o600)
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    # --- learning -------------------------------------------------------------------

    @staticmethod
    def _host_ok(h: Any) -> bool:
        return isinstance(h, str) and len(h.strip()) >= 2 and h.strip() not in ("?", "unknown", "localhost", "none", "None") and not h.strip().isdigit()

    def add_host(self, h: str) -> None:
        h = h.strip().rstrip(".")
        if not self._host_ok(h):
            return
        try:
            ipaddress.ip_address(h)
            return  # an address, not a name
        except ValueError:
            pass
        low = h.lower()
        if "." in low:
            short, _, domain = low.partition(".")
            labels = domain.split(".")
            if domain and not domain.isdigit():
                # the domain and its parents of two labels or more (login.acme.com is acme's too)
                for i in range(max(1, len(labels) - 1)):
                    self._domains.add(".".join(labels[i:]))
                self._domain_re = None
            if len(short) >= 2:
                # the short name and the fully qualified one are one host
                hosts = self._maps.setdefault("host", {})
                if low not in hosts:
                    hosts[low] = self._placeholder("host", short)
                    self._host_re = None
                return
        self._placeholder("host", low)

    def add_user(self, u: str) -> None:
        u = u.strip()
        if len(u) < 2 or u.lower() in _COMMON_USERS or u.isdigit():
            return
        self._placeholder("user", u)

    def add_secret(self, v: str) -> str:
        p = self._placeholder("secret", v)
        # only values long enough not to be an ordinary word are replaced everywhere
        if len(v) >= 8 and v not in self._secrets:
            self._secrets[v] = p
            self._secret_re = None
        return p

    def learn(self, text: str) -> None:
        """Collect users, hosts and secret values a string shows in context."""
        if not text or _PLAIN.fullmatch(text):
            return
        for m in _HOME.finditer(text):
            self.add_user(m.group(1) or m.group(2) or "")
        for m in _USER_KV.finditer(text):
            self.add_user(m.group(2))
        # only a text with a dot can show a host with a domain; the host pattern alone is
        # compiled here (the others when redacting): a 16,384-rank report learns ~43k
        # strings, and each host learned on the way made every pattern compile again
        if "." in text:
            self._compile_hosts()
        if "." in text and self._host_re is not None:
            # a known short name with a domain (node001.hpc.acme.com): learn the domain, so
            # other hosts in it go too; a file name (node001.log) is not a domain
            for m in self._host_re.finditer(text):
                suffix = m.group(2) or ""
                after = text[m.end():m.end() + 1]
                last = suffix.rsplit(".", 1)[-1]
                if suffix and after in _HOST_END and last.isalpha() and 2 <= len(last) <= 24 and last.lower() not in _FILE_EXTS:
                    self.add_host(m.group(1) + suffix)
        for m in _HOST_KV.finditer(text):
            v = m.group(2)
            if not _IPV4.fullmatch(v) and not v.isdigit() and any(c.isalpha() for c in v):
                self.add_host(v)
        for m in _KV.finditer(text):
            if _key_is_secret(m.group("key"), m.group("sep")):
                v = _unquote(m.group("value"))
                if _looks_secret_value(v, m.group("key")):
                    self.add_secret(v)
        for m in _WANDB_LOGIN.finditer(text):
            self.add_secret(m.group(1))
        for m in _URL_CREDS.finditer(text):
            if m.group(3):
                self.add_secret(m.group(3))
                self.add_user(m.group(2))
            else:
                self.add_secret(m.group(2))

    # --- applying -------------------------------------------------------------------

    def _compile_hosts(self) -> None:
        if self._host_re is None:
            hosts = sorted(self._maps.get("host", {}), key=len, reverse=True)
            self._host_re = (
                regex.compile(r"(?i)(?<![A-Za-z0-9-])(" + _alternation(hosts, True) + r")((?:\.[A-Za-z0-9-]+)*)(?![A-Za-z0-9-])")
                if hosts else None
            )

    def _compile(self) -> None:
        """Each pattern of the values known now (a new host or user resets those two)."""
        self._compile_hosts()
        if self._user_re is None:
            users = sorted(self._maps.get("user", {}), key=len, reverse=True)
            self._user_re = regex.compile(r"(?<![A-Za-z0-9_-])(" + _alternation(users) + r")(?![A-Za-z0-9_-])") if users else None
        if self._secret_re is None:
            vals = sorted(self._secrets, key=len, reverse=True)
            self._secret_re = regex.compile("|".join(regex.escape(v) for v in vals)) if vals else None
        if self._domain_re is None:
            doms = sorted(self._domains, key=len, reverse=True)
            self._domain_re = regex.compile(r"(?i)(?<![A-Za-z0-9-])((?:[A-Za-z0-9-]+\.)*)(" + _alternation(doms, True) + r")(?![A-Za-z0-9-])") if doms else None

    def _secret_sub(self, m: Any) -> str:
        return self.add_secret(m.group(0))

    def redact(self, text: str) -> str:
        if not text or not isinstance(text, str) or _PLAIN.fullmatch(text):
            return text
        self._compile()
        s = text
        # secrets first: a token inside a URL or a KEY=value must not become a host or user
        s = _PEM.sub(self._secret_sub, s)
        s = _SLACK_HOOK.sub(self._secret_sub, s)
        s = _URL_CREDS.sub(self._url_creds, s)
        s = _AUTH_HEADER.sub(lambda m: (m.group(1) or "") + m.group(2) + " " + self.add_secret(m.group(3)), s)
        s = _KV.sub(self._kv, s)
        s = _WANDB_LOGIN.sub(lambda m: m.group(0).replace(m.group(1), self.add_secret(m.group(1))), s)
        if self._secret_re is not None:
            s = self._secret_re.sub(lambda m: self._secrets[m.group(0)], s)
        s = _TOKEN_SHAPES.sub(self._secret_sub, s)
        s = _ENTROPY.sub(self._entropy, s)
        s = _EMAIL.sub(lambda m: self._placeholder("email", m.group(0).lower()), s)
        s = _HOME.sub(self._home, s)
        s = _USER_KV.sub(lambda m: m.group(0).replace(m.group(2), self._placeholder("user", m.group(2)) if m.group(2).lower() not in _COMMON_USERS else m.group(2), 1), s)
        s = _IPV4.sub(self._ip, s)
        s = _IPV6_CANDIDATE.sub(self._ip6, s)
        s = _HOSTLIST.sub(self._hostlist, s)
        self._compile()
        if self._host_re is not None:
            s = self._host_re.sub(self._host, s)
        if self._domain_re is not None:
            s = self._domain_re.sub(self._domain, s)
        if self._user_re is not None:
            s = self._user_re.sub(lambda m: self._maps["user"][m.group(1)], s)
        return s

    def __call__(self, text: str) -> str:
        return self.redact(text)

    def _url_creds(self, m: Any) -> str:
        if m.group(3) is not None:
            user = m.group(2)
            u = self._placeholder("user", user) if user.lower() not in _COMMON_USERS else user
            return f"{m.group(1)}{u}:{self.add_secret(m.group(3))}@"
        return f"{m.group(1)}{self.add_secret(m.group(2))}@"

    def _kv(self, m: Any) -> str:
        if not _key_is_secret(m.group("key"), m.group("sep")):
            return m.group(0)
        raw = m.group("value")
        v = _unquote(raw)
        if not _looks_secret_value(v, m.group("key")):
            return m.group(0)
        q = raw[0] if raw != v else ""
        return f"{m.group('key')}{m.group('q1')}{m.group('sep')}{q}{self.add_secret(v)}{q}"

    def _entropy(self, m: Any) -> str:
        v = m.group(0)
        # a hex digest (commit, checksum) is not a secret; only mixed base64 is
        return v if regex.fullmatch(r"[0-9a-fA-F]+", v) else self.add_secret(v)

    def _home(self, m: Any) -> str:
        user = m.group(1) or m.group(2)
        if user.lower() in _COMMON_USERS or user.startswith(("user-", "<")):
            return m.group(0)
        return m.group(0).replace(user, self._placeholder("user", user))

    def _ip(self, m: Any) -> str:
        v = m.group(0)
        return v if v in _KEEP_IPS else self._placeholder("ip", v)

    def _ip6(self, m: Any) -> str:
        v = m.group(0)
        addr = v.split("%", 1)[0]
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return v
        if ip.is_loopback or ip.is_unspecified:
            return v
        return self._placeholder("ip", str(ip))

    def _hostlist(self, m: Any) -> str:
        names, ok = expand(m.group(0), limit=4096)
        known = self._maps.get("host", {})
        if not ok or len(names) < 1 or not any(n.lower() in known for n in names):
            return m.group(0)
        placeholders = [self._placeholder("host", n.lower()) for n in names]
        return compress(placeholders)

    def _host(self, m: Any) -> str:
        name, suffix = m.group(1).lower(), m.group(2) or ""
        known = self._maps["host"]
        if not suffix:
            return known[name]
        full = (name + suffix).lower()
        if full in known:
            return known[full]
        rest = suffix[1:].lower()
        for d in sorted(self._domains, key=len, reverse=True):
            if rest == d or (rest.startswith(d) and not rest[len(d)].isalnum()):
                return known[name] + suffix[1 + len(d):]  # the domain goes, a file suffix stays
        return known[name] + suffix

    def _domain(self, m: Any) -> str:
        prefix = m.group(1).rstrip(".")
        dom = self._placeholder("domain", m.group(2).lower())
        if prefix:
            return self._placeholder("host", (prefix + "." + m.group(2)).lower())
        return dom


def known_hosts(data: Any) -> list[str]:
    """Every host name a report (as a dict) names in a host field: the job's nodes, the
    implicated nodes, each evidence item's and symptom's node, the per-host coverage keys."""
    found: list[str] = []

    def add(v: Any) -> None:
        if isinstance(v, str):
            names, ok = expand(v, limit=4096) if "[" in v else ([v], True)
            found.extend(n for n in names if n)
        elif isinstance(v, (list, tuple)):
            for x in v:
                add(x)

    def walk(obj: Any, key: str | None = None) -> None:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k == "hosts" and isinstance(v, dict):
                    found.extend(str(h) for h in v)
                if isinstance(k, str) and k.lower() in _HOST_FIELDS:
                    add(v)
                walk(v, k)
        elif isinstance(obj, list):
            for x in obj:
                walk(x, key)

    walk(data)
    return [h for h in dict.fromkeys(found) if Redactor._host_ok(h)]


def _strings(obj: Any, out: list[str]) -> None:
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str):
                out.append(k)
            _strings(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _strings(v, out)


# Report fields whose values are labels from crashscope's own vocabulary, never log data:
# left exactly as they are so the JSON contract (cause, kinds, roles) is unchanged.
_KEEP_FIELDS = ("cause", "schema_version", "role", "kind", "source", "rule", "time_quality", "severity")


def redact_report(report: Any, redactor: Redactor | None = None, *, extra: Iterable[str] = ()) -> tuple[Any, Redactor]:
    """``(redacted copy, redactor)``. ``extra``: more strings to learn from (e.g. the
    views of an earlier report that will be sent along)."""
    from crashscope.report.safe import map_strings

    hosts = known_hosts(report)
    r = redactor or Redactor(hosts=hosts)
    if redactor is not None:
        for h in hosts:
            r.add_host(h)
    strings: dict[str, None] = {}

    def collect(s: str) -> str:
        strings[s] = None
        return s

    map_strings(report, collect, keys=True)
    for s in extra:
        strings[s] = None
    for s in strings:
        r.learn(s)
    keep = _kept_values(report)
    done: dict[str, str] = {}

    def fn(s: str) -> str:
        if s in keep:
            return s
        out = done.get(s)
        if out is None:
            out = done[s] = r.redact(s)
        return out

    # keys too: the per-host coverage table is keyed by host name
    red = map_strings(report, fn, keys=True)
    return red, r


def _kept_values(report: Any) -> set[str]:
    keep: set[str] = {report.cause}
    for e in getattr(report, "evidence", []) or []:
        for f in _KEEP_FIELDS:
            v = getattr(e, f, None)
            if isinstance(v, str):
                keep.add(v)
    for a in getattr(report, "alternatives", []) or []:
        if isinstance(a, dict) and isinstance(a.get("cause"), str):
            keep.add(a["cause"])
    for a in getattr(report, "co_occurring", []) or []:
        cause = a.get("cause") if isinstance(a, dict) else getattr(a, "cause", None)
        if isinstance(cause, str):
            keep.add(cause)
    # the field names of the report itself (map_strings also sees dict keys)
    keep.update(f.name for f in dataclasses.fields(report))
    return keep


def redaction_wanted(flag: bool | None, map_path: Path | None, never_inside: Iterable[Path]) -> bool:
    """Whether ``analyze`` redacts: ``--redact``/``--no-redact``, else the config's ``redact``;
    ``--redact-map`` implies it and may not point into an analysed directory. Checked
    before the analysis."""
    from crashscope.errors import UsageError

    if map_path is not None:
        if flag is False:
            raise UsageError("--redact-map needs redaction; drop --no-redact")
        parent = os.path.realpath(os.path.dirname(os.path.abspath(map_path)) or ".")
        if not os.path.isdir(parent):
            raise UsageError(f"--redact-map: no such directory {os.path.dirname(os.fspath(map_path)) or '.'}")
        for d in never_inside:
            root = os.path.realpath(d)
            if os.path.isdir(root) and os.path.commonpath([root, parent]) == root:
                raise UsageError("--redact-map: the mapping may not be written inside the analysed directory")
        return True
    if flag is not None:
        return flag
    from crashscope.config import load_config_or_defaults

    return bool(load_config_or_defaults()[0].redact)
