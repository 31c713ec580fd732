"""JSON-lines logging records (one JSON object a line, the time in a field) are stamped lines."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from crashscope.pipeline import load_timeline


def test_json_lines_records_give_time_level_rank_and_host(tmp_path: Path) -> None:
    d = tmp_path / "job" / "logs"
    d.mkdir(parents=True)
    (d / "train.jsonl").write_text(
        '{"ts": "2026-12-03T14:01:51.848851+00:00", "level": "DEBUG", "rank": 2, "host": "n2", "msg": "train_step", "step": 12}\n'
        '{"timestamp": 1796306565.158, "level": "error", "rank": 2, "host": "n2", "msg": "Training failed at rank 2: '
        'RuntimeError", "exc": "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16106"}\n'
        '{"text": "x\\n", "record": {"time": {"repr": "2026-12-03 14:03:00", "timestamp": 1796306580.0}, "level": '
        '{"name": "WARNING"}, "message": "slow step", "name": "__main__", "extra": {"rank": 3}}}\n'
        "{'loss': 1.0, 'epoch': 0.5}\n")
    ev = load_timeline(tmp_path / "job").timeline.events
    loss = ev.filter(pl.col("kind") == "network_error")
    assert loss.height == 1 and loss["rank"][0] == 2 and loss["time"][0] is not None
    assert loss["time"][0].timestamp() == 1796306565.158
    act = ev.filter((pl.col("source") == "applog") & (pl.col("rank") == 2))
    assert act.height and act["time"].min().isoformat().startswith("2026-12-03T14:01:51.848851")
    assert set(act["host"].drop_nulls()) <= {"n2"}
    assert ev.filter((pl.col("source") == "applog") & (pl.col("rank") == 3)).height
