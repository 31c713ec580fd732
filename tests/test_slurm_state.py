"""One final Slurm state for the verdict and the classifier (crashscope.slurm_state), on the
inputs where the two earlier rules disagreed: the verdict took the alphabetically first state of
the job row and the batch step (NODE_FAIL and TIMEOUT jobs read as CANCELLED), the features took
the latest record of any job in the directory (a preemptor's PENDING row) or of any step."""

from __future__ import annotations

import polars as pl

from crashscope.classify import features
from crashscope.slurm_state import final_state, normalize_state
from crashscope.testing import parse_text
from crashscope.verdict import job_outcome

HEAD = "JobID|JobName|Partition|State|ExitCode|Start|End|NodeList\n"


def _sacct(rows: list[tuple[str, str, str]], name: str = "sacct.txt") -> pl.DataFrame:
    """sacct --parsable2 rows (job id, state, end)."""
    text = HEAD + "".join(f"{j}|{'batch' if j.endswith('.batch') else 'train'}|gpu|{s}|0:0|2026-02-05T17:00:00|{e}|node[001-002]\n"
                          for j, s, e in rows)
    df, warns = parse_text("sacct", text, name)
    assert not warns, warns
    return df


def _slurmctld(lines: list[str]) -> pl.DataFrame:
    df, _ = parse_text("slurm", "\n".join(lines) + "\n", "slurmctld.log")
    return df


def _feature_state(ev: pl.DataFrame, job_id: str | None = None) -> str:
    f: dict[str, float] = {}
    features._slurm(f, ev, {}, job_id)
    (hot,) = [k for k, v in f.items() if k.startswith("slurm:") and v]
    return hot.split(":", 1)[1]


def _both(ev: pl.DataFrame, job_id: str | None = None) -> tuple[str | None, str]:
    verdict_ev = ev if job_id is None else ev.filter(pl.col("job_id").is_null() | pl.col("job_id").str.starts_with(job_id))
    return job_outcome(verdict_ev), _feature_state(ev, job_id)


def test_the_job_row_beats_the_batch_step() -> None:
    # NODE_FAIL / TIMEOUT jobs: the batch step ends CANCELLED (SIGTERM) whatever the job's reason
    for job_state in ("NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED"):
        ev = _sacct([("8477843", job_state, "2026-02-05T17:37:21"), ("8477843.batch", "CANCELLED", "2026-02-05T17:37:21"),
                     ("8477843.0", "CANCELLED", "2026-02-05T17:37:20")])
        assert final_state(ev) == job_state
        assert _both(ev) == (job_state, job_state)


def test_a_requeued_job_ends_in_its_last_run() -> None:
    # PREEMPTED (first run, requeued), then COMPLETED (second run): the latest job row
    ev = pl.concat([
        _sacct([("27", "PREEMPTED", "2026-12-01T11:56:25"), ("27.batch", "CANCELLED", "2026-12-01T11:56:25")], "sacct_first.txt"),
        _sacct([("27", "COMPLETED", "2026-12-01T11:59:53"), ("27.batch", "COMPLETED", "2026-12-01T11:59:53")], "sacct.txt"),
    ])
    assert final_state(ev) == "COMPLETED"
    assert _both(ev) == ("COMPLETED", "COMPLETED")


def test_records_of_another_job_do_not_count() -> None:
    # the preemptor's sacct (job 24, still PENDING, later) beside the preempted job's own
    ev = pl.concat([_sacct([("23", "PREEMPTED", "2026-12-01T11:54:33"), ("23.batch", "CANCELLED", "2026-12-01T11:54:33")]),
                    _sacct([("24", "PENDING", "2026-12-01T11:54:34")], "sacct_preemptor.txt")])
    assert final_state(ev, "23") == "PREEMPTED"
    assert _both(ev, "23") == ("PREEMPTED", "PREEMPTED")


def test_steps_other_than_batch_never_give_the_jobs_state() -> None:
    ev = _sacct([("8477843.0", "CANCELLED", "2026-02-05T17:37:20"), ("8477843.extern", "COMPLETED", "2026-02-05T17:37:21")])
    assert final_state(ev) is None
    assert _both(ev) == (None, "missing")
    # the batch step is the last resort
    ev2 = pl.concat([ev, _sacct([("8477843.batch", "FAILED", "2026-02-05T17:37:19")], "sacct_batch.txt")])
    assert _both(ev2) == ("FAILED", "FAILED")


def test_sacct_beats_slurmctld_and_slurmctld_beats_the_batch_step() -> None:
    ctld = _slurmctld(["[2026-02-05T17:37:25.100] Time limit exhausted for JobId=8477843"])
    assert _both(ctld) == ("TIMEOUT", "TIMEOUT")
    batch = _sacct([("8477843.batch", "CANCELLED", "2026-02-05T17:37:21")])
    assert _both(pl.concat([batch, ctld])) == ("TIMEOUT", "TIMEOUT")
    job = _sacct([("8477843", "FAILED", "2026-02-05T17:37:21")], "sacct_job.txt")
    assert _both(pl.concat([ctld, job])) == ("FAILED", "FAILED")  # accounting is Slurm's verdict, even if earlier


def test_state_words_are_normalized() -> None:
    assert normalize_state("CANCELLED by 1000") == "CANCELLED"
    assert normalize_state("cancelled+") == "CANCELLED"
    assert normalize_state("  ") is None and normalize_state(None) is None
    ev = _sacct([("5", "CANCELLED by 1000", "2026-02-05T17:37:21")])
    assert _both(ev) == ("CANCELLED", "CANCELLED")
