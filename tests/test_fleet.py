"""The fleet history (crashscope/fleet.py, `crashscope fleet`, `analyze --fleet`), end to end on
SQLite and, where Debian's PostgreSQL server binaries are installed, on a throw-away
PostgreSQL started here as a non-root user on a private port (stopped by pid).

Reports are the fixture jobs' analyses (tests/golden/reports/*.json, the snapshots of
`crashscope analyze fixtures/jobs/<job>`) with mutated job ids and end times."""

from __future__ import annotations

import copy
import csv
import glob
import io
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from crashscope import fleet
from crashscope.cli import app
from crashscope.report.model import Report
from crashscope.report.render import render_markdown, render_terminal
from crashscope.report.safe import is_display_safe

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "reports"
runner = CliRunner()
T0 = datetime(2026, 6, 1, 12, 0, 0)


def golden(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def report(name: str, job_id: str, end: datetime, **job: Any) -> Report:
    d = copy.deepcopy(golden(name))
    d["job"] = dict(d["job"], id=job_id, end_time=end.strftime("%Y-%m-%dT%H:%M:%SZ"), **job)
    return Report.from_dict(d)


# --- databases ------------------------------------------------------------------------------


def _pg_binaries() -> tuple[str, str] | None:
    initdb = shutil.which("initdb")
    candidates = ([os.path.dirname(os.path.realpath(initdb))] if initdb else []) + sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for d in candidates:
        if os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(os.path.join(d, "postgres"), os.X_OK):
            return os.path.join(d, "initdb"), os.path.join(d, "postgres")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """initdb + postgres in a temporary directory, as a non-root user (initdb refuses root)."""

    def __init__(self) -> None:
        bins = _pg_binaries()
        if bins is None:
            pytest.skip("PostgreSQL server binaries (initdb, postgres) not installed: apt-get install -y postgresql")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            pytest.skip("psycopg is not installed: pip install 'psycopg[binary]>=3.1,<4'")
        self.initdb, self.postgres = bins
        self.run_as: dict[str, Any] = {}
        self.dir = tempfile.mkdtemp(prefix="crashscope-pg-")
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    pw = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            else:
                pytest.skip("running as root and no postgres/nobody user to run the PostgreSQL server as")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": self.dir}
        subprocess.run([self.initdb, "-D", self.data, "-U", "crashscope", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                       check=True, capture_output=True, env=env, cwd=self.dir, timeout=120, **self.run_as)
        self.log = open(os.path.join(self.dir, "server.log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [self.postgres, "-D", self.data, "-p", str(self.port), "-k", self.dir, "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "max_connections=40"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=self.dir, **self.run_as)
        self.url = f"postgresql://crashscope@127.0.0.1:{self.port}/postgres"
        self._wait_ready()

    def _wait_ready(self) -> None:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited: " + Path(self.dir, "server.log").read_text(errors="replace")[-2000:])
            try:
                psycopg.connect(f"host=127.0.0.1 port={self.port} user=crashscope dbname=postgres", connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def new_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=crashscope dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://crashscope@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)  # "fast" shutdown
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    try:
        yield server
    finally:
        server.stop()


_DB_COUNTER = [0]


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty fleet history: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "reports" / "fleet.sqlite")
    server = request.getfixturevalue("pg_server")
    _DB_COUNTER[0] += 1
    return server.new_database(f"fleet_{os.getpid()}_{_DB_COUNTER[0]}")


def open_db(db: str) -> fleet.FleetDB:
    return fleet.FleetDB(fleet.fleet_url(db=db))


# --- culprits ------------------------------------------------------------------------------


def test_culprits_of_fixture_reports() -> None:
    xid = {(c.kind, c.key): c for c in fleet.culprits_of(report("xid79_node001", "1", T0))}
    assert xid[("node", "node001")].xid == 79
    gpu = xid[("gpu", "node001/0000:3a:00.0")]
    assert (gpu.label, gpu.node, gpu.xid) == ("node001 GPU 2", "node001", 79)
    assert ("rank", "rank 2") in xid
    fab = {(c.kind, c.key) for c in fleet.culprits_of(report("fabric_timeout_ib_node002", "2", T0))}
    # "mlx5_core 0000:17:00.0 ibp23s0: Link down" on node002: the port is the link
    assert ("link", "node002/ibp23s0") in fab
    assert not [k for k in fab if k[0] == "link" and k[1] != "node002/ibp23s0"]


def test_gpu_key_prefers_serial_and_links_name_node_pairs() -> None:
    d = golden("fabric_timeout_ib_node002")
    d["implicated"]["gpus"] = [{"node": "node002", "index": 0, "pci": "0000:18:00.0", "serial": "1652221012345"}, {"node": "node002", "index": 5}]
    d["evidence"].append({"rule": "nccl-socket-closed", "cause": "fabric_timeout", "time": None, "node": "node001", "rank": 1,
                          "file": "logs/rank1.log", "line": 9, "role": "cause", "kind": "network_error",
                          "message": "socketProgress: Connection closed by remote peer node002.cluster.local<43210>"})
    d["evidence"].append({"rule": "nccl-ib-async", "cause": "fabric_timeout", "time": None, "node": "node001", "rank": 1,
                          "file": "logs/rank1.log", "line": 10, "role": "cause", "kind": "network_error",
                          "message": "NET/IB : mlx5_0:1 Got async error event: port error"})
    keys = {(c.kind, c.key): c.label for c in fleet.culprits_of(Report.from_dict(d))}
    assert keys[("gpu", "serial:1652221012345")] == "node002 GPU 0 (SN 1652221012345)"
    assert keys[("gpu", "node002:5")] == "node002 GPU 5"
    assert ("link", "node001<->node002") in keys
    assert ("link", "node001/mlx5_0:1") in keys


# --- recording and history -------------------------------------------------------------------


def test_history_counts_earlier_jobs_on_the_same_gpu(db: str) -> None:
    with open_db(db) as f:
        first = report("xid79_node001", "1001", T0)
        assert f.record(first) == [] and first.history == []
        second = report("xid79_node001", "1002", T0 + timedelta(days=2))
        h2 = {h["kind"]: h for h in f.record(second)}
        assert h2["gpu"]["advice"] == "second Xid 79 in 2 days: watch (3 in 7 days drains)"
        third = report("xid79_node001", "1003", T0 + timedelta(days=4, hours=6))
        hist = f.record(third)
    assert third.history == hist
    gpu = next(h for h in hist if h["kind"] == "gpu")
    assert gpu["key"] == "node001 GPU 2" and gpu["id"] == "node001/0000:3a:00.0"
    assert (gpu["count"], gpu["days"], gpu["cause"], gpu["xid"]) == (3, 5, "gpu_hardware", 79)
    assert gpu["advice"] == "third Xid 79 in 5 days: drain"
    assert [j["job"] for j in gpu["jobs"]] == ["1002", "1001"]  # newest first
    assert {h["kind"] for h in hist} == {"node", "gpu"}  # ranks never carry history


def test_history_is_per_cause_kind_window_and_cluster(db: str) -> None:
    with open_db(db) as f:
        # node001 GPU 0: an OOM and a software error are the job's own, not the hardware's
        f.record(report("oom_cuda_rank0", "2001", T0))
        f.record(report("software_error_valueerror_rank0", "2002", T0 + timedelta(hours=1)))
        # same node and GPU, 40 days earlier: outside the 30-day history window
        f.record(report("gpu_throttle_node001_gpu0", "2000", T0 - timedelta(days=40)))
        # another cluster's node001 is another machine
        f.record(report("gpu_throttle_node001_gpu0", "2003", T0 + timedelta(hours=2), cluster="other"))
        # a fabric failure seen through node001 GPU 0 counts against the node, not the GPU
        f.record(report("sample_fabric_timeout", "2004", T0 + timedelta(hours=3)))
        r = report("gpu_throttle_node001_gpu0", "2005", T0 + timedelta(days=1))
        hist = f.record(r)
        oom = report("oom_cuda_rank0", "2006", T0 + timedelta(days=1, hours=1))
        assert f.record(oom) == []
    by = {h["kind"]: h for h in hist}
    assert set(by) == {"node"}, hist
    assert by["node"]["count"] == 2 and [j["job"] for j in by["node"]["jobs"]] == ["2004"]
    assert by["node"]["advice"] == "first GPU slowdown in 1 day (second infrastructure failure in 30 days): watch (3 in 7 days drains)"


def test_job_fields_from_the_epilog() -> None:
    """The epilog's merge puts scontrol's user and EndTime (epoch seconds) under job.slurm."""
    d = golden("xid79_node001")
    d["job"] = dict(d["job"], slurm={"user": "alice", "end": 1781049600, "outcome": "failed"}, cluster="c1")
    row = fleet.job_row(Report.from_dict(d))
    assert (row["user_name"], row["cluster"], row["end_time"]) == ("alice", "c1", datetime(2026, 6, 10, 0, 0))
    del d["job"]["slurm"]
    assert fleet.job_row(Report.from_dict(d))["end_time"] == datetime(2026, 6, 15, 21, 57, 28)  # the first failure


def test_recording_a_job_again_replaces_it(db: str) -> None:
    with open_db(db) as f:
        f.record(report("xid79_node001", "3001", T0))
        f.record(report("xid79_node001", "3002", T0 + timedelta(days=1)))
        again = report("xid79_node001", "3002", T0 + timedelta(days=1))
        hist = f.record(again)
        # the same job is never its own history
        assert [j["job"] for h in hist for j in h["jobs"]] == ["3001", "3001"]
        # the job re-analysed with another verdict: its old culprits go
        f.record(report("fabric_timeout_ib_node002", "3002", T0 + timedelta(days=1)))
        assert f.counts()["jobs"] == 2
        job = f.job("3002")
    assert job is not None and job["cause"] == "fabric_timeout"
    assert {(i["kind"], i["key"]) for i in job["implicated"]} == {("node", "node002"), ("gpu", "node002/0000:18:00.0"), ("link", "node002/ibp23s0"), ("rank", "rank 4")}
    assert job["fingerprint"] == report("fabric_timeout_ib_node002", "x", T0).fingerprint
    assert job["end_time"] == "2026-06-02T12:00:00.000000Z"


def test_repeat_offenders(db: str) -> None:
    now = T0 + timedelta(days=10)
    with open_db(db) as f:
        for i, day in enumerate((1, 4, 8, 9)):
            f.record(report("xid79_node001", f"40{i}", T0 + timedelta(days=day)))
        for i, day in enumerate((7, 9.5)):
            f.record(report("fabric_timeout_ib_node002", f"41{i}", T0 + timedelta(days=day)))
        f.record(report("xid48_node002", "420", T0 + timedelta(days=9)))
        for i in range(3):  # three OOMs on node001 GPU 0: not a hardware offender
            f.record(report("oom_cuda_rank0", f"43{i}", T0 + timedelta(days=9, hours=i)))
        week = f.offenders(min_jobs=3, days=7, until=now)
        # node002: two fabric failures and an Xid 48 (its GPU once, its port twice: neither three)
        assert [(o["kind"], o["key"], o["jobs"]) for o in week] == [("gpu", "node001/0000:3a:00.0", 3), ("node", "node001", 3), ("node", "node002", 3)]
        assert week[0]["xids"] == [79] and week[0]["causes"] == {"gpu_hardware": 3} and week[0]["advice"] == "3 jobs in 5 days: drain"
        assert week[0]["job_ids"] == ["403", "402", "401"]
        assert len(f.offenders(min_jobs=3, days=30, until=now)) == 3
        assert f.offenders(min_jobs=4, days=30, until=now)[0]["jobs"] == 4
        links = f.offenders(min_jobs=2, days=7, kinds=["link"], until=now)
        assert [(o["key"], o["jobs"], o["label"]) for o in links] == [("node002/ibp23s0", 2, "node002 ibp23s0")]
        node2 = [o for o in f.offenders(min_jobs=2, days=7, until=now) if o["key"] == "node002"]
        assert node2 and node2[0]["causes"] == {"fabric_timeout": 2, "gpu_hardware": 1}
        every = f.offenders(min_jobs=3, days=7, until=now, all_causes=True)
        assert ("gpu", "node001/0000:18:00.0") in {(o["kind"], o["key"]) for o in every}
        assert f.offenders(min_jobs=1, days=7, until=now, causes={"oom"}, kinds=["gpu"])[0]["jobs"] == 3
        assert f.offenders(min_jobs=1, days=7, until=now, cluster="elsewhere") == []


def test_hostile_strings_are_stored(db: str) -> None:
    """Log-derived names with NUL, lone surrogates (undecodable bytes) and absurd lengths."""
    d = golden("xid79_node001")
    evil = "node\x00\udcff" + "x" * 3000
    d["implicated"]["nodes"] = [evil]
    d["implicated"]["gpus"] = [dict(d["implicated"]["gpus"][0], node=evil)]
    d["job"] = dict(d["job"], user="u\x00ser", cluster="c\udc80")
    for i in range(2):
        d["job"]["id"] = f"9{i}"
        d["job"]["end_time"] = f"2026-06-0{i + 1}T00:00:00Z"
        r = Report.from_dict(copy.deepcopy(d))
        with open_db(db) as f:
            hist = f.record(r, report_path="/reports/\udcff/report.json")
    assert {h["kind"] for h in hist} == {"node", "gpu"}
    assert hist[0]["key"].startswith("node\\x00\\udcff") and len(hist[0]["key"]) == fleet.NAME_LEN
    with open_db(db) as f:
        job = f.job("91", cluster="c\\udc80")
    assert job is not None and job["user_name"] == "u\\x00ser" and job["report_path"] == "/reports/\\udcff/report.json"


def test_sqlite_on_a_network_file_system_uses_the_rollback_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fleet._fs_type
    assert real(str(tmp_path)) not in ("", "nfs4")  # the real lookup finds the test directory's mount
    monkeypatch.setattr(fleet, "_fs_type", lambda path: "nfs4")
    db = str(tmp_path / "nfs" / "fleet.sqlite")
    fleet.record(report("xid79_node001", "1", T0), db=db)
    import sqlite3

    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_schema_is_versioned(db: str) -> None:
    from sqlalchemy import text

    with open_db(db) as f:
        f.record(report("xid79_node001", "5001", T0))
        with f.engine.begin() as c:
            assert c.execute(text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar() == str(fleet.SCHEMA_VERSION)
            c.execute(text("UPDATE meta SET value = '99' WHERE key = 'schema_version'"))
    with open_db(db) as f:
        with pytest.raises(fleet.FleetError, match="schema version 99 is newer"):
            f.record(report("xid79_node001", "5002", T0))
        with pytest.raises(fleet.FleetError, match="newer"):
            f.offenders()


_WRITER = """
import json, sys
from datetime import datetime, timedelta
from crashscope import fleet
from crashscope.report.model import Report
db, prefix, n, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
base = json.load(open(path))
for i in range(n):
    for jid in (f"{prefix}{i}", f"shared{i}"):
        d = dict(base, job=dict(base["job"], id=jid, end_time=(datetime(2026, 6, 1) + timedelta(minutes=i)).isoformat() + "Z"))
        fleet.record(Report.from_dict(d), db=db, report_path="", timeout_s=60)
print("ok")
"""


def test_concurrent_writers_from_two_processes(db: str) -> None:
    n = 12
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, db, p, str(n), str(GOLDEN / "xid79_node001.json")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in ("a", "b")]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    with open_db(db) as f:
        assert f.counts() == {"jobs": 3 * n, "implicated": 3 * n * 3}  # node, GPU, rank per job
    if "://" not in db:
        mode = subprocess.run(["python3", "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA journal_mode').fetchone()[0])", db],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert mode == "wal"


# --- the command line ------------------------------------------------------------------------


def _write_reports(tmp: Path, specs: list[tuple[str, str, datetime]]) -> list[str]:
    paths = []
    for name, jid, end in specs:
        p = tmp / f"{jid}.json"
        p.write_text(json.dumps(report(name, jid, end).to_dict()))
        paths.append(str(p))
    return paths


def test_cli_add_and_export(db: str, tmp_path: Path) -> None:
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    files = _write_reports(tmp_path, [("xid79_node001", f"6{i}", now - timedelta(days=3 - i)) for i in range(3)])
    res = runner.invoke(app, ["fleet", "add", *reversed(files), "--db", db])
    assert res.exit_code == 0, res.output
    # imported oldest first: the newest report is the third Xid 79 on that GPU
    assert "62.json: node001 GPU 2: third Xid 79 in 2 days: drain" in res.output
    res = runner.invoke(app, ["fleet", "--db", db, "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["kind"], r["key"], r["jobs"], r["node"]) for r in rows] == [("gpu", "node001/0000:3a:00.0", "3", "node001"), ("node", "node001", "3", "node001")]
    assert rows[0]["job_ids"] == "62;61;60" and rows[0]["xids"] == "79" and rows[0]["causes"] == "gpu_hardware=3"
    res = runner.invoke(app, ["fleet", "--db", db, "-f", "json", "--kind", "node"])
    data = json.loads(res.stdout)
    assert [d["key"] for d in data] == ["node001"] and data[0]["advice"].endswith("drain")
    res = runner.invoke(app, ["fleet", "--db", db, "--days", "1"])
    assert res.exit_code == 0 and "no repeat offenders" in res.stdout
    table = runner.invoke(app, ["fleet", "--db", db, "--width", "160"]).stdout
    assert "node001 GPU 2" in table and "drain" in table
    assert runner.invoke(app, ["fleet", "--db", db, "--kind", "rack"]).exit_code == 2
    assert runner.invoke(app, ["fleet", "--db", db, "--cause", "cosmic_rays"]).exit_code == 2


def test_cli_hostile_names_in_exports(tmp_path: Path) -> None:
    db = str(tmp_path / "fleet.sqlite")
    d = golden("node_failure_node001")
    evil = "=HYPERLINK(\"http://x\")\x1b[31m\nnode"
    d["implicated"]["nodes"] = [evil]
    for i in range(3):
        d["job"] = dict(d["job"], id=f"7{i}", end_time=(datetime.now(timezone.utc) - timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        (tmp_path / f"{i}.json").write_text(json.dumps(d))
    assert runner.invoke(app, ["fleet", "add", *(str(tmp_path / f"{i}.json") for i in range(3)), "--db", db]).exit_code == 0
    out = runner.invoke(app, ["fleet", "--db", db, "-f", "csv"]).stdout
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 2 and rows[1][2].startswith("'=HYPERLINK") and "\\x1b" in rows[1][2] and "\\n" in rows[1][2]
    for fmt in ("table", "json"):
        text = runner.invoke(app, ["fleet", "--db", db, "-f", fmt]).stdout
        assert is_display_safe(text), fmt
    assert json.loads(runner.invoke(app, ["fleet", "--db", db, "-f", "json"]).stdout)[0]["key"] == evil  # JSON stays exact


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["fleet", "--db", str(tmp_path / "none.sqlite")])
    assert res.exit_code == 2 and "no such file" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["fleet", "add", str(bad), "--db", str(tmp_path / "f.sqlite")])
    assert res.exit_code == 2 and "not a report JSON file" in res.output
    assert not (tmp_path / "f.sqlite").exists()  # nothing written when an input is bad
    res = runner.invoke(app, ["fleet", "--db", "postgresql://u:s3cret@127.0.0.1:1/x"])
    assert res.exit_code == 2 and "s3cret" not in res.output and "***" in res.output


def test_views_show_history_escaped() -> None:
    r = report("xid79_node001", "8001", T0)
    r.history = [{"key": "node001 GPU 2", "kind": "gpu", "advice": "third Xid 79 in 5 days: drain", "jobs": [{"job": "7999"}, {"job": "7998"}]},
                 {"key": "evil\x1b[2J # *x* [a](b)", "kind": "node", "advice": "second node failure in 1 day: watch", "jobs": []}]
    term = render_terminal(r, width=120)
    assert "Fleet history" in term and "node001 GPU 2: third Xid 79 in 5 days: drain (earlier: jobs 7999, 7998)" in term
    assert is_display_safe(term) and "\\x1b[2J" in term
    md = render_markdown(r)
    assert "## Fleet history" in md and "- node001 GPU 2: third Xid 79 in 5 days: drain (earlier: jobs 7999, 7998)" in md
    assert "evil\\\\x1b\\[2J \\# \\*x\\* \\[a\\](b)" in md
    plain = report("xid79_node001", "8002", T0)
    assert "Fleet history" not in render_terminal(plain) and "Fleet history" not in render_markdown(plain)


def test_analyze_records_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reports_dir = tmp_path / "reports"
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'reports_dir = "{reports_dir}"\n')
    monkeypatch.setenv("CRASHSCOPE_CONFIG", str(cfg))
    job = str(ROOT / "fixtures" / "jobs" / "xid79_node001")
    res = runner.invoke(app, ["analyze", job, "-f", "json"])
    assert res.exit_code == 0 and not reports_dir.exists()
    # an earlier job on the same GPU, then the fixture's analysis through the CLI
    fleet.record(report("xid79_node001", "earlier", datetime(2026, 6, 14)), db=str(reports_dir / "fleet.sqlite"))
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["analyze", job, "--fleet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    gpu = next(h for h in data["history"] if h["kind"] == "gpu")
    assert gpu["key"] == "node001 GPU 2" and gpu["advice"].startswith("second Xid 79 in 2 days")
    with open_db(str(reports_dir / "fleet.sqlite")) as f:
        job_row = f.job(data["job"]["id"])
    assert job_row is not None and job_row["report_path"] == str(out.resolve()) and job_row["cause"] == "gpu_hardware"
    # a database that cannot be written costs a warning, never the report
    cfg.write_text(f'reports_dir = "{reports_dir}"\nfleet_url = "postgresql://nobody@127.0.0.1:1/none"\n')
    res = runner.invoke(app, ["analyze", job, "-f", "json"])
    assert res.exit_code == 0 and "not recorded in the fleet history" in res.output
