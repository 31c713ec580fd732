"""Retrain the cause classifier reproducibly from labeled job directories.

Training data is the simulator's corpus (``crashscope.simulate.simulate``: one job per
cause label except ``unknown``, seeds from :data:`TRAIN_SEED_BASE`, sizes 2x2 ... 8x8,
random layouts with confounders, and some jobs stripped of one source: see
:data:`DROPS`) plus any site incidents: a job directory holding
``crashscope-label.json`` (``{"cause": "<label>", "nodes": [...], "note": "..."}``) or the
simulator's ``truth.json``. Every job goes through the real pipeline
(``analyze(dir, use_classifier=False)`` -> ``evaluate`` -> ``features.extract``), so the
model sees exactly what it will see in production.

The fit: ``StandardScaler`` + multinomial ``LogisticRegression`` (L2, balanced class
weights). Stratified k-fold out-of-fold logits choose the L2 strength from :data:`C_GRID`
and fit one softmax temperature (negative log-likelihood on held-out jobs only); the final
model is then refit on every job.
Fixed seeds give byte-identical model JSON. Simulated jobs are written to a temporary
directory and deleted after their features are taken.

``TEST_SEED_BASE`` seeds (disjoint from the training seeds) give the accuracy reported in
the model's ``training.test`` block and in docs/classifier.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from crashscope.classify.features import FEATURES, FEATURES_VERSION
from crashscope.classify.model import Model, dumps
from crashscope.schema import CAUSES

log = logging.getLogger(__name__)

LABEL_FILE = "crashscope-label.json"
TRUTH_FILE = "truth.json"
TRAIN_SEED_BASE = 1000
TEST_SEED_BASE = 9000
C_GRID: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0)
# Temperature scaling only softens (T >= 1): the simulated corpus is close to separable, and
# sharpening to fit it would claim a certainty that real, messier incidents do not support.
TEMPERATURE_RANGE: tuple[float, float] = (1.0, 10.0)
# Confounders (benign warnings, old Xids, a user scancel, a second problem...) are drawn per
# job with this rate, alternating by seed, so half the corpus is noisier than the default.
CONFOUNDER_RATES: tuple[float, ...] = (0.3, 0.6)
# Real incident directories often lack a whole source. With probability DROP_RATE (drawn
# from the seed) one group of collected files is deleted before analysis, so the model
# learns not to hang on a single source.
DROP_RATE = 0.3
DROPS: dict[str, tuple[str, ...]] = {
    "no_sacct": ("sacct*", "slurmctld*"),
    "no_kernel": ("dmesg*", "journal-kernel*", "kern.log*", "syslog*"),
    "no_telemetry": ("gpu-telemetry*", "nvidia-smi*"),
}
# (nodes, gpus_per_node) cycled per seed: small jobs dominate real incident tickets.
SIZES: tuple[tuple[int, int], ...] = ((2, 2), (2, 4), (3, 2), (4, 2), (2, 8), (4, 4), (4, 8), (8, 4), (8, 8))
SIM_CAUSES: tuple[str, ...] = tuple(c for c in CAUSES if c != "unknown")


class TrainingError(ValueError):
    """Not enough usable labeled jobs, or a bad label file."""


@dataclass(frozen=True)
class Sample:
    """One labeled job: where it came from and its features (None until extracted)."""

    label: str
    origin: str  # "sim:<cause>:<seed>:<nodes>x<gpus>" or the directory path
    features: dict[str, float] | None = None


@dataclass
class TrainResult:
    model: Model
    train_counts: dict[str, int]
    test: dict[str, Any] | None = None
    failures: list[str] = field(default_factory=list)


# --- labeled data ---------------------------------------------------------------------------


def read_label(job_dir: Path) -> str | None:
    """The cause label of a job directory, from ``crashscope-label.json`` or ``truth.json``.

    Raises:
        TrainingError: the label file exists but is not JSON or names no valid cause.
    """
    for name in (LABEL_FILE, TRUTH_FILE):
        p = job_dir / name
        if not p.is_file():
            continue
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TrainingError(f"{p}: cannot read the label ({e})") from None
        cause = obj.get("cause") if isinstance(obj, dict) else None
        if cause is None and isinstance(obj, dict) and isinstance(obj.get("truth"), dict):
            cause = obj["truth"].get("cause")
        if cause not in CAUSES:
            raise TrainingError(f"{p}: \"cause\" must be one of {', '.join(CAUSES)}; got {cause!r}")
        return str(cause)
    return None


def find_labeled(dirs: Iterable[Path | str]) -> list[tuple[Path, str]]:
    """Labeled job directories at or below ``dirs`` (a labeled directory is not descended)."""
    out: list[tuple[Path, str]] = []
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            raise TrainingError(f"{root}: not a directory")
        stack = [root]
        while stack:
            cur = stack.pop()
            label = read_label(cur)
            if label is not None:
                out.append((cur, label))
                continue
            try:
                subs = sorted((p for p in cur.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True)
            except OSError:
                continue
            stack.extend(subs)
    return sorted(out, key=lambda x: str(x[0]))


# --- feature extraction (runs in worker processes) ------------------------------------------


def job_features(job_dir: Path | str) -> dict[str, float]:
    """Run the real pipeline on one job directory and return its features."""
    from crashscope.classify.features import extract
    from crashscope.pipeline import find, load_timeline
    from crashscope.verdict import _this_job

    # exactly what the report's classifier sees: this job's events, the rules' findings and the
    # cross-rank analyses' (Flight Recorder, watchdog, traces, stragglers, silence); the rules
    # alone left every analysis-derived feature at 0 in training
    tl = load_timeline(Path(job_dir)).timeline
    findings, _ = find(_this_job(tl.events, tl.job_id), tl.world_size)
    return extract(tl, findings)


def sim_spec(cause: str, seed: int) -> tuple[str, int, int, int]:
    n, g = SIZES[seed % len(SIZES)]
    return cause, seed, n, g


TRACES_RATE = 0.5  # share of simulated jobs with dump-on-timeout lines and (mostly) Flight Recorder dumps


def traces_for(seed: int) -> bool:
    """Whether a simulated training job writes the torch >= 2.4 dump-on-timeout lines and dumps."""
    import random

    return random.Random(seed * 104729 + 3).random() < TRACES_RATE


def drop_for(seed: int) -> str | None:
    """Which file group (a key of :data:`DROPS`) a simulated job loses, if any."""
    import random

    rng = random.Random(seed * 7919 + 17)
    return rng.choice(sorted(DROPS)) if rng.random() < DROP_RATE else None


def apply_drop(job: Path, drop: str | None) -> int:
    """Delete the files of ``drop``'s group under ``job``; returns how many."""
    if drop is None:
        return 0
    n = 0
    for pat in DROPS[drop]:
        for p in sorted(job.rglob(pat)):
            if p.is_file():
                p.unlink()
                n += 1
    return n


