"""Golden tests for every source: real-format lines in, events out.

Layout: ``tests/golden/<source>/<case>.<ext>`` is the input (composed in the exact real
format), ``<case>.expected.jsonl`` the events it must give, one JSON object per event,
plus a last line ``{"warnings": N}``. Regenerate with ``pytest --update-goldens`` and read
the diff: an expected file is a claim about the real format.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from crashscope.sources.base import ParseOptions
from crashscope.testing import parse_text

GOLDEN = Path(__file__).parent / "golden"
from crashscope.schema import SOURCE_NAMES

CASES = sorted(
    p for p in GOLDEN.glob("*/*")
    if p.parent.name in SOURCE_NAMES and p.is_file() and ".expected." not in p.name and p.name != "README.md"
)
COLUMNS = ["line", "kind", "severity", "time", "time_quality", "host", "rank", "local_rank", "gpu", "gpu_index", "pid", "job_id", "attrs", "message"]


def _expected_path(case: Path) -> Path:
    return case.with_name(case.name.split(".")[0] + ".expected.jsonl")


def _render(df: pl.DataFrame, n_warnings: int) -> str:
    rows = df.with_columns(pl.col("time").dt.strftime("%Y-%m-%dT%H:%M:%S%.9fZ")).select(COLUMNS).to_dicts()
    out = []
    for r in rows:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else None
        out.append(json.dumps({k: v for k, v in r.items() if v is not None}, sort_keys=True))
    out.append(json.dumps({"warnings": n_warnings}))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_golden(case: Path, update_goldens: bool) -> None:
    # Goldens are read as if the node's zone were UTC and the job ran in 2026.
    from zoneinfo import ZoneInfo

    opts = ParseOptions(tz=ZoneInfo("UTC"), tz_known=True, year=2026, month=9)
    df, warnings = parse_text(case.parent.name, case.read_bytes(), case.name, options=opts)
    got = _render(df, len(warnings))
    expected = _expected_path(case)
    if update_goldens or not expected.exists():
        expected.write_text(got)
        if not update_goldens:
            pytest.fail(f"wrote new golden {expected}; review it and rerun")
    assert got == expected.read_text(), f"golden mismatch for {case}; if intended: pytest {__file__} --update-goldens"
