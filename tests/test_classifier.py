"""The cause classifier: features, the shipped model file, and reproducible training."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from crashscope.classify import features as F
from crashscope.classify.model import DEFAULT_PATH, ClassifierError, dumps, load_model, model_from_json
from crashscope.classify.train import Sample, TrainingError, fit, find_labeled, read_label
from crashscope.engine.model import Finding
from crashscope.timeline import Timeline, collapse_symptoms
from tests.factories import SEC, T0, make_events


def _finding(rule_id: str, cause: str, role: str, weight: float, t: float | None, hosts=(), ranks=(), status="stable") -> Finding:
    return Finding(
        rule_id=rule_id, title=rule_id, cause=cause, role=role, status=status, weight=weight,
        first_time=None if t is None else T0 + int(t * SEC), count=1, hosts=tuple(hosts), ranks=tuple(ranks),
        gpus=(), evidence=(), explanation="", actions=(),
    )


def _timeline() -> tuple[Timeline, list[Finding]]:
    """4 ranks on 2 hosts: rank 3 has an IB error at t=10, ranks 0-2 time out at t=600."""
    rows = [
        dict(t=0, kind="version", source="versions", host="node001", attrs={"component": "driver", "version": "550.54.15"}),
        dict(t=0, kind="version", source="versions", host="node002", attrs={"component": "driver", "version": "535.104.05"}),
        dict(t=0, kind="version", source="versions", host="node001", attrs={"component": "nccl", "version": "2.21.5"}),
        dict(t=0, kind="version", source="versions", host="node002", attrs={"component": "nccl", "version": "2.21.5"}),
        dict(t=5, kind="gpu_telemetry", source="gpu_csv", host="node001", gpu_index=0, attrs={"temperature": 60, "reasons_mask": 0}),
        dict(t=5, kind="gpu_telemetry", source="gpu_csv", host="node002", gpu_index=0, attrs={"temperature": 91, "reasons_mask": 0x48}),
        dict(t=10, kind="network_error", host="node002", rank=3, attrs={"transport": "ib", "status": "12"}),
        dict(t=12, kind="link_event", source="kernel", host="node002", attrs={"device": "mlx5_0", "state": "down"}),
        dict(t=20, kind="exception", source="pytorch", host="node001", rank=1, attrs={"type": "RuntimeError"}),
        *[dict(t=600 + r, kind="collective_timeout", source="pytorch", host="node001" if r < 2 else "node002", rank=r,
               message="Watchdog caught collective operation timeout", attrs={"seq": 5012, "op": "ALLREDUCE", "pg_id": "0"})
          for r in range(3)],
        dict(t=700, kind="job_state", source="sacct", host=None, attrs={"state": "FAILED", "step": None}),
        dict(t=700, kind="job_cancel", source="slurm", host="node001", attrs={"entity": "step", "reason": None}),
    ]
    ev = make_events(*rows)
    groups = collapse_symptoms(ev, 4)
    tl = Timeline(ev, "123", ["node001", "node002"], 4, [0, 1, 2, 3], {}, groups, [], T0, T0 + 700 * SEC)
    findings = [
        _finding("nccl-ib-completion-error", "fabric_timeout", "cause", 0.9, 10, hosts=["node002"], ranks=[3]),
        _finding("kernel-mlx5-link-down", "fabric_timeout", "cause", 0.7, 12, hosts=["node002"]),
        _finding("pytorch-collective-timeout", "fabric_timeout", "symptom", 0.25, 600, hosts=["node001", "node002"], ranks=[0, 1, 2]),
        _finding("late-oom", "oom", "cause", 0.8, 660, hosts=["node001"], ranks=[0]),
        _finding("exp-rule", "gpu_hardware", "cause", 0.99, 1, status="experimental"),
    ]
    return tl, findings


def test_features_fixed_and_unique() -> None:
    assert len(F.FEATURES) == len(set(F.FEATURES))
    assert F.FEATURES[0] == "cause_w:fabric_timeout"
    assert "cause_w:none" not in F.FEATURES


def test_extract_handmade_timeline() -> None:
    tl, findings = _timeline()
    f = F.extract(tl, findings)
    assert list(f) == list(F.FEATURES)
    assert all(isinstance(v, float) and math.isfinite(v) for v in f.values())
    assert f["cause_w:fabric_timeout"] == 0.9
    assert f["cause_before:fabric_timeout"] == 1.0
    assert f["cause_lead_min:fabric_timeout"] == pytest.approx((600 - 10) / 60)
    assert f["symptom_w:fabric_timeout"] == 0.25
    assert f["cause_w:oom"] == 0.8 and f["cause_before:oom"] == 0.0  # after the first timeout
    assert f["cause_lead_min:oom"] == pytest.approx(-1.0)
    assert f["cause_w:gpu_hardware"] == 0.0  # experimental findings are ignored
    assert f["n_cause"] == pytest.approx(math.log1p(3)) and f["n_symptom"] == pytest.approx(math.log1p(1))
    assert f["n_cause_labels"] == 2.0
    assert f["cause_host_spread"] == 1.0  # node002 (fabric) + node001 (oom)
    assert f["cause_rank_spread"] == pytest.approx(2 / 4)
    assert f["timeout_cover"] == pytest.approx(3 / 4)
    assert f["timeout_missing_frac"] == pytest.approx(1 / 4)
    assert f["timeout_missing_log"] == pytest.approx(math.log1p(1))
    assert f["ver_differs:driver"] == 1.0 and f["ver_differs:nccl"] == 0.0
    assert f["ver_components_differing"] == pytest.approx(math.log1p(1)) and f["ver_max_distinct"] == 1.0
    assert f["temp_max"] == pytest.approx(0.91)
    assert f["temp_excess"] == pytest.approx((91 - 75.5) / 10)
    assert f["throttle_any"] == 1.0  # mask 0x48: HW slowdown + thermal
    assert f["kernel_coverage"] == 0.5
    assert f["slurm:FAILED"] == 1.0 and f["slurm:missing"] == 0.0 and f["slurm:COMPLETED"] == 0.0
    assert f["cancel:other"] == 1.0 and f["cancel:preemption"] == 0.0
    assert f["exception_first"] == 1.0 and f["exception_ranks_frac"] == pytest.approx(0.25)
    assert f["kind:collective_timeout"] == pytest.approx(math.log1p(3))
    assert f["kind:network_error"] == pytest.approx(math.log1p(1))
    assert f["kind:xid"] == 0.0


def test_extract_empty_timeline() -> None:
    from crashscope.schema import empty_events

    tl = Timeline(empty_events(), None, [], None, [], {}, [], [])
    f = F.extract(tl, [])
    assert list(f) == list(F.FEATURES)
    assert f["slurm:missing"] == 1.0
    assert sum(v for k, v in f.items() if k != "slurm:missing") == 0.0


def test_shipped_model_matches_code() -> None:
    m = load_model(DEFAULT_PATH)
    assert m.features == F.FEATURES
    assert m.features_version == F.FEATURES_VERSION
    assert m.version == m.model_version != ""
    raw = json.loads(DEFAULT_PATH.read_text())
    assert raw["features"] == list(F.FEATURES)
    assert raw["model_version"].startswith(f"{F.FEATURES_VERSION}.")
    assert set(m.classes) <= set(__import__("crashscope.schema", fromlist=["CAUSES"]).CAUSES)
    assert "none" in m.classes and "fabric_timeout" in m.classes


def test_shipped_model_probabilities() -> None:
    m = load_model(DEFAULT_PATH)
    tl, findings = _timeline()
    p = m.predict_proba(F.extract(tl, findings))
    assert set(p) == set(m.classes)
    assert sum(p.values()) == pytest.approx(1.0)
    assert all(0.0 <= v <= 1.0 for v in p.values())
    assert list(p.values()) == sorted(p.values(), reverse=True)
    # missing / junk features are zeros, never an exception
    q = m.predict_proba({"cause_w:oom": float("nan"), "no-such-feature": 3.0})
    assert sum(q.values()) == pytest.approx(1.0)


def test_predict_needs_no_sklearn() -> None:
    code = (
        "import sys; from crashscope.classify.model import load_model, predict_proba; "
        "p = predict_proba({}); assert abs(sum(p.values()) - 1) < 1e-9; "
        "assert not any(m == 'sklearn' or m.startswith('sklearn.') for m in sys.modules), 'sklearn imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_site_model_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = json.loads(DEFAULT_PATH.read_text())
    p = tmp_path / "site.json"
    p.write_text(json.dumps(dict(raw, model_version="1.site")))
    monkeypatch.setenv("CRASHSCOPE_CLASSIFIER", str(p))
    assert load_model().model_version == "1.site"
    monkeypatch.setenv("CRASHSCOPE_CLASSIFIER", str(tmp_path / "absent.json"))
    with pytest.raises(ClassifierError, match="absent.json"):
        load_model()


def test_wrong_feature_list_is_refused(tmp_path: Path) -> None:
    raw = json.loads(DEFAULT_PATH.read_text())
    bad = dict(raw, features=raw["features"][:-1] + ["kind:something_else"])
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ClassifierError, match="feature list does not match.*crashscope train"):
        load_model(p)
    swapped = dict(raw, features=[raw["features"][1], raw["features"][0], *raw["features"][2:]])
    p.write_text(json.dumps(swapped))
    with pytest.raises(ClassifierError, match="another order"):
        load_model(p)
    p.write_text(json.dumps(dict(raw, features_version=raw["features_version"] + 1)))
    with pytest.raises(ClassifierError, match="features version"):
        load_model(p)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda r: r.update(format=99), "format"),
        (lambda r: r["logistic"].update(intercept=[0.0]), "shapes"),
        (lambda r: r["calibration"].update(temperature=0), "temperature"),
        (lambda r: r.pop("scaler"), "malformed"),
    ],
)
def test_malformed_model_is_refused(tmp_path: Path, mutate, match: str) -> None:
    raw = json.loads(DEFAULT_PATH.read_text())
    mutate(raw)
    with pytest.raises(ClassifierError, match=match):
        model_from_json(raw)
    (tmp_path / "m.json").write_text("{not json")
    with pytest.raises(ClassifierError, match="not valid JSON"):
        load_model(tmp_path / "m.json")
    with pytest.raises(ClassifierError, match="cannot read"):
        load_model(tmp_path / "absent.json")


def _synthetic(n: int = 30) -> list[Sample]:
    rng = np.random.default_rng(3)
    out = []
    for label, key in (("fabric_timeout", "cause_w:fabric_timeout"), ("oom", "cause_w:oom"), ("none", "slurm:COMPLETED")):
        for i in range(n):
            f = dict.fromkeys(F.FEATURES, 0.0)
            f[key] = float(rng.uniform(0.5, 1.0))
            f["n_cause"] = float(rng.uniform(0, 2))
            out.append(Sample(label, f"{label}{i}", f))
    return out


def test_fit_is_deterministic_and_round_trips() -> None:
    a, b = fit(_synthetic(), seed=5), fit(_synthetic(), seed=5)
    assert dumps(a) == dumps(b)
    m = model_from_json(json.loads(dumps(a)))
    assert m.classes == ("fabric_timeout", "none", "oom")
    assert 1.0 <= m.temperature <= 10.0 and "fold" in m.calibration["held_out"]
    f = dict.fromkeys(F.FEATURES, 0.0)
    f["cause_w:oom"] = 0.9
    p = m.predict_proba(f)
    assert next(iter(p)) == "oom" and sum(p.values()) == pytest.approx(1.0)
    assert np.allclose(m.proba_matrix(np.zeros((1, len(F.FEATURES)))).sum(), 1.0)
    with pytest.raises(TrainingError):
        fit([s for s in _synthetic() if s.label == "oom"])


def test_labels(tmp_path: Path) -> None:
    (tmp_path / "a" / "job1").mkdir(parents=True)
    (tmp_path / "a" / "job1" / "crashscope-label.json").write_text('{"cause": "oom", "nodes": ["node003"], "note": "ticket 42"}')
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "truth.json").write_text('{"schema_version": "1", "cause": "gpu_hardware"}')
    (tmp_path / "c").mkdir()
    assert read_label(tmp_path / "c") is None
    found = find_labeled([tmp_path])
    assert [(p.relative_to(tmp_path).as_posix(), c) for p, c in found] == [("a/job1", "oom"), ("b", "gpu_hardware")]
    (tmp_path / "c" / "crashscope-label.json").write_text('{"cause": "cosmic_rays"}')
    with pytest.raises(TrainingError, match="must be one of"):
        read_label(tmp_path / "c")


@pytest.mark.slow
def test_train_command_is_deterministic(tmp_path: Path) -> None:
    """Two `crashscope train` runs on the same tiny labeled corpus write identical JSON."""
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    from crashscope.cli import train_cmd
    from crashscope.simulate import simulate

    corpus = tmp_path / "incidents"
    for cause, seed in (("oom", 11), ("oom", 12), ("preemption", 13), ("preemption", 14)):
        job = corpus / f"{cause}-{seed}"
        simulate(job, cause=cause, nodes=2, gpus_per_node=2, seed=seed, confounders=[])
        (job / "truth.json").unlink()
        (job / "crashscope-label.json").write_text(json.dumps({"cause": cause, "nodes": [], "note": "test"}))
    app = typer.Typer()
    train_cmd.register(app)
    app.command("noop")(lambda: None)  # a second command keeps `train` a named subcommand
    outs = []
    for i in range(2):
        out = tmp_path / f"model{i}.json"
        r = CliRunner().invoke(app, ["train", str(corpus), "--simulate", "0", "--out", str(out), "-j", "1", "-q"])
        assert r.exit_code == 0, r.output
        assert "trained on 4 jobs" in r.output
        outs.append(out.read_text())
    assert outs[0] == outs[1]
    m = load_model(tmp_path / "model0.json")
    assert m.classes == ("oom", "preemption")
    assert m.training["site_jobs"] == 4


# -- features from traces and telemetry -------------------------------------------------------------

def test_trace_and_telemetry_features_from_a_simulated_job(tmp_path: Path) -> None:
    """The training path (job_features) sees what the report's classifier sees: the Flight
    Recorder analysis' finding (the rank stuck in I/O never entered collective N), the dump's
    initiator, a dump that was not collected, and GPU telemetry."""
    from crashscope.classify.train import job_features
    from crashscope.simulate import simulate

    d = tmp_path / "stall"
    simulate(d, cause="storage_stall", nodes=2, gpus_per_node=4, seed=1, stack=3, traces=True, confounders=[], variant="rank0_save")
    (d / "truth.json").unlink()
    f = job_features(d)
    assert f["fr_dumps"] == 1.0 and f["fr_missing_frac"] == 0.0
    assert f["coll_never_entered_frac"] == pytest.approx(1 / 8)  # rank 0 of 8
    assert f["cause_w:node_failure"] == pytest.approx(0.6)  # fr-hang: an analysis finding, not a rule's
    assert f["dump_signal_seen"] == 1.0 and f["dump_signal_silent_frac"] == 0.0
    assert f["throttle_gpus_frac"] == 0.0 and f["clock_deficit"] == 0.0
    next(d.rglob("nccl_trace_rank_5.json")).unlink()
    g = job_features(d)
    assert g["fr_missing_frac"] == pytest.approx(1 / 8) and g["coll_never_entered_frac"] == pytest.approx(1 / 8)

    t = tmp_path / "throttle"
    simulate(t, cause="gpu_throttle", nodes=2, gpus_per_node=4, seed=2, stack=3, confounders=[])
    (t / "truth.json").unlink()
    h = job_features(t)
    assert h["throttle_gpus_frac"] == pytest.approx(1 / 8)  # one GPU of 8 in HW slowdown
    assert 0.3 < h["clock_deficit"] < 0.7
    assert h["fr_dumps"] == 0.0 and h["dump_signal_seen"] == 0.0  # traces off: no dump-signal lines