def _sim_worker(spec: tuple[str, int, int, int]) -> tuple[str, dict[str, float] | None, str]:
    cause, seed, n, g = spec
    drop = drop_for(seed)
    origin = f"sim:{cause}:{seed}:{n}x{g}" + (f":{drop}" if drop else "")
    tmp = tempfile.mkdtemp(prefix="crashscope-train-")
    try:
        from crashscope.simulate import simulate

        out = Path(tmp) / "job"
        # Layout, confounders (at the rate CONFOUNDER_RATES picks), variant, versions, zones
        # and clocks are all drawn from the seed.
        simulate(out, cause=cause, nodes=n, gpus_per_node=g, seed=seed, confounder_rate=CONFOUNDER_RATES[seed % len(CONFOUNDER_RATES)],
                 traces=traces_for(seed))
        (out / TRUTH_FILE).unlink(missing_ok=True)  # the answer key must not be read as a log
        apply_drop(out, drop)
        return origin, job_features(out), ""
    except Exception as e:  # noqa: BLE001 - one bad job must not stop a training run
        return origin, None, f"{origin}: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _dir_worker(path: str) -> tuple[str, dict[str, float] | None, str]:
    try:
        return path, job_features(path), ""
    except Exception as e:  # noqa: BLE001
        return path, None, f"{path}: {type(e).__name__}: {e}"


