"""The fleet history: every report's job, cause and culprits in one database, so a report can
say when its culprit failed before and ``crashscope fleet`` can list the repeat offenders.

One schema, one code path, two engines (SQLAlchemy Core):

* SQLite at ``<reports_dir>/fleet.sqlite`` (the default), WAL journal on a local file system
  and the rollback journal on a network one (SQLite's WAL needs shared memory between the
  writers, "WAL does not work over a network filesystem": https://www.sqlite.org/wal.html),
  a busy timeout, and ``BEGIN IMMEDIATE`` for writes so two writers queue on the lock
  instead of one failing with "database is locked" half-way (https://www.sqlite.org/lang_transaction.html;
  the pysqlite transaction recipe of the SQLAlchemy 2.0 SQLite dialect docs);
* PostgreSQL from ``fleet_url = "postgresql://user@host/db"`` (driver psycopg 3; a password
  belongs in ``PGPASSWORD`` or ``~/.pgpass``, never in the config), with
  ``INSERT ... ON CONFLICT DO UPDATE`` for the job row, which serialises two writers of one job.

Tables (``meta`` holds ``schema_version``; a newer database than this code is refused, an
older one is migrated by :data:`MIGRATIONS`):

* ``jobs``: (cluster, job_id) primary key, user_name, end_time (UTC; the report's
  ``job.end_time``, else the epilog's ``job.slurm.end``, else the first failure), cause, confidence,
  fingerprint (:attr:`crashscope.report.model.Report.fingerprint`), report_path, nodes,
  recorded_at. Recording a job again replaces its rows (idempotent per job id).
* ``implicated``: one row per culprit of a job: kind (node | gpu | link | rank), key, label
  (how a person names it), node, cause, xid, end_time (copied from the job, for the window
  queries). Keys: a node by name; a GPU by serial (``serial:...``) or UUID when the report
  has them, else ``node/PCI id``, else ``node:index``; a link as a sorted node pair
  (``node001<->node002``) or the node's port/HCA (``node002/ibp23s0``, ``node002/mlx5_0:1``);
  a rank as ``rank N`` (recorded, never an offender: rank numbers change between jobs).

Links come from the report's deciding evidence, read with the sources' own patterns for the
real formats (mlx5 netdev/port-module/health lines of ``crashscope.sources.kernel``, from
``shared/reference/kernel-and-xid.md``; NCCL NET/IB completion, async event and verbs WARNs
and NET/Socket peer errors of ``crashscope.sources.nccl``, from NVIDIA/nccl
``src/transport/net_ib.cc`` and ``src/misc/socket.cc``); the Xid number from the NVRM
``Xid (PCI:...): N`` line of the GPU's evidence.

Only infrastructure causes (:data:`INFRA_CAUSES`) count against a node, GPU or link: an OOM
or a Python exception on node017 is recorded with its culprit but is not node017's fault.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator

from crashscope.errors import CrashscopeError

SCHEMA_VERSION = 1
DB_FILE = "fleet.sqlite"
# A report's history looks this far back; advice says "drain" at DRAIN_JOBS jobs in DRAIN_DAYS.
HISTORY_DAYS = 30
DRAIN_JOBS = 3
DRAIN_DAYS = 7
HISTORY_JOBS_SHOWN = 20
BUSY_TIMEOUT_S = 30.0
INFRA_CAUSES = frozenset({"gpu_hardware", "gpu_throttle", "fabric_timeout", "node_failure", "storage_stall", "driver_drift"})
CULPRIT_KINDS = ("node", "gpu", "link")
# What counts against each kind of culprit: a fabric failure seen by rank 4 is not its GPU's fault.
KIND_CAUSES = {"node": INFRA_CAUSES, "gpu": frozenset({"gpu_hardware", "gpu_throttle"}), "link": frozenset({"fabric_timeout"})}
CAUSE_WORDS = {
    "gpu_hardware": "GPU fault", "gpu_throttle": "GPU slowdown", "fabric_timeout": "fabric failure",
    "node_failure": "node failure", "storage_stall": "storage stall", "driver_drift": "driver drift",
}
ACTION = {"node": "drain", "gpu": "drain", "link": "take the link out of service"}
NETWORK_FS = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "ceph", "beegfs", "glusterfs", "9p", "afs", "wekafs"})
# Column widths: values from logs are cut to these (PostgreSQL enforces VARCHAR(n)).
ID_LEN, NAME_LEN, KEY_LEN, CAUSE_LEN = 128, 256, 512, 64


class FleetError(CrashscopeError):
    """The fleet history cannot be opened, read or written (one line, exit 2)."""


# --- schema -------------------------------------------------------------------------------

def _tables() -> Any:
    from sqlalchemy import Column, DateTime, Float, ForeignKeyConstraint, Index, Integer, MetaData, String, Table, Text

    md = MetaData()
    meta = Table("meta", md, Column("key", String(64), primary_key=True), Column("value", String(256), nullable=False))
    jobs = Table(
        "jobs", md,
        Column("cluster", String(ID_LEN), primary_key=True),
        Column("job_id", String(ID_LEN), primary_key=True),
        Column("user_name", String(ID_LEN)),
        Column("end_time", DateTime, nullable=False, index=True),
        Column("cause", String(CAUSE_LEN), nullable=False),
        Column("confidence", Float),
        Column("fingerprint", String(32), index=True),
        Column("report_path", Text),
        Column("nodes", Integer),
        Column("recorded_at", DateTime, nullable=False),
    )
    implicated = Table(
        "implicated", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("cluster", String(ID_LEN), nullable=False),
        Column("job_id", String(ID_LEN), nullable=False),
        Column("kind", String(8), nullable=False),
        Column("key", String(KEY_LEN), nullable=False),
        Column("label", String(KEY_LEN), nullable=False),
        Column("node", String(NAME_LEN)),
        Column("cause", String(CAUSE_LEN), nullable=False),
        Column("xid", Integer),
        Column("end_time", DateTime, nullable=False),
        ForeignKeyConstraint(["cluster", "job_id"], ["jobs.cluster", "jobs.job_id"], ondelete="CASCADE"),
        Index("ix_implicated_key", "kind", "key", "end_time"),
        Index("ix_implicated_job", "cluster", "job_id"),
        Index("ix_implicated_time", "end_time"),
    )
    return md, meta, jobs, implicated


_SCHEMA: Any = None


def schema() -> Any:
    """(metadata, meta, jobs, implicated), built once (SQLAlchemy is imported only here)."""
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = _tables()
    return _SCHEMA


# Step i migrates a database at version i+1 to i+2 (a function of the open connection).
MIGRATIONS: list[Any] = []


# --- where the history lives ----------------------------------------------------------------

def fleet_url(config: Any = None, db: str | Path | None = None) -> str:
    """The database URL: ``db`` (a URL or a SQLite file path), else the config's
    ``fleet_url``, else ``<reports_dir>/fleet.sqlite``."""
    target = str(db) if db not in (None, "") else (getattr(config, "fleet_url", "") or "")
    if not target:
        from crashscope.config import Config

        reports_dir = Path(getattr(config, "reports_dir", None) or Config().reports_dir)
        target = str(reports_dir / DB_FILE)
    if "://" not in target:
        return "sqlite:///" + os.path.abspath(target)
    if target.startswith(("postgresql://", "postgres://")):
        target = "postgresql+psycopg://" + target.split("://", 1)[1]
    return target


def shown_url(url: str) -> str:
    """The URL for messages: never with its password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<fleet database>"


