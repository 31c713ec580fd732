"""Key facts of the torchelastic error.json source."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from crashscope.sources import get_source
from crashscope.testing import parse_text

RECORD = {
    "message": {
        "message": "DistBackendError: [3] Watchdog caught collective operation timeout",
        "extraInfo": {
            "py_callstack": 'Traceback (most recent call last):\n  File "/w/train.py", line 12, in main\n    step()\n'
            "torch.distributed.DistBackendError: [3] Watchdog caught collective operation timeout\n",
            "timestamp": "1789612399",
        },
    }
}


def _rows(obj, name="logs/run1/attempt_2/3/error.json"):
    data = obj if isinstance(obj, (bytes, str)) else json.dumps(obj)
    df, warnings = parse_text("torchelastic", data, name)
    rows = df.to_dicts()
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return rows, warnings


def test_record_exception_file():
    rows, warnings = _rows(RECORD, name="node002/elastic/run1/attempt_2/3/error.json")
    assert warnings == []
    (r,) = rows
    assert r["kind"] == "exception" and r["severity"] == "error"
    assert r["time"] == datetime.fromtimestamp(1789612399, timezone.utc) and r["time_quality"] == "exact"
    assert r["local_rank"] == 3
    a = r["attrs"]
    assert a["type"] == "DistBackendError" and a["text"].startswith("[3] Watchdog")
    assert a["frames_top"] == "/w/train.py:12 in main"
    assert a["py_callstack_exc"].startswith("torch.distributed.DistBackendError:")
    assert a["attempt"] == 2


def test_error_code_and_archive_member_path():
    obj = json.loads(json.dumps(RECORD))
    obj["message"]["errorCode"] = -6
    rows, _ = _rows(obj, name="logs.tar.gz!run1/attempt_0/5/error.json")
    assert rows[0]["attrs"]["error_code"] == -6 and rows[0]["local_rank"] == 5


def test_legacy_shape():
    rows, _ = _rows({"message": "RuntimeError: boom", "timestamp": 1789612300}, name="error.json")
    (r,) = rows
    assert r["attrs"] == {"type": "RuntimeError", "text": "boom"}
    assert r["time"] == datetime.fromtimestamp(1789612300, timezone.utc)
    assert r["local_rank"] is None


def test_truncated_garbage_and_empty():
    rows, warnings = _rows(json.dumps(RECORD)[:60])
    assert rows == [] and len(warnings) == 1
    rows, warnings = _rows(b"\xff\xfe\x00\x81 not json")
    assert rows == [] and len(warnings) == 1
    rows, warnings = _rows("")
    assert rows == [] and warnings == []
    rows, warnings = _rows({"message": {"message": "X: y", "extraInfo": {"timestamp": "soon"}}})
    assert len(rows) == 1 and rows[0]["time"] is None and len(warnings) == 1


def test_other_json_gives_nothing():
    rows, warnings = _rows({"version": "2.4", "pg_config": {}}, name="trace.json")
    assert rows == [] and len(warnings) == 1


def test_sniff():
    src = get_source("torchelastic")
    assert src.sniff(json.dumps(RECORD), "error.json") == 0.95
    assert src.sniff(json.dumps({"message": "RuntimeError: x", "timestamp": 1}), "error.json") == 0.95
    assert src.sniff('{"version": "2.4"}', "x.json") == 0.0
    assert src.sniff("[E ProcessGroupNCCL.cpp:475] x", "x.log") == 0.0
    assert src.sniff("", "x.json") == 0.0