def _run(worker: Callable[[Any], tuple[str, dict[str, float] | None, str]], items: Sequence[Any], jobs: int,
         progress: Callable[[str], None] | None) -> list[tuple[str, dict[str, float] | None, str]]:
    if jobs <= 1 or len(items) <= 1:
        results = []
        for it in items:
            results.append(worker(it))
            if progress:
                progress(results[-1][0])
        return results
    # spawn: polars' thread pool does not survive fork.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as ex:
        results = []
        for r in ex.map(worker, items, chunksize=1):
            results.append(r)
            if progress:
                progress(r[0])
        return results


def simulated_samples(n_per_cause: int, seed_base: int, *, causes: Sequence[str] = SIM_CAUSES, jobs: int = 1,
                      progress: Callable[[str], None] | None = None) -> tuple[list[Sample], list[str]]:
    """Simulate ``n_per_cause`` jobs per cause with seeds ``seed_base + i`` and featurize them."""
    specs = [sim_spec(c, seed_base + i) for c in causes for i in range(n_per_cause)]
    samples, failures = [], []
    for origin, feats, err in _run(_sim_worker, specs, jobs, progress):
        if feats is None:
            failures.append(err)
        else:
            samples.append(Sample(origin.split(":")[1], origin, feats))
    return samples, failures


def directory_samples(dirs: Iterable[Path | str], *, jobs: int = 1,
                      progress: Callable[[str], None] | None = None) -> tuple[list[Sample], list[str]]:
    found = find_labeled(dirs)
    labels = {str(p): c for p, c in found}
    samples, failures = [], []
    for origin, feats, err in _run(_dir_worker, [str(p) for p, _ in found], jobs, progress):
        if feats is None:
            failures.append(err)
        else:
            samples.append(Sample(labels[origin], origin, feats))
    return samples, failures


# --- fitting --------------------------------------------------------------------------------


def matrix(samples: Sequence[Sample]) -> np.ndarray:
    return np.array([[float((s.features or {}).get(n, 0.0)) for n in FEATURES] for s in samples], dtype=np.float64)


