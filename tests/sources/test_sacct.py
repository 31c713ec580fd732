"""Key facts of the sacct source: parsable text, fixed width, JSON v0.0.39..v0.0.44."""

from __future__ import annotations

import json
from pathlib import Path
from zoneinfo import ZoneInfo

from crashscope.sources import get_source
from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

OPTS = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)
GOLDEN = Path(__file__).parent.parent / "golden" / "sacct"


def _rows(text, options=OPTS):
    df, warnings = parse_text("sacct", text, options=options)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def test_parsable_p_trailing_delimiter_and_cancelled_by():
    rows, w = _rows(
        "JobID|JobName|State|ExitCode|Start|End|NodeList|\n"
        "123456|pretrain|NODE_FAIL|0:0|2026-09-14T06:00:02|2026-09-14T08:14:24|node[001-004]|\n"
        "123456.0|python|CANCELLED by 0|0:9|2026-09-14T06:00:09|2026-09-14T08:14:24|node[001-004]|\n"
    )
    assert not w
    job, step = rows
    assert job["kind"] == "job_state" and job["attrs"]["state"] == "NODE_FAIL" and job["attrs"]["step"] is None
    assert job["attrs"]["nodes"] == ["node001", "node002", "node003", "node004"]
    assert job["time"].isoformat() == "2026-09-14T08:14:24+00:00" and job["time_quality"] == "exact"
    assert job["job_id"] == "123456" and job["host"] is None
    assert step["attrs"]["state"] == "CANCELLED" and step["attrs"]["state_by_uid"] == 0
    assert step["attrs"]["step"] == "0" and step["attrs"]["signal"] == "SIGKILL"


def test_parsable_P_local_time_and_sentinels():
    opts = ParseOptions(tz=ZoneInfo("America/New_York"), tz_known=False, year=2026)
    rows, w = _rows("State|JobID|Start|End|NodeList\nRUNNING|7|2026-09-14T08:00:00|Unknown|None assigned\n", opts)
    assert not w
    r = rows[0]
    assert r["attrs"]["start"] == "2026-09-14T12:00:00Z" and "end" not in r["attrs"] and "nodes" not in r["attrs"]
    assert r["time"].isoformat() == "2026-09-14T12:00:00+00:00" and r["time_quality"] == "estimated"


def test_json_versions():
    rows, w = _rows((GOLDEN / "json_v0044.json").read_text())
    assert not w
    assert [(r["attrs"]["step"], r["attrs"]["state"]) for r in rows] == [
        (None, "NODE_FAIL"), ("batch", "CANCELLED"), ("0", "CANCELLED"), ("1", "PENDING")]
    assert rows[0]["attrs"]["exit_code"] == "1:0" and rows[0]["attrs"]["restarts"] == 1
    assert rows[0]["attrs"]["failed_node"] == "node003"
    assert rows[2]["attrs"]["kill_request_user"] == "root" and rows[2]["attrs"]["signal"] == "SIGKILL"
    assert rows[0]["time"].isoformat() == "2026-09-14T08:14:24+00:00" and rows[0]["time_quality"] == "exact"
    assert rows[3]["time"] is None

    rows, w = _rows((GOLDEN / "json_v0039.json").read_text())
    assert not w
    assert rows[0]["attrs"]["state"] == "OUT_OF_MEMORY" and rows[0]["attrs"]["reason"] == "OutOfMemory"
    assert rows[1]["attrs"]["step"] == "batch" and rows[1]["attrs"]["exit_code"] == "0:9"
    assert rows[2]["attrs"]["step"] == "0"

    rows, _ = _rows((GOLDEN / "json_v0040.json").read_text())
    assert rows[0]["attrs"]["state"] == "TIMEOUT" and rows[0]["attrs"]["array_task_id"] == 7


def test_fixed_width_default_output():
    rows, w = _rows((GOLDEN / "fixed_width.txt").read_text())
    assert not w
    assert [r["attrs"]["state"] for r in rows] == ["NODE_FAIL", "CANCELLED", "CANCELLED"]
    assert rows[2]["attrs"]["state_truncated"] is True


def test_bad_inputs_never_raise():
    assert _rows("") == ([], [])
    rows, w = _rows(b"\x00\xff\xfe\x80garbage\n")
    assert rows == [] and w
    rows, w = _rows('{"meta": {}, "jobs": [1, {"job_id": "x"}, {"job_id": 5, "state": {"current": ["FAILED"]}}')
    assert rows == [] and len(w) == 1  # truncated JSON
    rows, w = _rows('{"meta": {}, "jobs": [1, {"job_id": "x"}, {"job_id": 5, "state": {"current": ["FAILED"]}}]}')
    assert [r["attrs"]["state"] for r in rows] == ["FAILED"] and len(w) == 2
    rows, w = _rows("JobID|State|ExitCode|\n123|FAILED|1:0|\n124|FAIL\n")
    assert len(rows) == 2 and len(w) == 1
    # a line of another source is not sacct
    rows, w = _rows("[2026-09-14T08:12:44.101] error: Nodes node003 not responding\n")
    assert rows == [] and len(w) == 1


def test_sniff():
    src = get_source("sacct")
    assert src.sniff("JobID|JobName|State|\n1|a|FAILED|\n", "out.txt") >= 0.95
    assert src.sniff('{\n  "meta": {"plugin": {}},\n  "jobs": []\n}', "x.json") >= 0.95
    assert src.sniff((GOLDEN / "fixed_width.txt").read_text(), "x") >= 0.9
    assert src.sniff("slurmstepd: error: *** JOB 1 ON n CANCELLED AT 2026-09-14T08:20:01 ***\n", "x") == 0.0
    assert src.sniff('{"log":"x","stream":"stderr","time":"2026-09-14T08:00:00"}', "x") == 0.0
