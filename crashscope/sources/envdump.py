"""Environment dumps a job left behind: ``env`` / ``printenv`` output, ``export -p`` /
``declare -x`` listings, and such lines inside a job's output (an sbatch script that ran
``env | grep NCCL`` before ``srun``), per rank.

Formats (coreutils ``env``/``printenv`` print ``NAME=value`` one per line, unquoted;
bash's ``export -p`` and ``declare -x`` print ``declare -x NAME="value"`` with the value
double-quoted and ``"$\\`` escaped; dash/zsh ``export NAME='value'``; ``srun --label``
puts ``12: `` in front)::

    NCCL_IB_TIMEOUT=22
    NCCL_SOCKET_IFNAME=ib0
    declare -x NCCL_IB_GID_INDEX="3"
    export TORCH_NCCL_ASYNC_ERROR_HANDLING='1'
    3: SLURM_PROCID=3

Only the keys that say how the job's communication, GPUs and scheduler were set up are
kept: ``NCCL_*``, ``TORCH_*``, ``TORCHELASTIC_*``, ``PYTORCH_*``, ``CUDA_*``, ``NVIDIA_*``,
``SLURM_*``/``SLURMD_*``, ``GLOO_*``, ``UCX_*``, ``FI_*`` (libfabric/EFA), ``OMPI_*``,
``MELLANOX_*`` and torchrun's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``GROUP_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``. A key that looks like a secret
(token, password, key, credential, JWT: Slurm's ``SLURM_JWT`` is one) is dropped with its
value at parse time, and so is a value shaped like a known token (``ghp_``, ``hf_``,
``AKIA``, ``xox``, a JWT): no event, no attrs and no message ever holds them.

Events: net_config, one per kept key, attrs ``transport`` "env", ``setting`` (the key),
``value`` (unquoted), ``origin`` "envdump" — the same shape as NCCL's own
``NCCL_IB_TIMEOUT set by environment to 22.`` lines (``sources/nccl.py``), so the
NCCL-environment analysis reads both alike. Rank: the dump's own ``RANK`` (torchrun sets
it per worker), else ``SLURM_PROCID`` where no torchrun key says one task runs many ranks,
else the file name
(``rank3.env``); host: the dump's ``SLURMD_NODENAME``, else the file's host hint. A dump is
the run of env lines of one file (of one ``srun --label`` task) up to a key seen twice or a
gap of ``BLOCK_GAP`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import regex

from crashscope.schema import Kind
from crashscope.sources.base import LineSource, ParseContext, feed_guarded, split_prefix
from crashscope.sources.base import lazy_compile

KEPT_PREFIXES = ("NCCL", "TORCH", "TORCHELASTIC", "PYTORCH", "CUDA", "NVIDIA", "SLURM", "SLURMD", "GLOO", "UCX",
                 "FI", "OMPI", "MELLANOX")
KEPT_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# Rust-regex and Python-regex compatible; anchored, so it costs next to nothing per line.
PREFILTER = (
    r"^(?:\s*\d{1,6}: )?(?:declare -x |export )?"
    r"(?:(?:NCCL|TORCH|TORCHELASTIC|PYTORCH|CUDA|NVIDIA|SLURM|SLURMD|GLOO|UCX|FI|OMPI|MELLANOX)_[A-Za-z0-9_]*"
    r"|RANK|LOCAL_RANK|WORLD_SIZE|GROUP_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT)="
)

_LINE = lazy_compile(
    r"""^(?:declare\ -x\ |export\ )?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=
        (?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'|(?P<raw>.*))\s*$""",
    regex.VERBOSE,
)
_ANY_ENV = lazy_compile(r"^(?:\s*\d{1,6}: )?(?:declare -x |export )?[A-Za-z_][A-Za-z0-9_]*=")
_SECRET_KEY = lazy_compile(
    r"(?i)TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|JWT|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE|CERT|APIKEY|API_KEY"
    r"|ACCESS_KEY|(?:^|_)KEY(?:_|$)|(?:^|_)PWD$"
)
_SECRET_VALUE = lazy_compile(
    r"^(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|xox[abprs]-"
    r"|sk-[A-Za-z0-9_-]{20,}|glpat-|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.)"
)
MAX_VALUE_CHARS = 512
BLOCK_GAP = 400  # file lines between two env lines of one dump (unkept keys sit between)