def _fit_lr(X: np.ndarray, y: Sequence[str], c: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """Scaler + multinomial logistic regression; returns (mean, scale, coef, intercept, classes)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(X)
    scale = np.where(scaler.scale_ == 0, 1.0, scaler.scale_)
    clf = LogisticRegression(C=c, class_weight="balanced", max_iter=5000, tol=1e-8, random_state=seed)
    clf.fit((X - scaler.mean_) / scale, list(y))
    coef, intercept = clf.coef_, clf.intercept_
    if len(clf.classes_) == 2:  # sklearn stores one row for two classes: expand to the softmax form
        coef = np.vstack([-coef[0] / 2, coef[0] / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    return scaler.mean_.copy(), scale, coef.copy(), intercept.copy(), tuple(str(x) for x in clf.classes_)


def _oof_logits(X: np.ndarray, y: Sequence[str], classes: tuple[str, ...], c: float, seed: int, folds: int) -> np.ndarray:
    """Out-of-fold logits: every sample scored by a model that did not see it."""
    from sklearn.model_selection import StratifiedKFold

    out = np.zeros((len(y), len(classes)))
    ya = np.array(y)
    for tr, te in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(X, ya):
        mean, scale, coef, intercept, cls = _fit_lr(X[tr], ya[tr], c, seed)
        L = ((X[te] - mean) / scale) @ coef.T + intercept
        full = np.full((len(te), len(classes)), L.min() - 20.0)  # a class absent from the fold
        for j, cl in enumerate(cls):
            full[:, classes.index(cl)] = L[:, j]
        out[te] = full
    return out


def fit_temperature(logits: np.ndarray, y_idx: np.ndarray) -> float:
    """The temperature minimising held-out NLL, searched on log T within
    [log TEMPERATURE_RANGE[0], log TEMPERATURE_RANGE[1]] (golden section)."""
    if len(y_idx) == 0:
        return 1.0

    def nll(log_t: float) -> float:
        L = logits / math.exp(log_t)
        L = L - L.max(axis=1, keepdims=True)
        lse = np.log(np.exp(L).sum(axis=1))
        return float(np.mean(lse - L[np.arange(len(y_idx)), y_idx]))

    a, b = math.log(TEMPERATURE_RANGE[0]), math.log(TEMPERATURE_RANGE[1])
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = nll(c), nll(d)
    for _ in range(60):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = nll(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = nll(d)
    return math.exp((a + b) / 2)


def fit(samples: Sequence[Sample], *, seed: int = 0, c_grid: Sequence[float] = C_GRID,
        description: dict[str, Any] | None = None) -> Model:
    """Fit the scaler + logistic regression and calibrate it.

    With at least two samples of every class, stratified k-fold (k = min(5, smallest
    class)) gives out-of-fold logits; the L2 strength ``C`` with the lowest out-of-fold NLL
    after temperature scaling is chosen from ``c_grid``, the temperature is fitted on those
    held-out logits, and the final model is refit on all samples. Otherwise ``C`` is the
    first of ``c_grid`` and the temperature 1.

    Raises:
        TrainingError: fewer than two classes.
    """
    y = [s.label for s in samples]
    counts = Counter(y)
    if len(counts) < 2:
        raise TrainingError(f"need labeled jobs of at least two causes, got {sorted(counts) or 'none'}")
    X = matrix(samples)
    classes = tuple(sorted(counts))
    folds = min(5, min(counts.values()))
    cal: dict[str, Any] = {"method": "temperature", "held_out": "none"}
    best_c, temperature = float(c_grid[0]), 1.0
    if folds >= 2:
        yi = np.array([classes.index(v) for v in y])
        best = None
        for c in c_grid:
            L = _oof_logits(X, y, classes, float(c), seed, folds)
            t = fit_temperature(L, yi)
            score = _nll(softmax_rows(L / t), yi)
            if best is None or score < best[0] - 1e-12:
                best = (score, float(c), t, L)
        assert best is not None
        score, best_c, temperature, L = best
        cal = {
            "method": "temperature",
            "held_out": f"{folds}-fold out-of-fold logits ({len(y)} jobs)",
            "nll_before": round(_nll(softmax_rows(L), yi), 4),
            "nll_after": round(score, 4),
            "held_out_accuracy": round(float(np.mean(L.argmax(axis=1) == yi)), 4),
            "range": list(TEMPERATURE_RANGE),
        }
    mean, scale, coef, intercept, cls = _fit_lr(X, y, best_c, seed)
    training = dict(description or {})
    training.update({"samples": len(y), "class_counts": dict(sorted(counts.items())), "seed": seed, "C": best_c, "C_grid": list(c_grid)})
    body = Model(cls, FEATURES, mean, scale, coef, intercept, temperature, "", FEATURES_VERSION, cal, training)
    digest = hashlib.sha256(dumps(body).encode()).hexdigest()[:12]
    return Model(cls, FEATURES, mean, scale, coef, intercept, temperature, f"{FEATURES_VERSION}.{digest}", FEATURES_VERSION, cal, training)


def softmax_rows(L: np.ndarray) -> np.ndarray:
    from crashscope.classify.model import softmax

    return softmax(L)


def _nll(P: np.ndarray, yi: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(P[np.arange(len(yi)), yi], 1e-12, 1.0))))


# --- evaluation -----------------------------------------------------------------------------


def evaluate_model(model: Model, samples: Sequence[Sample]) -> dict[str, Any]:
    """Top-1 accuracy, per-class recall, confusion counts (true -> predicted) and mean NLL."""
    if not samples:
        return {"n": 0}
    P = model.proba_matrix(matrix(samples))
    pred = [model.classes[i] for i in P.argmax(axis=1)]
    truth = [s.label for s in samples]
    confusion: dict[str, dict[str, int]] = {}
    for t, p in zip(truth, pred):
        confusion.setdefault(t, {})
        confusion[t][p] = confusion[t].get(p, 0) + 1
    recall = {t: round(row.get(t, 0) / sum(row.values()), 3) for t, row in sorted(confusion.items())}
    yi = np.array([model.classes.index(t) if t in model.classes else -1 for t in truth])
    known = yi >= 0
    nll = _nll(P[known], yi[known]) if known.any() else float("nan")
    conf_top = float(np.mean(P.max(axis=1)))
    errors = sorted(f"{s.origin}: {t} -> {p}" for s, t, p in zip(samples, truth, pred) if t != p)
    by_drop: dict[str, list[bool]] = {}
    for s, t, p in zip(samples, truth, pred):
        tag = s.origin.split(":")[4] if s.origin.startswith("sim:") and s.origin.count(":") >= 4 else "complete"
        by_drop.setdefault(tag, []).append(t == p)
    return {
        "accuracy_by_data": {k: {"n": len(v), "accuracy": round(sum(v) / len(v), 4)} for k, v in sorted(by_drop.items())},
        "n": len(samples),
        "accuracy": round(sum(t == p for t, p in zip(truth, pred)) / len(samples), 4),
        "mean_confidence": round(conf_top, 4),
        "nll": round(nll, 4),
        "recall": recall,
        "confusion": {t: dict(sorted(row.items())) for t, row in sorted(confusion.items())},
        "errors": errors,
    }


# --- the one entry point --------------------------------------------------------------------


def train(
    dirs: Sequence[Path | str] = (),
    *,
    simulate_per_cause: int = 40,
    test_per_cause: int = 0,
    seed: int = 0,
    jobs: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Build the training set, fit and (optionally) score on a disjoint simulated test set.

    Args:
        dirs: directories holding labeled jobs (searched recursively).
        simulate_per_cause: simulated training jobs per cause (0: only ``dirs``).
        test_per_cause: simulated test jobs per cause, seeds from ``TEST_SEED_BASE + seed``.
        seed: shifts every simulator seed and the split; same seed -> same model JSON.
        jobs: worker processes (default: CPU count, at most 8).

    Raises:
        TrainingError: no usable labeled jobs, or fewer than two causes.
    """
    jobs = jobs or min(8, os.cpu_count() or 1)
    samples: list[Sample] = []
    failures: list[str] = []
    if simulate_per_cause > 0:
        s, f = simulated_samples(simulate_per_cause, TRAIN_SEED_BASE + seed, jobs=jobs, progress=progress)
        samples += s
        failures += f
    site = 0
    if dirs:
        s, f = directory_samples(dirs, jobs=jobs, progress=progress)
        site = len(s)
        samples += s
        failures += f
    if not samples:
        raise TrainingError("no labeled jobs to train on (give directories with crashscope-label.json, or --simulate N)")
    description = {
        "data": "crashscope.simulate corpus (seeds TRAIN_SEED_BASE+seed ...) and site-labeled job directories",
        "simulated_per_cause": simulate_per_cause,
        "simulated_seeds": [TRAIN_SEED_BASE + seed, TRAIN_SEED_BASE + seed + max(simulate_per_cause - 1, 0)] if simulate_per_cause else [],
        "sizes": [f"{n}x{g}" for n, g in SIZES],
        "confounder_rates": list(CONFOUNDER_RATES),
        "drop_rate": DROP_RATE,
        "drops": {k: list(v) for k, v in DROPS.items()},
        "site_jobs": site,
        "failed_jobs": len(failures),
    }
    model = fit(samples, seed=seed, description=description)
    result = TrainResult(model, dict(sorted(Counter(s.label for s in samples).items())), failures=failures)
    if test_per_cause > 0:
        test, f = simulated_samples(test_per_cause, TEST_SEED_BASE + seed, jobs=jobs, progress=progress)
        result.failures += f
        result.test = evaluate_model(model, test)
        result.test["seeds"] = [TEST_SEED_BASE + seed, TEST_SEED_BASE + seed + test_per_cause - 1]
        summary = {k: v for k, v in result.test.items() if k != "errors"}
        training = dict(model.training)
        training["test"] = summary
        model = Model(model.classes, model.features, model.mean, model.scale, model.coef, model.intercept,
                      model.temperature, model.model_version, model.features_version, model.calibration, training)
        result.model = model
    return result


def write_model(model: Model, out: Path | str) -> Path:
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps(model), encoding="utf-8")
    return p
