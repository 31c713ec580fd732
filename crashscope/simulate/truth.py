"""truth.json: the answer key, in the shape of the report contract (taxonomy.md) plus the generator's
own settings (layout, seed, options) so a scenario can be regenerated and judged."""

from __future__ import annotations

import json
import os
from typing import Any

from crashscope.simulate.job import Job


def build(job: Job, seed: int, options: dict[str, Any]) -> dict[str, Any]:
    evidence = []
    for e in job.evidence:
        if "file" not in e:  # a planted line that did not survive (e.g. cut by a dead node)
            continue
        evidence.append({k: e.get(k) for k in ("cause", "file", "line", "message", "text", "node", "rank", "time", "source")})
    evidence.sort(key=lambda e: (e["time"], e["file"], e["line"]))
    first = getattr(job, "first_item", None)
    if first is not None and "file" in first:
        ff = {"time": first["time"], "node": first["node"], "rank": first["rank"], "source": first["source"], "message": first["message"],
              "file": first["file"], "line": first["line"]}
    elif job.cause != "none" and evidence:
        e = evidence[0]
        ff = {k: e[k] for k in ("time", "node", "rank", "source", "message", "file", "line")}
    else:
        ff = None
    return {
        "schema_version": "1",
        "job": {"id": job.job_id, "nodes": list(job.hosts), "ranks": job.R},
        "cause": job.cause,
        "implicated": job.implicated,
        "first_failure": ff,
        "evidence": evidence,
        "confounders": job.confounders,
        "layout": job.layout,
        "seed": seed,
        "options": options,
    }


def write(out: str, truth: dict[str, Any]) -> None:
    with open(os.path.join(out, "truth.json"), "w", encoding="utf-8", newline="\n") as fh:
        json.dump(truth, fh, indent=2, sort_keys=False)
        fh.write("\n")