def _fs_type(path: str) -> str:
    """The file system type of the mount holding ``path`` (``/proc/self/mountinfo``), or ""."""
    best, fstype = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                parts, rparts = left.split(), right.split()
                if len(parts) < 5 or not rparts:
                    continue
                mount = parts[4].replace("\\040", " ")
                if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, fstype = mount, rparts[0]
    except OSError:
        return ""
    return fstype


def _error(url: str, e: BaseException) -> FleetError:
    orig = getattr(e, "orig", None) or e
    text = " ".join(str(orig).split())[:400]
    return FleetError(f"fleet history {shown_url(url)}: {type(orig).__name__}: {text}")


class FleetDB:
    """An open fleet history. ``with FleetDB(url) as fleet: fleet.record(report)``."""

    def __init__(self, url: str, *, create: bool = True, timeout_s: float = BUSY_TIMEOUT_S):
        from sqlalchemy import create_engine, event
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import NullPool

        self.url = url
        try:
            u = make_url(url)
        except Exception:
            raise FleetError(f"fleet history: not a database URL or path: {shown_url(url)}") from None
        self.dialect = u.get_backend_name()
        if self.dialect == "sqlite":
            path = u.database or ""
            if not path or path == ":memory:":
                raise FleetError("fleet history: SQLite needs a file path")
            if not create and not os.path.exists(path):
                raise FleetError(f"fleet history {path}: no such file (nothing recorded yet?)")
            parent = os.path.dirname(os.path.abspath(path))
            if create:
                try:
                    os.makedirs(parent, exist_ok=True)
                except OSError as e:
                    raise FleetError(f"fleet history {path}: cannot create {parent}: {e.strerror or e}") from None
            wal = _fs_type(os.path.realpath(parent)) not in NETWORK_FS
            ms = int(timeout_s * 1000)
            engine = create_engine(u, poolclass=NullPool, connect_args={"timeout": timeout_s})

            @event.listens_for(engine, "connect")
            def _connect(dbapi: Any, _rec: Any) -> None:
                dbapi.isolation_level = None  # we emit BEGIN ourselves (see the module doc)
                cur = dbapi.cursor()
                cur.execute(f"PRAGMA busy_timeout = {ms}")
                if create:
                    _journal_mode(cur, "wal" if wal else "delete", timeout_s)
                cur.execute("PRAGMA foreign_keys = ON")
                cur.execute("PRAGMA synchronous = NORMAL")
                cur.close()

            @event.listens_for(engine, "begin")
            def _begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("fleet_write") else "BEGIN")

        elif self.dialect == "postgresql":
            args = {"connect_timeout": max(1, int(timeout_s))} if u.get_driver_name() in ("psycopg", "psycopg2") else {}
            try:
                engine = create_engine(u, poolclass=NullPool, connect_args=args)
            except Exception as e:  # the driver is not installed
                raise _error(url, e) from None
        else:
            raise FleetError(f"fleet history: use a SQLite path or a postgresql:// URL, not {shown_url(url)}")
        self.engine = engine
        self._ready = False
        self.create = create

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> FleetDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions and schema -------------------------------------------------------------

    def _write(self) -> Any:
        return _Transaction(self, write=True)

    def _read(self) -> Any:
        return _Transaction(self, write=False)

    def _ensure_schema(self, conn: Any) -> None:
        from sqlalchemy import insert, select, text, update

        from sqlalchemy import inspect

        md, meta, _, _ = schema()
        if inspect(conn).has_table("implicated"):
            found = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
            if found is not None and _version(found, self.url) == SCHEMA_VERSION:
                return  # the usual case: nothing to create, no lock taken
        if self.dialect == "postgresql":
            # Two first writers would race on CREATE TABLE; the lock ends with the transaction.
            conn.execute(text("SELECT pg_advisory_xact_lock(7214400915)"))
        md.create_all(conn, checkfirst=True)
        found = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
        if found is None:
            conn.execute(insert(meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
            return
        version = _version(found, self.url)
        while version < SCHEMA_VERSION:
            MIGRATIONS[version - 1](conn)
            version += 1
            conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(version)))

    def _check_readable(self, conn: Any) -> bool:
        """False when the database holds no history tables yet."""
        from sqlalchemy import inspect, select

        if not inspect(conn).has_table("meta"):
            return False
        _, meta, _, _ = schema()
        found = conn.execute(select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
        if found is not None:
            _version(found, self.url)
        return True

    # -- writing -----------------------------------------------------------------------------

    def record(self, report: Any, *, report_path: str | Path | None = "", now: datetime | None = None) -> list[dict[str, Any]]:
        """Put ``report`` in the history (replacing an earlier record of its job), after
        looking up the earlier jobs that implicated its culprits; fills and returns
        ``report.history``."""
        from sqlalchemy import delete, insert

        _, _, jobs, implicated = schema()
        row = job_row(report, report_path=report_path, now=now)
        culprits = culprits_of(report)
        try:
            with self._write() as conn:
                history = self._history(conn, row, culprits)
                self._upsert_job(conn, jobs, row)
                conn.execute(delete(implicated).where(implicated.c.cluster == row["cluster"], implicated.c.job_id == row["job_id"]))
                if culprits:
                    conn.execute(insert(implicated), [
                        {"cluster": row["cluster"], "job_id": row["job_id"], "kind": c.kind, "key": c.key, "label": c.label,
                         "node": c.node, "cause": row["cause"], "xid": c.xid, "end_time": row["end_time"]}
                        for c in culprits
                    ])
        except FleetError:
            raise
        except Exception as e:
            from sqlalchemy.exc import SQLAlchemyError

            if isinstance(e, (SQLAlchemyError, OSError)):
                raise _error(self.url, e) from None
            raise
        report.history = history
        return history

    def _upsert_job(self, conn: Any, jobs: Any, row: dict[str, Any]) -> None:
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as upsert
        else:
            from sqlalchemy.dialects.sqlite import insert as upsert  # type: ignore[assignment]
        stmt = upsert(jobs).values(**row)
        stmt = stmt.on_conflict_do_update(index_elements=["cluster", "job_id"],
                                          set_={k: stmt.excluded[k] for k in row if k not in ("cluster", "job_id")})
        conn.execute(stmt)

    def _history(self, conn: Any, row: dict[str, Any], culprits: list[Culprit]) -> list[dict[str, Any]]:
        from sqlalchemy import select

        _, _, _, imp = schema()
        t = row["end_time"]
        out = []
        for c in culprits:
            if c.kind not in CULPRIT_KINDS or row["cause"] not in KIND_CAUSES[c.kind]:
                continue
            rows = conn.execute(
                select(imp.c.job_id, imp.c.end_time, imp.c.cause, imp.c.xid)
                .where(imp.c.kind == c.kind, imp.c.key == c.key, imp.c.cluster == row["cluster"],
                       imp.c.end_time >= t - timedelta(days=HISTORY_DAYS), imp.c.end_time <= t,
                       imp.c.job_id != row["job_id"], imp.c.cause.in_(sorted(KIND_CAUSES[c.kind])))
                .order_by(imp.c.end_time.desc(), imp.c.job_id)
            ).all()
            if rows:
                out.append(history_entry(c, row, rows))
        return out

    # -- reading -----------------------------------------------------------------------------

    def offenders(self, *, min_jobs: int = DRAIN_JOBS, days: float = DRAIN_DAYS, kinds: Iterable[str] = CULPRIT_KINDS,
                  causes: Iterable[str] | None = None, all_causes: bool = False, cluster: str | None = None,
                  until: datetime | None = None) -> list[dict[str, Any]]:
        """Nodes, GPUs and links implicated in at least ``min_jobs`` jobs that ended in the
        ``days`` up to ``until`` (default now), most jobs first. Jobs count when their cause
        is in ``causes``, by default in :data:`KIND_CAUSES` of the culprit's kind, with
        ``all_causes`` whatever it is."""
        from sqlalchemy import and_, func, or_, select

        _, _, _, imp = schema()
        end = _naive_utc(until or datetime.now(timezone.utc))
        start = end - timedelta(days=days)
        where = [imp.c.kind.in_(list(kinds)), imp.c.end_time > start, imp.c.end_time <= end]
        if causes is not None:
            where.append(imp.c.cause.in_(sorted(causes)))
        elif not all_causes:
            where.append(or_(*(and_(imp.c.kind == k, imp.c.cause.in_(sorted(KIND_CAUSES[k]))) for k in CULPRIT_KINDS)))
        if cluster is not None:
            where.append(imp.c.cluster == cluster)
        n = func.count(func.distinct(imp.c.job_id)).label("n")
        # One query: the window's rows of every culprit that reaches min_jobs (a join with
        # the grouped window, so the database never gets a long IN list).
        hits = (select(imp.c.cluster, imp.c.kind, imp.c.key).where(*where)
                .group_by(imp.c.cluster, imp.c.kind, imp.c.key).having(n >= min_jobs).subquery())
        query = (select(imp.c.cluster, imp.c.kind, imp.c.key, imp.c.job_id, imp.c.end_time, imp.c.cause, imp.c.xid, imp.c.label, imp.c.node)
                 .join(hits, and_(imp.c.cluster == hits.c.cluster, imp.c.kind == hits.c.kind, imp.c.key == hits.c.key))
                 .where(*where).order_by(imp.c.end_time.desc(), imp.c.job_id))
        details: dict[tuple[str, str, str], list[Any]] = {}
        try:
            with self._read() as conn:
                if not self._check_readable(conn):
                    return []
                for r in conn.execute(query):
                    details.setdefault((r[0], r[1], r[2]), []).append(r)
        except FleetError:
            raise
        except Exception as e:
            from sqlalchemy.exc import SQLAlchemyError

            if isinstance(e, SQLAlchemyError):
                raise _error(self.url, e) from None
            raise
        out = []
        for (cl, kind, key), rows in details.items():
            count = len({r[3] for r in rows})
            first, last = rows[-1][4], rows[0][4]
            causes_n: dict[str, int] = {}
            for r in rows:
                causes_n[r[5]] = causes_n.get(r[5], 0) + 1
            span = _days(last - first)
            out.append({
                "cluster": cl, "kind": kind, "key": key, "label": rows[0][7], "node": rows[0][8], "jobs": count,
                "first": _iso(first), "last": _iso(last), "days": span,
                "causes": dict(sorted(causes_n.items(), key=lambda kv: (-kv[1], kv[0]))),
                "xids": sorted({r[6] for r in rows if r[6] is not None}),
                "job_ids": [r[3] for r in rows][:HISTORY_JOBS_SHOWN],
                "advice": f"{count} job{'s' if count != 1 else ''} in {span} day{'s' if span != 1 else ''}: "
                          + (ACTION.get(kind, "look at it") if count >= DRAIN_JOBS else "watch"),
            })
        out.sort(key=lambda o: (-o["jobs"], o["kind"], o["key"], o["cluster"]))
        return out

    def job(self, job_id: str, cluster: str = "") -> dict[str, Any] | None:
        """One recorded job with its culprits, or None."""
        from sqlalchemy import select

        _, _, jobs, imp = schema()
        with self._read() as conn:
            if not self._check_readable(conn):
                return None
            r = conn.execute(select(jobs).where(jobs.c.cluster == cluster, jobs.c.job_id == job_id)).mappings().first()
            if r is None:
                return None
            d = dict(r)
            d["implicated"] = [dict(x) for x in conn.execute(
                select(imp.c.kind, imp.c.key, imp.c.label, imp.c.node, imp.c.cause, imp.c.xid)
                .where(imp.c.cluster == cluster, imp.c.job_id == job_id).order_by(imp.c.id)).mappings()]
        for k in ("end_time", "recorded_at"):
            d[k] = _iso(d[k])
        return d

    def counts(self) -> dict[str, int]:
        from sqlalchemy import func, select

        _, _, jobs, imp = schema()
        with self._read() as conn:
            if not self._check_readable(conn):
                return {"jobs": 0, "implicated": 0}
            return {"jobs": int(conn.execute(select(func.count()).select_from(jobs)).scalar() or 0),
                    "implicated": int(conn.execute(select(func.count()).select_from(imp)).scalar() or 0)}


def _journal_mode(cur: Any, want: str, timeout_s: float) -> None:
    """Set the journal mode once per database file (it persists in the file). Changing it
    takes an exclusive lock that SQLite does not wait for under busy_timeout, so two first
    writers race here: the loser retries until ``timeout_s``."""
    import sqlite3
    import time

    if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == want:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cur.execute(f"PRAGMA journal_mode = {want}")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class _Transaction:
    def __init__(self, db: FleetDB, *, write: bool):
        self.db, self.write = db, write

    def __enter__(self) -> Any:
        try:
            conn = self.db.engine.connect()
        except Exception as e:
            raise _error(self.db.url, e) from None
        if self.write:
            conn = conn.execution_options(fleet_write=True)
        self.conn = conn
        self.tx = conn.begin()
        try:
            if self.write and not self.db._ready:
                self.db._ensure_schema(conn)
                self.db._ready = True
        except BaseException:
            self.tx.rollback()
            conn.close()
            raise
        return conn

    def __exit__(self, exc_type: Any, *_: object) -> None:
        try:
            if exc_type is None:
                self.tx.commit()
            else:
                self.tx.rollback()
        finally:
            self.conn.close()


def _version(found: Any, url: str) -> int:
    try:
        version = int(found)
    except (TypeError, ValueError):
        raise FleetError(f"fleet history {shown_url(url)}: unreadable schema_version {found!r}") from None
    if version > SCHEMA_VERSION:
        raise FleetError(f"fleet history {shown_url(url)}: schema version {version} is newer than this crashscope's "
                         f"({SCHEMA_VERSION}); upgrade crashscope")
    return version


# --- the library entry point ------------------------------------------------------------------

def record(report: Any, config: Any = None, *, db: str | Path | None = None, report_path: str | Path | None = None,
           now: datetime | None = None, timeout_s: float = BUSY_TIMEOUT_S) -> list[dict[str, Any]]:
    """Record ``report`` in the fleet history named by ``db`` / ``config`` (see :func:`fleet_url`)
    and fill ``report.history`` with the earlier jobs that implicated the same culprits.

    ``report_path``: where the report is (None: ``<reports_dir>/<job id>/report.json``, where
    the epilog writes it; "": not written). Raises :class:`FleetError`; callers that must
    never fail (the epilog) catch it."""
    if report_path is None:
        jid = str((report.job or {}).get("id") or "")
        if jid and config is not None and _safe_component(jid):
            report_path = Path(config.reports_dir) / jid / "report.json"
        else:
            report_path = ""
    with FleetDB(fleet_url(config, db), timeout_s=timeout_s) as fleet:
        return fleet.record(report, report_path=report_path, now=now)


def _safe_component(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and "\x00" not in name


# --- what a report contributes ----------------------------------------------------------------

@dataclass(frozen=True)
class Culprit:
    kind: str  # node | gpu | link | rank
    key: str
    label: str
    node: str | None = None
    xid: int | None = None


def _cut(v: Any, n: int) -> str:
    """``v`` as text any database stores: NUL (PostgreSQL refuses it) and lone surrogates
    (a surrogate-escaped file name; no UTF-8 for them) as backslash escapes, cut to ``n``."""
    s = "" if v is None else str(v)
    if "\x00" in s:
        s = s.replace("\x00", "\\x00")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s[:n]


def _parse_time(v: Any) -> datetime | None:
    if not isinstance(v, str) or not v:
        return None
    from crashscope.sources.base import iso_to_ns

    ns, _ = iso_to_ns(v)
    if ns is None:
        return None
    return datetime(1970, 1, 1) + timedelta(microseconds=ns // 1000)


def _epoch_time(v: float) -> datetime | None:
    """Epoch seconds (the epilog's ``job.slurm.end``, from scontrol's EndTime) as naive UTC."""
    if not 0 < v < 1e11:
        return None
    return datetime(1970, 1, 1) + timedelta(seconds=float(v))


def _naive_utc(dt: datetime) -> datetime:
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt


def _iso(dt: Any) -> str | None:
    if not isinstance(dt, datetime):
        return None if dt is None else str(dt)
    return _naive_utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _days(delta: timedelta) -> int:
    return max(1, math.ceil(delta.total_seconds() / 86400 - 1e-9))


def end_time_of(report: Any, now: datetime | None = None) -> datetime:
    """When the job ended: the job's own end time (the epilog's), else the first failure,
    else the last evidence, else ``now``."""
    job = report.job or {}
    slurm: dict[str, Any] = job["slurm"] if isinstance(job.get("slurm"), dict) else {}
    ff_time = report.first_failure.time if report.first_failure is not None else None
    for v in (job.get("end_time"), job.get("end"), slurm.get("end"), ff_time):
        t = _epoch_time(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _parse_time(v)
        if t is not None:
            return t
    times = [t for t in (_parse_time(getattr(e, "time", None)) for e in report.evidence or []) if t is not None]
    if times:
        return max(times)
    return _naive_utc(now or datetime.now(timezone.utc))


def job_row(report: Any, *, report_path: str | Path | None = "", now: datetime | None = None) -> dict[str, Any]:
    job = report.job or {}
    jid = job.get("id")
    if jid in (None, ""):
        # No job id: a stable stand-in, so re-recording the same report stays idempotent.
        import hashlib

        seed = json.dumps([report.fingerprint, report.first_failure.time if report.first_failure is not None else None,
                           job.get("nodes"), (report.analysis or {}).get("root")], default=str)
        jid = "noid-" + hashlib.sha256(seed.encode("utf-8", "backslashreplace")).hexdigest()[:12]
    nodes = job.get("nodes")
    slurm: dict[str, Any] = job["slurm"] if isinstance(job.get("slurm"), dict) else {}
    return {
        "cluster": _cut(job.get("cluster") or slurm.get("cluster") or "", ID_LEN),
        "job_id": _cut(jid, ID_LEN),
        "user_name": _cut(job.get("user") or slurm.get("user"), ID_LEN) or None,
        "end_time": end_time_of(report, now),
        "cause": _cut(report.cause or "unknown", CAUSE_LEN),
        "confidence": float(report.confidence or 0.0),
        "fingerprint": report.fingerprint,
        "report_path": _cut(report_path, 4096) if report_path else None,
        "nodes": len(nodes) if isinstance(nodes, list) else None,
        "recorded_at": _naive_utc(now or datetime.now(timezone.utc)),
    }


def _xid_of(message: Any) -> int | None:
    from crashscope.sources.kernel import _XID

    m = _XID.search(message) if isinstance(message, str) else None
    return int(m.group("xid")) if m else None


def culprits_of(report: Any) -> list[Culprit]:
    """The nodes, GPUs, links and ranks a report blames, each once (see the module doc)."""
    from crashscope.sources.base import normalize_pci

    imp = report.implicated.to_dict()
    causes = [e for e in report.evidence or [] if getattr(e, "role", "cause") == "cause"]
    xid_by_gpu: dict[tuple[str | None, str | None], int] = {}
    xid_by_node: dict[str, int] = {}
    for e in causes:
        x = _xid_of(e.message) if e.kind in (None, "xid") else None
        if x is None:
            continue
        pci = normalize_pci(str(e.gpu)) if e.gpu else None
        xid_by_gpu.setdefault((e.node, pci), x)
        if e.node:
            xid_by_node.setdefault(e.node, x)
    out: dict[tuple[str, str], Culprit] = {}

    def add(c: Culprit) -> None:
        out.setdefault((c.kind, c.key), c)

    for n in imp.get("nodes") or []:
        if n not in (None, ""):
            name = _cut(n, NAME_LEN)
            add(Culprit("node", name, name, name, xid_by_node.get(str(n))))
    for g in imp.get("gpus") or []:
        if not isinstance(g, dict):
            continue
        node = _cut(g.get("node"), NAME_LEN) or None
        serial, uuid = g.get("serial"), g.get("uuid")
        pci = normalize_pci(str(g.get("pci") or g.get("pci_bus_id") or "")) if (g.get("pci") or g.get("pci_bus_id")) else None
        index = g.get("index")
        if serial:
            key = f"serial:{serial}"
        elif uuid:
            key = f"uuid:{uuid}"
        elif node and pci:
            key = f"{node}/{pci}"
        elif node and index is not None:
            key = f"{node}:{index}"
        else:
            continue
        label = " ".join(p for p in (node, f"GPU {index}" if index is not None else (f"GPU {pci}" if pci else "GPU")) if p)
        if serial:
            label += f" (SN {serial})"
        xid = xid_by_gpu.get((g.get("node"), pci)) or xid_by_gpu.get((None, pci))
        add(Culprit("gpu", _cut(key, KEY_LEN), _cut(label, KEY_LEN), node, xid))
    for c in _links(report, causes):
        add(c)
    for r in imp.get("ranks") or []:
        if isinstance(r, int) and not isinstance(r, bool):
            add(Culprit("rank", f"rank {r}", f"rank {r}"))
    return list(out.values())


def _links(report: Any, causes: list[Any]) -> Iterator[Culprit]:
    """Links named by the deciding network evidence: a port/HCA of the evidence's node, or
    the node pair when NCCL names the peer by a host name of the job."""
    from crashscope.sources import kernel, nccl
    from crashscope.sources.base import short_host

    job_nodes = {short_host(str(n)): str(n) for n in (report.job or {}).get("nodes") or [] if n}
    for e in causes:
        if e.kind not in ("link_event", "network_error") or not e.node or not isinstance(e.message, str):
            continue
        node, msg = str(e.node), e.message
        port = None
        for rx in (kernel._NETDEV_LINK, kernel._NIC_LINK, kernel._PORT_MODULE, kernel._MLX5_HEALTH):
            m = rx.search(msg)
            if m:
                d = m.groupdict()
                port = d.get("ifname") or d.get("ifname2") or d.get("dev")
                break
        if port is None:
            m = nccl._IB_ASYNC.search(msg)
            if m and m.group("hca"):
                port = f"{m.group('hca')}:{m.group('port')}"
        if port is None and (m := _search(r"on dev (?P<h>[^:\s,]+):(?P<p>\d+)", msg)):
            port = f"{m.group('h')}:{m.group('p')}"
        if port is None and "Got completion from peer" in msg and (m := nccl._HCA.search(msg)):
            port = m.group("h")
        if port:
            key = f"{node}/{port}"
            yield Culprit("link", _cut(key, KEY_LEN), _cut(f"{node} {port}", KEY_LEN), _cut(node, NAME_LEN))
        peer = None
        for rx in (nccl._SOCK_CLOSED, nccl._SOCK_IO, nccl._SOCK_CONNECT, nccl._SOCK_POLL, nccl._IB_COMPLETION):
            m = rx.search(msg)
            if m:
                peer = nccl._split_peer(m.group("peer"))[0]
                break
        other = job_nodes.get(short_host(peer)) if peer else None
        if other and short_host(other) != short_host(node):
            a, b = sorted((node, other))
            yield Culprit("link", _cut(f"{a}<->{b}", KEY_LEN), _cut(f"{a} <-> {b}", KEY_LEN), _cut(node, NAME_LEN))


def _search(pattern: str, text: str) -> Any:
    import regex

    return regex.search(pattern, text)


# --- history entries and advice ---------------------------------------------------------------

def _ordinal(n: int) -> str:
    words = ["", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
    if 0 < n < len(words):
        return words[n]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def history_entry(c: Culprit, row: dict[str, Any], earlier: list[Any]) -> dict[str, Any]:
    """One culprit's history line: ``earlier`` are (job_id, end_time, cause, xid) rows of the
    earlier jobs in the window, newest first."""
    t = row["end_time"]
    cause = row["cause"]
    if c.xid is not None:
        same = [r for r in earlier if r[3] == c.xid]
        what = f"Xid {c.xid}"
    else:
        same = [r for r in earlier if r[2] == cause]
        what = CAUSE_WORDS.get(cause, cause)
    total = 1 + len(earlier)
    ref = same if same else earlier
    count = 1 + len(same)
    days = _days(t - min(r[1] for r in ref))
    recent = 1 + sum(1 for r in earlier if r[1] >= t - timedelta(days=DRAIN_DAYS))
    text = f"{_ordinal(count)} {what} in {days} day{'s' if days != 1 else ''}"
    if total > count:
        text += f" ({_ordinal(total)} infrastructure failure in {HISTORY_DAYS} days)"
    action = ACTION.get(c.kind, "look at it") if recent >= DRAIN_JOBS else f"watch ({DRAIN_JOBS} in {DRAIN_DAYS} days drains)"
    return {
        "key": c.label, "id": c.key, "kind": c.kind, "count": total, "same": count, "days": days, "cause": cause,
        "xid": c.xid, "advice": f"{text}: {action}",
        "jobs": [{"job": r[0], "time": _iso(r[1]), "cause": r[2], "xid": r[3]} for r in earlier[:HISTORY_JOBS_SHOWN]],
    }


# --- import of existing reports ---------------------------------------------------------------

MAX_REPORT_BYTES = 64 << 20


def load_report(path: str | Path) -> Any:
    """A report JSON file as a :class:`Report` (bounded read, never through a final symlink
    to a non-file)."""
    from crashscope.report.model import Report

    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FleetError(f"{p}: cannot read the report: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as fh:
        import stat

        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise FleetError(f"{p}: not a regular file")
        raw = fh.read(MAX_REPORT_BYTES + 1)
    if len(raw) > MAX_REPORT_BYTES:
        raise FleetError(f"{p}: report larger than {MAX_REPORT_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FleetError(f"{p}: not a report JSON file: {e}") from None
    if not isinstance(data, dict) or "cause" not in data:
        raise FleetError(f"{p}: not a crashscope report (no cause)")
    try:
        return Report.from_dict(data)
    except TypeError as e:
        raise FleetError(f"{p}: not a crashscope report: {e}") from None
