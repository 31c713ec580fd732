"""The shipped cause classifier: parameters in JSON, prediction in plain Python.

The model is a standardiser followed by a multinomial logistic regression, trained offline
by :mod:`crashscope.classify.train` with scikit-learn and stored as plain numbers (no
pickle/joblib: a model file is data, never code). Its probabilities are calibrated with a
single temperature ``T`` fitted on a held-out split: ``p = softmax((W @ z + b) / T)`` with
``z = (x - mean) / scale``.

File format (``crashscope/data/classifier.json``)::

    {"format": 1, "model_version": "...", "features_version": 1,
     "features": [...], "classes": [...],
     "scaler": {"mean": [...], "scale": [...]},
     "logistic": {"coef": [[...] per class], "intercept": [...]},
     "calibration": {"method": "temperature", "temperature": 1.3, ...},
     "training": {...description of the data and held-out metrics...}}

Loading checks that ``features`` equals :data:`crashscope.classify.features.FEATURES` and
that ``features_version`` matches, so a model trained for other features is refused with
a message saying how to retrain, instead of silently scoring the wrong columns.

One job is one row of ~140 features and ~11 classes: :meth:`Model.predict_proba` does that
arithmetic in plain Python (an analysis never imports numpy for it: ~0.1 s per process);
the batch forms :meth:`Model.logits` / :meth:`Model.proba_matrix` (training, evaluation)
use numpy. The two agree to ~1e-15 (summation order); tests check it on every fixture.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from crashscope.classify.features import FEATURES, FEATURES_VERSION

if TYPE_CHECKING:
    import numpy as np

FORMAT = 1
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "classifier.json"
ENV_VAR = "CRASHSCOPE_CLASSIFIER"  # path of a site-trained model used instead of the shipped one
RETRAIN_HINT = "retrain it with `crashscope train --out <path>` (see docs/classifier.md)"


class ClassifierError(ValueError):
    """A model file that cannot be used (unreadable, malformed, or for other features)."""


@dataclass(frozen=True)
class Model:
    """Parameters as loaded (tuples of floats) or as fitted (numpy arrays, in training)."""

    classes: tuple[str, ...]
    features: tuple[str, ...]
    mean: Any  # (d,)
    scale: Any  # (d,)
    coef: Any  # (k, d)
    intercept: Any  # (k,)
    temperature: float = 1.0
    model_version: str = ""
    features_version: int = FEATURES_VERSION
    calibration: Mapping[str, Any] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """Same as ``model_version`` (features version + a hash of the parameters)."""
        return self.model_version

    def values(self, features: Mapping[str, float]) -> list[float]:
        """Feature dict -> values in this model's order (absent or non-finite values are 0)."""
        out = []
        for name in self.features:
            v = features.get(name, 0.0)
            try:
                v = float(v)
            except (TypeError, ValueError):
                v = 0.0
            out.append(v if math.isfinite(v) else 0.0)
        return out

    def vector(self, features: Mapping[str, float]) -> np.ndarray:
        """:meth:`values` as a numpy vector."""
        import numpy as np

        return np.asarray(self.values(features), dtype=np.float64)

    def logits(self, X: np.ndarray) -> np.ndarray:
        """Uncalibrated class scores for rows of ``X`` (n, d)."""
        import numpy as np

        Z = (np.atleast_2d(X) - np.asarray(self.mean, dtype=np.float64)) / np.asarray(self.scale, dtype=np.float64)
        return Z @ np.asarray(self.coef, dtype=np.float64).T + np.asarray(self.intercept, dtype=np.float64)

    def proba_matrix(self, X: np.ndarray) -> np.ndarray:
        """Calibrated probabilities (n, k), rows summing to 1."""
        return softmax(self.logits(X) / self.temperature)

    @cached_property
    def _params(self) -> tuple[list[float], list[float], list[list[float]], list[float]]:
        return _flat(self.mean), _flat(self.scale), [_flat(r) for r in self.coef], _flat(self.intercept)

    def proba(self, x: Sequence[float]) -> list[float]:
        """Calibrated probabilities of one row ``x`` (in :attr:`features` order), in
        :attr:`classes` order: ``softmax((W @ ((x - mean) / scale) + b) / T)``."""
        mean, scale, coef, intercept = self._params
        z = [(v - m) / s for v, m, s in zip(x, mean, scale)]
        t = self.temperature
        logits = [(sum(w * v for w, v in zip(row, z)) + b) / t for row, b in zip(coef, intercept)]
        top = max(logits)
        e = [math.exp(v - top) for v in logits]
        total = sum(e)
        return [v / total for v in e]

    def predict_proba(self, features: Mapping[str, float]) -> dict[str, float]:
        """Calibrated probability of each class for one job's features (sums to 1).

        Args:
            features: the output of :func:`crashscope.classify.features.extract`.

        Returns:
            ``{cause: probability}`` for every class of the model, most likely first.
        """
        p = self.proba(self.values(features))
        order = sorted(range(len(self.classes)), key=lambda i: (-p[i], self.classes[i]))
        return {self.classes[i]: float(p[i]) for i in order}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "model_version": self.model_version,
            "features_version": self.features_version,
            "features": list(self.features),
            "classes": list(self.classes),
            "scaler": {"mean": _floats(self.mean), "scale": _floats(self.scale)},
            "logistic": {"coef": [_floats(r) for r in self.coef], "intercept": _floats(self.intercept)},
            "calibration": {"method": "temperature", "temperature": _round(self.temperature), **{k: v for k, v in self.calibration.items() if k not in ("method", "temperature")}},
            "training": dict(self.training),
        }


