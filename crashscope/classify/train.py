"""Retrain the cause classifier reproducibly from labeled job directories.

Training data is the simulator's corpus (``crashscope.simulate.simulate``: one job per
cause label except ``unknown``, seeds from :data:`TRAIN_SEED_BASE`, sizes 2x2 ... 8x8,
random layouts with confounders) plus any site incidents: a job directory holding
``crashscope-label.json`` (``{"cause": "<label>", "nodes": [...], "note": "..."}``) or the
simulator's ``truth.json``. Every job goes through the real pipeline
(``analyze(dir, use_classifier=False)`` -> ``evaluate`` -> ``features.extract``), so the
model sees exactly what it will see in production.

The fit: ``StandardScaler`` + multinomial ``LogisticRegression`` (L2, balanced class
weights) on a stratified part of the data, then one softmax temperature fitted by
minimising the negative log-likelihood on the held-out rest (:data:`CALIBRATION_FRACTION`).
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
CALIBRATION_FRACTION = 0.25
C_REGULARISATION = 1.0
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
    from crashscope.analyze import analyze
    from crashscope.classify.features import extract
    from crashscope.engine.evaluate import evaluate

    _, tl, _ = analyze(job_dir, use_classifier=False)
    findings = evaluate(tl.events, expected_ranks=tl.world_size)
    return extract(tl, findings)


def sim_spec(cause: str, seed: int) -> tuple[str, int, int, int]:
    n, g = SIZES[seed % len(SIZES)]
    return cause, seed, n, g


def _sim_worker(spec: tuple[str, int, int, int]) -> tuple[str, dict[str, float] | None, str]:
    cause, seed, n, g = spec
    origin = f"sim:{cause}:{seed}:{n}x{g}"
    tmp = tempfile.mkdtemp(prefix="crashscope-train-")
    try:
        from crashscope.simulate import simulate

        out = Path(tmp) / "job"
        # Layout, confounders (each with the simulator's default rate), versions, zones and
        # clocks are all drawn from the seed.
        simulate(out, cause=cause, nodes=n, gpus_per_node=g, seed=seed)
        (out / TRUTH_FILE).unlink(missing_ok=True)  # the answer key must not be read as a log
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
    labels = {f"sim:{c}:{s}:{n}x{g}": c for c, s, n, g in specs}
    samples, failures = [], []
    for origin, feats, err in _run(_sim_worker, specs, jobs, progress):
        if feats is None:
            failures.append(err)
        else:
            samples.append(Sample(labels[origin], origin, feats))
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


def _split(y: Sequence[str], frac: float, seed: int) -> tuple[list[int], list[int]]:
    """Stratified split: per class, ``frac`` of its samples (at least 1 when it has 3+) held out."""
    rng = np.random.default_rng(seed)
    fit, cal = [], []
    for c in sorted(set(y)):
        idx = [i for i, v in enumerate(y) if v == c]
        idx = [idx[j] for j in rng.permutation(len(idx))]
        k = int(round(len(idx) * frac)) if len(idx) >= 3 else 0
        cal += idx[:k]
        fit += idx[k:]
    return sorted(fit), sorted(cal)


def fit_temperature(logits: np.ndarray, y_idx: np.ndarray) -> float:
    """The temperature minimising held-out NLL (golden-section search on log T in [-3, 3])."""
    if len(y_idx) == 0:
        return 1.0

    def nll(log_t: float) -> float:
        L = logits / math.exp(log_t)
        L = L - L.max(axis=1, keepdims=True)
        lse = np.log(np.exp(L).sum(axis=1))
        return float(np.mean(lse - L[np.arange(len(y_idx)), y_idx]))

    a, b = -3.0, 3.0
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = nll(c), nll(d)
    for _ in range(80):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = nll(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = nll(d)
    return math.exp((a + b) / 2)


def fit(samples: Sequence[Sample], *, seed: int = 0, c: float = C_REGULARISATION,
        calibration_fraction: float = CALIBRATION_FRACTION, description: dict[str, Any] | None = None) -> Model:
    """Fit scaler + logistic regression, then a temperature on the held-out split.

    Raises:
        TrainingError: fewer than two classes, or no samples.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    y = [s.label for s in samples]
    classes = tuple(sorted(set(y)))
    if len(classes) < 2:
        raise TrainingError(f"need labeled jobs of at least two causes, got {list(classes) or 'none'}")
    X = matrix(samples)
    fit_i, cal_i = _split(y, calibration_fraction, seed)
    scaler = StandardScaler().fit(X[fit_i])
    clf = LogisticRegression(C=c, class_weight="balanced", max_iter=5000, tol=1e-8, random_state=seed)
    clf.fit(scaler.transform(X[fit_i]), [y[i] for i in fit_i])
    coef, intercept = clf.coef_, clf.intercept_
    if len(clf.classes_) == 2:  # binary sklearn stores one row: expand to the symmetric softmax form
        coef = np.vstack([-coef[0] / 2, coef[0] / 2])
        intercept = np.array([-intercept[0] / 2, intercept[0] / 2])
    model_classes = tuple(str(x) for x in clf.classes_)
    scale = np.where(scaler.scale_ == 0, 1.0, scaler.scale_)
    base = Model(model_classes, FEATURES, scaler.mean_.copy(), scale, coef.copy(), intercept.copy())
    cal_info: dict[str, Any] = {"held_out": len(cal_i)}
    temperature = 1.0
    if cal_i:
        logits = base.logits(X[cal_i])
        yi = np.array([model_classes.index(y[i]) for i in cal_i])
        temperature = fit_temperature(logits, yi)
        before = _nll(softmax_rows(logits), yi)
        after = _nll(softmax_rows(logits / temperature), yi)
        cal_info.update({"nll_before": round(before, 4), "nll_after": round(after, 4),
                         "held_out_accuracy": round(float(np.mean(logits.argmax(axis=1) == yi)), 4)})
    training = dict(description or {})
    training.update({"fit_samples": len(fit_i), "class_counts": dict(sorted(Counter(y).items())), "seed": seed, "C": c})
    body = Model(model_classes, FEATURES, base.mean, base.scale, base.coef, base.intercept, temperature,
                 "", FEATURES_VERSION, {"method": "temperature", **cal_info}, training)
    digest = hashlib.sha256(dumps(body).encode()).hexdigest()[:12]
    return Model(model_classes, FEATURES, base.mean, base.scale, base.coef, base.intercept, temperature,
                 f"{FEATURES_VERSION}.{digest}", FEATURES_VERSION, body.calibration, training)


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
    return {
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
    simulate_per_cause: int = 24,
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