def is_secret(key: str, value: str) -> bool:
    """A key or value no report may hold."""
    return bool(_SECRET_KEY.search(key) or _SECRET_VALUE.search(value.strip()))


def kept(key: str) -> bool:
    return key in KEPT_NAMES or key.split("_", 1)[0] in KEPT_PREFIXES and "_" in key


def _unquote_dq(s: str) -> str:
    return regex.sub(r"\\(.)", r"\1", s)


@dataclass
class _Dump:
    rows: list[tuple[int, str, str, int | None]] = field(default_factory=list)  # line, key, value, srun task
    keys: set[str] = field(default_factory=set)
    last: int = 0
    dropped: int = 0


class EnvdumpSource(LineSource):
    name = "envdump"
    description = "environment dumps (env, printenv, export -p / declare -x): NCCL_*, TORCH_*, CUDA_*, SLURM_* settings per rank; secrets dropped"
    filename_hints = ("env", "env.*", "env-*", "env_*", "*.env", "printenv*", "environ*", "*environment*")
    prefilter = PREFILTER

    def sniff(self, head: str, name: str) -> float:
        lines = [ln for ln in head.splitlines()[:2000] if ln.strip()]
        if len(lines) < 3:
            return 0.0
        shaped = sum(1 for ln in lines if _ANY_ENV.match(ln))
        mine = sum(1 for ln in lines if regex.match(PREFILTER, ln))
        if shaped >= 0.7 * len(lines) and mine >= 2:
            return 0.85
        return 0.0

    def parse_lines(self, lines: Sequence[tuple[int, str]], ctx: ParseContext) -> None:
        dumps: list[_Dump] = []
        open_: dict[int | None, _Dump] = {}  # per srun task: interleaved tasks' dumps stay apart

        def on_line(n: int, raw: str) -> None:
            pre, text = split_prefix(raw)
            cur = open_.setdefault(pre.task, _Dump())
            m = _LINE.match(text)
            if m is None:
                return
            key = m.group("key")
            if text.startswith("export ") and m.group("sq") is None and "$" in (m.group("dq") or m.group("raw") or ""):
                return  # a job script's `export X=$((...))`: not a value in force (dumps print it expanded)
            value = m.group("dq")
            value = _unquote_dq(value) if value is not None else (m.group("sq") if m.group("sq") is not None else m.group("raw"))
            if cur.rows and (key in cur.keys or n - cur.last > BLOCK_GAP):
                dumps.append(cur)
                cur = open_[pre.task] = _Dump()
            cur.last = n
            if not kept(key):
                return
            if is_secret(key, value):
                cur.dropped += 1  # neither the key nor its value goes any further
                cur.keys.add(key)
                return
            cur.keys.add(key)
            cur.rows.append((n, key, value[:MAX_VALUE_CHARS], pre.task))

        feed_guarded(ctx, lines, on_line)
        dumps.extend(open_.values())
        dumps.sort(key=lambda d: d.rows[0][0] if d.rows else 0)
        for d in dumps:
            self._emit(d, ctx)

    @staticmethod
    def _emit(d: _Dump, ctx: ParseContext) -> None:
        if not d.rows:
            return
        env = {k: v for _, k, v, _ in d.rows}
        rank = _int(env.get("RANK"))
        if rank is None and not any(k.startswith("TORCHELASTIC_") or k == "LOCAL_RANK" for k in env):
            rank = _int(env.get("SLURM_PROCID"))  # one task per rank (srun without torchrun)
        host = env.get("SLURMD_NODENAME")
        for n, key, value, task in d.rows:
            attrs: dict[str, Any] = {"transport": "env", "setting": key, "value": value, "origin": "envdump"}
            if task is not None:
                attrs["srun_task"] = task
            if d.dropped:
                attrs["secrets_dropped"] = d.dropped
            ctx.emit(Kind.NET_CONFIG, n, f"{key}={value}", host=host, rank=rank, attrs=attrs)


def _int(s: str | None) -> int | None:
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None


SOURCE = EnvdumpSource()
