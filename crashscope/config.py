"""One configuration for every entry point: the CLI, the Slurm epilog, tickets, the fleet history.

Looked up in this order: ``--config FILE``, ``$CRASHSCOPE_CONFIG``, ``/etc/crashscope/config.toml``;
no file means the defaults below. The file is TOML with these top-level keys and a
``[ticket]`` table::

    reports_dir = "/var/lib/crashscope/reports"   # <reports_dir>/<jobid>/report.{json,md,html}
    spool_dir = "/var/spool/crashscope"          # per-job shards from each node's epilog
    budget_s = 20                                  # hard wall-clock budget of one epilog run
    on_success = false                             # write a report for a job that succeeded
    copy_to_workdir = false                        # also write the reports into the job's working dir
    redact = false                                 # redact every report (tickets always redact)
    rules = ["/etc/crashscope/rules"]              # a site's own rules, on top of the shipped ones
    fleet_url = ""                                 # "" = SQLite in reports_dir; or postgresql://...
    tz = ""                                        # zone of the cluster's local-time stamps
    log_dirs = []                                  # the epilog's job log folders: %j %u %x %w; with %n read per node

    [ticket]
    to = "github"          # github | gitlab | jira | webhook ("" = no tickets)
    repo = "org/cluster-incidents"
    project = ""
    url = ""
    api_url = ""
    token_env = ""         # name of the environment variable that holds the token

Unknown keys are an error (a typo must not silently disable a setting); the epilog, which
must never fail, catches it and runs on the defaults with a warning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from crashscope.errors import UsageError

import tomllib

SYSTEM_CONFIG = Path("/etc/crashscope/config.toml")
ENV_VAR = "CRASHSCOPE_CONFIG"
MAX_CONFIG_BYTES = 1 << 20
TICKET_KEYS = frozenset({"to", "repo", "project", "url", "api_url", "token_env", "labels", "enabled"})


class ConfigError(UsageError):
    """The configuration file cannot be read or has a bad key or value."""


@dataclass(frozen=True)
class Config:
    reports_dir: Path = Path("/var/lib/crashscope/reports")
    spool_dir: Path = Path("/var/spool/crashscope")
    budget_s: float = 20.0
    on_success: bool = False
    copy_to_workdir: bool = False
    redact: bool = False
    rules: tuple[Path, ...] = ()
    fleet_url: str = ""
    tz: str = ""
    log_dirs: tuple[str, ...] = ()
    ticket: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None  # the file these values came from (None: defaults)

    def with_overrides(self, **values: Any) -> Config:
        """A copy with the given (non-None) values replaced, e.g. from command-line options."""
        from dataclasses import replace

        return replace(self, **{k: v for k, v in values.items() if v is not None})


_TYPES: dict[str, Any] = {
    "reports_dir": str, "spool_dir": str, "budget_s": (int, float), "on_success": bool,
    "copy_to_workdir": bool, "redact": bool, "rules": list, "fleet_url": str, "tz": str,
    "log_dirs": list,
    "ticket": dict,
}


def config_path(explicit: Path | str | None = None) -> Path | None:
    """The file that applies: ``explicit``, else ``$CRASHSCOPE_CONFIG``, else the system file
    when it exists, else None."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return SYSTEM_CONFIG if SYSTEM_CONFIG.is_file() else None


def parse_config(text: str, origin: Path | None = None) -> Config:
    where = str(origin) if origin else "config"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: not valid TOML: {e}") from None
    known = {f.name for f in fields(Config)} - {"source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    value: Any
    for key, value in data.items():
        want = _TYPES[key]
        # bool is an int in Python; a number is never a flag and a flag never a number
        if isinstance(value, bool) != (want is bool) or not isinstance(value, want):
            raise ConfigError(f"{where}: {key} has the wrong type ({type(value).__name__})")
        if key in ("reports_dir", "spool_dir"):
            value = Path(value)
        elif key == "budget_s":
            if not 0 < value <= 3600:
                raise ConfigError(f"{where}: budget_s must be between 0 and 3600 seconds")
            value = float(value)
        elif key == "log_dirs":
            if not all(isinstance(p, str) for p in value):
                raise ConfigError(f"{where}: log_dirs must be a list of folder patterns")
            value = tuple(value)
        elif key == "rules":
            if not all(isinstance(p, str) for p in value):
                raise ConfigError(f"{where}: rules must be a list of folder paths")
            value = tuple(Path(p) for p in value)
        elif key == "ticket":
            for secret in ("token", "password", "api_token"):
                if secret in value:
                    raise ConfigError(f"{where}: put credentials in the environment, not the config")
            bad = sorted(set(value) - TICKET_KEYS)
            if bad:
                raise ConfigError(f"{where}: unknown [ticket] key(s) {', '.join(bad)}; known: {', '.join(sorted(TICKET_KEYS))}")
        values[key] = value
    return Config(source=origin, **values)


def load_config(explicit: Path | str | None = None) -> Config:
    """The configuration in force. Raises :class:`ConfigError` on a bad file; an explicitly
    named file that does not exist is an error too, a missing system file is not."""
    path = config_path(explicit)
    if path is None:
        return Config()
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the configuration: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: configuration larger than 1 MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: configuration is not UTF-8") from None
    return parse_config(text, path)


def load_config_or_defaults(explicit: Path | str | None = None) -> tuple[Config, list[str]]:
    """For callers that must never fail (the epilog): the config, or the defaults and why."""
    try:
        return load_config(explicit), []
    except ConfigError as e:
        return Config(), [f"configuration ignored, defaults used: {e}"]
