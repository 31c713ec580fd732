"""The analysis' fast paths give what their plain reference paths give, on every fixture job.

* the rule engine: ``evaluate`` (one batched polars pass decides which rules' conditions hold
  anywhere, then only those run) == every rule through ``evaluate_rule`` on its own;
* the classifier: ``Model.predict_proba`` (plain Python, one row) == the numpy batch form
  ``proba_matrix`` to 1e-12, and the same after the report's rounding to 4 digits;
* the features: GPU telemetry attrs decoded once as a struct == one JSON path per key and
  row; kind counts with only the ``repeat`` rows decoded == a JSON path on every row;
  flat attrs read by a regex per key == the JSON decode;
* the timeline's lookups (only the rows with a null target looked up) == a left join of
  the whole frame and a coalesce.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from crashscope.classify import features as F
from crashscope.classify.model import default_model
from crashscope.engine.evaluate import default_rules, evaluate, evaluate_rule
from crashscope.pipeline import find, load_timeline
from crashscope.verdict import _this_job
from tests.factories import make_events

ROOT = Path(__file__).resolve().parent.parent
JOBS = sorted(p for p in (ROOT / "fixtures" / "jobs").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def analysed() -> dict[str, tuple]:
    out = {}
    for job in JOBS:
        loaded = load_timeline(job)
        tl = loaded.timeline
        ev = _this_job(tl.events, tl.job_id)
        out[job.name] = (tl, ev, find(ev, tl.world_size)[0])
    return out


def _key(findings: list) -> list:
    return [(f.rule_id, f.first_time, f.count, f.hosts, f.ranks, f.gpus, f.evidence) for f in findings]


def test_fixture_corpus_is_there() -> None:
    assert len(JOBS) >= 20


@pytest.mark.parametrize("job", [j.name for j in JOBS])
def test_batched_rules_equal_each_rule_alone(analysed: dict, job: str) -> None:
    tl, ev, _ = analysed[job]
    fast = evaluate(ev, expected_ranks=tl.world_size, include_experimental=True)
    plain = [evaluate_rule(r, ev, expected_ranks=tl.world_size) for r in default_rules() if r.status != "deprecated"]
    plain = [f for f in plain if f is not None]
    plain.sort(key=lambda f: (f.first_time is None, f.first_time or 0, f.rule_id))
    assert _key(fast) == _key(plain)
    assert fast or job.startswith("healthy"), "a failed fixture job fires some rule"


@pytest.mark.parametrize("job", [j.name for j in JOBS])
def test_plain_python_classifier_equals_numpy(analysed: dict, job: str) -> None:
    tl, _, findings = analysed[job]
    model = default_model()
    features = F.extract(tl, findings)
    plain = model.predict_proba(features)
    batch = model.proba_matrix(model.vector(features)[None, :])[0]
    for c, p in plain.items():
        q = float(batch[model.classes.index(c)])
        assert abs(p - q) <= 1e-12, (c, p, q)
        assert round(p, 4) == round(q, 4)
    assert math.isclose(sum(plain.values()), 1.0)


def _telemetry_reference(ev: pl.DataFrame) -> pl.DataFrame | None:
    """One JSON path per key and row (the features' former way)."""
    tel = ev.filter(pl.col("kind") == "gpu_telemetry")
    if tel.height == 0:
        return None
    return tel.select(
        pl.concat_str([pl.col("host").fill_null("?"), pl.col("gpu").fill_null(""), pl.col("gpu_index").cast(pl.String).fill_null("")], separator="|").alias("g"),
        F._attr("temperature", pl.Float64).alias("t"),
        pl.coalesce(F._attr("reasons_mask", pl.Int64), F._attr("mask", pl.Int64)).alias("m"),
        F._attr("sm_clock_mhz", pl.Float64).alias("clk"),
        F._attr("util", pl.Float64).alias("u"),
    )


def _counts_reference(ev: pl.DataFrame) -> dict[str, int]:
    rep = pl.col("attrs").str.json_path_match("$.repeat").cast(pl.Int64, strict=False).fill_null(1)
    return dict(ev.group_by(pl.col("kind").cast(pl.String).alias("k")).agg(rep.sum()).iter_rows())


@pytest.mark.parametrize("job", [j.name for j in JOBS])
def test_decoded_once_equals_json_paths(analysed: dict, job: str) -> None:
    tl, _, _ = analysed[job]
    ev = tl.events
    fast, ref = F.telemetry_frame(ev), _telemetry_reference(ev)
    assert (fast is None) == (ref is None)
    if fast is not None and ref is not None:
        assert fast.equals(ref)
    assert F.kind_counts(ev) == _counts_reference(ev)


def test_telemetry_odd_values_read_like_json_paths() -> None:
    """Strings, floats, nulls, missing keys and a value the struct decode refuses (a list:
    then every row is read key by key) come out as the JSON paths read them."""
    rows = [
        {"temperature": 60, "reasons_mask": 0, "sm_clock_mhz": 1410.5, "util": 99},
        {"temperature": "91", "mask": 72},
        {"temperature": None, "reasons_mask": None, "mask": 4},
        {"util": 50.0},
        {},
    ]
    ev = make_events(*[dict(t=i, kind="gpu_telemetry", source="gpu_csv", host="n1", gpu_index=i, attrs=a) for i, a in enumerate(rows)])
    assert F.telemetry_frame(ev).equals(_telemetry_reference(ev))  # type: ignore[union-attr]
    odd = make_events(*[dict(t=i, kind="gpu_telemetry", source="dcgm", host="n1", gpu_index=i, attrs=a) for i, a in enumerate([*rows, {"temperature": [1, 2]}])])
    assert F.telemetry_frame(odd).equals(_telemetry_reference(odd))  # type: ignore[union-attr]
    rep = make_events(dict(t=0, kind="xid", attrs={"repeat": 5}), dict(t=1, kind="xid", attrs={"repeat": "x"}), dict(t=2, kind="xid"), dict(t=3, kind="boot"))
    assert F.kind_counts(rep) == _counts_reference(rep) == {"xid": 7, "boot": 1}


def test_numpy_batch_form_still_serves_training() -> None:
    model = default_model()
    P = model.proba_matrix(np.zeros((3, len(model.features))))
    assert P.shape == (3, len(model.classes)) and np.allclose(P.sum(axis=1), 1.0)


def test_attrs_fields_read_like_json_paths_and_reuse_only_equal_rows() -> None:
    from crashscope.timeline import attrs_fields

    keys = ("a", "b")
    texts = ['{"a":1,"b":"x"}', '{"a": 2.5, "c": 3}', None, "{}", '{"b":true,"a":null}', '{"a":{"nested":1}}']

    def ref(s: pl.Series) -> pl.DataFrame:
        return s.rename("x").to_frame().select(*[pl.col("x").str.json_path_match(f"$.{k}").alias(k) for k in keys])

    plain = pl.Series(texts[:5], dtype=pl.String)
    first = attrs_fields(plain, keys)
    assert first.equals(ref(plain))
    assert attrs_fields(plain.clone(), keys) is first  # equal rows: decoded once
    odd = pl.Series(texts, dtype=pl.String)  # an object value: the struct decode refuses, paths read it
    assert attrs_fields(odd, keys).equals(ref(odd))
    other = pl.Series(['{"a":7}'] + texts[1:5], dtype=pl.String)
    assert attrs_fields(other, keys)["a"].to_list() == ["7", "2.5", None, None, None]


def test_attrs_fields_regex_path_reads_numbers_as_the_json_decode() -> None:
    """Flat rows are read by a regex per key; every other row by the JSON decode. Both give
    the same numbers (as the callers cast them) on the forms a key can take: numbers with
    exponents and spaces, strings, lists, nested objects that repeat a key, a key's name
    inside a string value, a row that is not an object, empty text, null."""
    from crashscope.timeline import _DECODED, _decode_fields, attrs_fields

    keys = ("temperature", "reasons_mask", "mask", "sm_clock_mhz", "util")
    rows = [
        '{"temperature":38,"power_w":73.97,"sm_clock_mhz":345,"util":0,"reasons_mask":1,"reasons":["gpu_idle"]}',
        '{"temperature": -4.5E+1 , "util" : 99}', '{"temperature":1e3,"util":"55"}', '{"util":"N/A","mask":12}',
        '{"x":{"util":3},"util":70}', '{"x":{"util":3}}', '{"util":[1]}', '{"note":"say \\"util\\":5","util":1}',
        '{"util":null,"sm_clock_mhz":1410.5}', '[]', '', None, '{"reasons_mask":"72","temperature":true}',
    ]
    attrs = pl.Series(rows, dtype=pl.String)
    _DECODED.clear()
    fast = attrs_fields(attrs, keys)
    ref = _decode_fields(attrs.rename("a").to_frame(), keys)
    for k in keys:
        for dtype in (pl.Float64, pl.Int64):
            assert fast[k].cast(dtype, strict=False).eq_missing(ref[k].cast(dtype, strict=False)).all(), (k, dtype)
    assert fast["util"].cast(pl.Float64, strict=False).to_list() == [0, 99, 55, None, 70, None, None, 1, None, None, None, None, None]


def test_timeline_lookups_fill_like_a_whole_frame_join() -> None:
    """The timeline's lookups (``_fill_nulls``: only rows with a null target and every key
    are looked up, their values put in place) give what a left join of the whole frame and
    a coalesce give, null keys and targets included; a table with a repeated key is joined
    whole, adding its rows, as before."""
    from crashscope.timeline import _fill_nulls

    ev = pl.DataFrame({
        "host": ["a", "a", None, "b", "b", "c", "a"], "pid": [1, 2, 1, 1, None, 3, 1],
        "rank": [None, 5, None, None, None, None, 9], "gpu": ["g0", None, None, None, None, None, None],
    }, schema={"host": pl.String, "pid": pl.Int64, "rank": pl.Int32, "gpu": pl.String})
    table = pl.DataFrame({"host": ["a", "b", "c", "d"], "pid": [1, 1, 3, 1], "_r": [0, 1, None, 3], "_g": ["ga", "gb", "gc", None]},
                         schema={"host": pl.String, "pid": pl.Int64, "_r": pl.Int32, "_g": pl.String})

    def plain(t: pl.DataFrame) -> pl.DataFrame:
        j = ev.join(t, on=["host", "pid"], how="left", maintain_order="left")
        return j.with_columns(pl.coalesce("rank", "_r").alias("rank"), pl.coalesce("gpu", "_g").alias("gpu")).drop("_r", "_g")

    got = _fill_nulls(ev, table, ["host", "pid"], {"rank": "_r", "gpu": "_g"})
    assert got.equals(plain(table))
    assert got["rank"].to_list() == [0, 5, None, 1, None, None, 9] and got["gpu"].to_list() == ["g0", None, None, "gb", None, "gc", "ga"]
    over = ev.join(table, on=["host", "pid"], how="left", maintain_order="left").with_columns(pl.coalesce("_r", "rank").alias("rank")).drop("_r", "_g")
    assert _fill_nulls(ev, table.drop("_g"), ["host", "pid"], {"rank": "_r"}, override=True).equals(over)  # the table's value wins
    twice = pl.concat([table, table.head(1).with_columns(pl.lit(7, pl.Int32).alias("_r"))])
    got = _fill_nulls(ev, twice, ["host", "pid"], {"rank": "_r", "gpu": "_g"})
    assert got.height == ev.height + 2 and got.sort(got.columns, nulls_last=True).equals(plain(twice).sort(got.columns, nulls_last=True))


@pytest.mark.parametrize("job", [j.name for j in JOBS])
def test_nccl_env_state_equals_one_row_at_a_time(analysed: dict, job: str) -> None:
    from crashscope.analyses import nccl_env

    _, ev, _ = analysed[job]
    assert nccl_env._collect(ev) == nccl_env._collect_rows(ev)


def test_nccl_env_state_equals_one_row_at_a_time_on_every_branch() -> None:
    """Settings (first value kept), a socket line before and after a network line, GPU Direct
    RDMA both ways, IB devices, a process known by (host, pid), by (host, file) when its pid is
    0, a host-less one, and attrs that are not JSON."""
    from crashscope.analyses import nccl_env

    rows = [
        dict(t=1, rank=0, kind="net_config", attrs={"transport": "env", "setting": "NCCL_IB_TIMEOUT", "value": 14}),
        dict(t=2, rank=0, kind="net_config", attrs={"transport": "env", "setting": "NCCL_IB_TIMEOUT", "value": 22}),
        dict(t=3, rank=1, kind="net_config", attrs={"transport": "env", "setting": "NCCL_IB_TIMEOUT", "value": "22"}),
        dict(t=4, rank=1, kind="net_config", attrs={"transport": "socket"}),
        dict(t=5, rank=1, kind="net_config", attrs={"transport": "socket", "network": "Socket"}),
        dict(t=6, rank=1, kind="net_config", attrs={"transport": "socket"}),
        dict(t=7, rank=2, kind="net_config", attrs={"transport": "ib", "network": "IB"}),
        dict(t=8, rank=2, kind="net_config", attrs={"transport": "socket"}),
        dict(t=9, rank=2, kind="net_config", attrs={"transport": "gdr", "network": "IB", "gdr": False}),
        dict(t=10, rank=2, kind="net_config", attrs={"transport": "gdr", "network": "ib", "gdr": True}),
        dict(t=11, rank=2, kind="net_config", attrs={"transport": "gdr", "network": "IB", "gdr": True}),
        dict(t=12, rank=3, host="node002", kind="net_config",
             attrs={"transport": "ib", "devices": ["mlx5_0:1/RoCE"], "link_layers": ["RoCE"], "oob_iface": "eth0"}),
        dict(t=13, rank=3, kind="net_config", attrs={"transport": "ib", "devices": [], "link_layers": None}),
        dict(time=None, rank=None, pid=4242, kind="net_config", attrs={"transport": "env", "setting": "NCCL_DEBUG", "value": "INFO"}),
        dict(t=14, rank=None, pid=0, file="env/node3.txt", kind="net_config", attrs={"transport": "env", "setting": "NCCL_DEBUG", "value": "WARN"}),
        dict(t=15, rank=None, host=None, pid=None, file=None, kind="net_config", attrs={"transport": "plugin", "network": "aws-ofi"}),
        dict(t=16, rank=4, kind="net_config", attrs="{not json"),
        dict(t=17, rank=4, kind="net_config", attrs=None),
        dict(t=18, rank=0, kind="log_error", attrs={"transport": "env", "setting": "NCCL_X", "value": 1}),
    ]
    ev = make_events(*rows)
    fast, plain = nccl_env._collect(ev), nccl_env._collect_rows(ev)
    assert fast == plain
    assert fast.who["rank 0"].settings["NCCL_IB_TIMEOUT"][0] == "14"
    assert fast.who["rank 1"].network is not None and fast.who["rank 1"].network[1].time is not None
    assert set(fast.who["rank 2"].gdr) == {False, True} and fast.ib_present
    assert {"rank 4", "node001:4242", "node001:env/node3.txt", "?:None"} <= set(fast.who)


def test_host_versions_grouped_equal_one_row_at_a_time() -> None:
    """The activity's versions per host: the last version of each component in time order,
    only the first 40 components a host names, non-string values and bad JSON left out."""
    import json
    import random

    from crashscope.report.build import MAX_COMPONENTS, _host_versions, _host_versions_rows

    rng = random.Random(7)
    for _ in range(40):
        rows = []
        for _ in range(rng.randint(0, 300)):
            comp = rng.choice([f"c{i}" for i in range(MAX_COMPONENTS + 8)] + [None, 3])
            ver = rng.choice(["1.0", "2.0", "2.1", None, 7])
            attrs = rng.choice([json.dumps({"component": comp, "version": ver}), "{bad", None])
            rows.append({"host": rng.choice(["n1", "n2", "n3"]), "time": rng.choice([None, *range(50)]), "attrs": attrs})
        frame = pl.DataFrame(rows, schema={"host": pl.String, "time": pl.Int64, "attrs": pl.String})
        assert dict(_host_versions(frame)) == _host_versions_rows(frame)


def _versions_reference(ver: pl.DataFrame) -> dict[str, float]:
    """The version features with a JSON path per row (the former way)."""
    f: dict[str, float] = {}
    d = ver.filter(pl.col("host").is_not_null()).select(
        F._attr("component").alias("c"), F._attr("version").alias("v"), "host").drop_nulls()
    if d.height == 0:
        return f
    per = d.group_by("c").agg(pl.col("v").n_unique().alias("n"), pl.col("host").n_unique().alias("h")).filter(pl.col("h") >= 2)
    if per.height == 0:
        return f
    differing = per.filter(pl.col("n") > 1)
    f["ver_components_differing"] = math.log1p(differing.height)
    f["ver_max_distinct"] = float(min(5, int(per["n"].max()))) - 1.0  # type: ignore[arg-type]
    names = set(differing["c"].to_list())
    for c in F.VERSION_COMPONENTS:
        f[f"ver_differs:{c}"] = 1.0 if c in names else 0.0
    return f


@pytest.mark.parametrize("job", [j.name for j in JOBS])
def test_version_features_read_once_per_text_equal_json_paths(analysed: dict, job: str) -> None:
    tl, _, _ = analysed[job]
    ver = tl.events.filter(pl.col("kind") == "version")
    extra = make_events(dict(kind="version", host="n9", attrs={"component": "driver", "version": "1"}),
                        dict(kind="version", host="n8", attrs={"component": "driver", "version": "2"}),
                        dict(kind="version", host=None, attrs={"component": "nccl", "version": "3"}),
                        dict(kind="version", host="n8", attrs=None))
    for frame in (ver, pl.concat([ver, extra]) if ver.height else extra):
        got: dict[str, float] = {}
        F._versions(got, frame)
        assert got == _versions_reference(frame)