def softmax(L: np.ndarray) -> np.ndarray:
    import numpy as np

    L = L - L.max(axis=1, keepdims=True)
    E = np.exp(L)
    return E / E.sum(axis=1, keepdims=True)


def _round(v: float) -> float:
    # 10 significant digits: stable JSON across runs, far below any effect on predictions.
    return float(f"{float(v):.10g}")


def _flat(a: Any) -> list[float]:
    """A vector (a sequence or numpy array; nested ones flattened) as Python floats."""
    if hasattr(a, "ravel"):
        a = a.ravel().tolist()
    out: list[float] = []
    for v in a:
        if isinstance(v, (list, tuple)) or hasattr(v, "ravel"):
            out.extend(_flat(v))
        else:
            out.append(float(v))
    return out


def _floats(a: Sequence[float] | np.ndarray) -> list[float]:
    return [_round(v) for v in _flat(a)]


def dumps(model: Model) -> str:
    """Canonical JSON text of a model (sorted keys, fixed float precision, final newline)."""
    return json.dumps(model.to_json(), indent=1, sort_keys=True) + "\n"


def model_from_json(obj: Any, *, where: str = "model", check_features: bool = True) -> Model:
    """Build a :class:`Model` from parsed JSON, validating shapes and the feature list.

    Raises:
        ClassifierError: malformed file, or features that differ from ``FEATURES``.
    """
    if not isinstance(obj, dict):
        raise ClassifierError(f"{where}: not a JSON object")
    if obj.get("format") != FORMAT:
        raise ClassifierError(f"{where}: unsupported model format {obj.get('format')!r} (expected {FORMAT}); {RETRAIN_HINT}")
    try:
        features = tuple(str(x) for x in obj["features"])
        classes = tuple(str(x) for x in obj["classes"])
        mean = _vector(obj["scaler"]["mean"])
        scale = _vector(obj["scaler"]["scale"])
        coef = tuple(_vector(row) for row in _rows(obj["logistic"]["coef"]))
        intercept = _vector(obj["logistic"]["intercept"])
        cal = dict(obj.get("calibration") or {})
        temperature = float(cal.get("temperature", 1.0))
        fv = int(obj.get("features_version", -1))
    except (KeyError, TypeError, ValueError) as e:
        raise ClassifierError(f"{where}: malformed model file ({type(e).__name__}: {e}); {RETRAIN_HINT}") from None
    if check_features:
        if features != FEATURES:
            extra = [x for x in features if x not in FEATURES][:5]
            missing = [x for x in FEATURES if x not in features][:5]
            detail = f"missing {missing}, unknown {extra}" if (extra or missing) else "same names in another order"
            raise ClassifierError(
                f"{where}: its feature list does not match this crashscope's features ({detail}); {RETRAIN_HINT}"
            )
        if fv != FEATURES_VERSION:
            raise ClassifierError(f"{where}: trained for features version {fv}, this crashscope computes version {FEATURES_VERSION}; {RETRAIN_HINT}")
    d, k = len(features), len(classes)
    widths = sorted({len(row) for row in coef})
    if k < 2 or len(mean) != d or len(scale) != d or len(coef) != k or widths != [d] or len(intercept) != k:
        shape = f"({len(coef)}, {'/'.join(map(str, widths)) or 0})"
        raise ClassifierError(
            f"{where}: inconsistent shapes ({k} classes, {d} features, coef {shape}, intercept ({len(intercept)},)); {RETRAIN_HINT}"
        )
    if not all(math.isfinite(v) for v in (*mean, *scale, *intercept, *(v for row in coef for v in row))):
        raise ClassifierError(f"{where}: non-finite parameters; {RETRAIN_HINT}")
    if not math.isfinite(temperature) or temperature <= 0:
        raise ClassifierError(f"{where}: calibration temperature must be > 0, got {temperature}")
    scale = tuple(1.0 if v == 0 else v for v in scale)
    return Model(
        classes=classes,
        features=features,
        mean=mean,
        scale=scale,
        coef=coef,
        intercept=intercept,
        temperature=temperature,
        model_version=str(obj.get("model_version", "")),
        features_version=fv,
        calibration=cal,
        training=dict(obj.get("training") or {}),
    )


def _rows(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"expected a list of rows, got {type(v).__name__}")
    return v


def _vector(v: Any) -> tuple[float, ...]:
    """A JSON list of numbers as floats (TypeError/ValueError otherwise: malformed)."""
    if not isinstance(v, list):
        raise TypeError(f"expected a list of numbers, got {type(v).__name__}")
    return tuple(float(x) for x in v)


def load_model(path: Path | str | None = None) -> Model:
    """Load a model file (default: ``$CRASHSCOPE_CLASSIFIER`` when set, else the shipped
    ``crashscope/data/classifier.json``).

    Raises:
        ClassifierError: the file is missing, not JSON, malformed, or was trained for a
            different feature list.
    """
    if path is None:
        path = os.environ.get(ENV_VAR) or DEFAULT_PATH
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ClassifierError(f"{p}: cannot read the classifier model ({e.strerror or e}); {RETRAIN_HINT}") from None
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise ClassifierError(f"{p}: not valid JSON ({e}); {RETRAIN_HINT}") from None
    return model_from_json(obj, where=str(p))


_DEFAULT: Model | None = None


def default_model() -> Model:
    """``load_model()``, loaded once per process."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_model()
    return _DEFAULT


def predict_proba(features: Mapping[str, float], model: Model | None = None) -> dict[str, float]:
    """``{cause: probability}`` for one job's features with ``model`` (default: shipped)."""
    return (model or default_model()).predict_proba(features)
