"""Deprecated name of :mod:`crashscope.pipeline`, kept while callers move to it.

``crashscope.analyze`` *is* the pipeline module (the same object in ``sys.modules``), so
``from crashscope.analyze import analyze`` and a test that patches an attribute of it
keep working. New code imports :mod:`crashscope.pipeline` (stages) and
:mod:`crashscope.report.build` (the report)."""

from __future__ import annotations

import sys

from crashscope import pipeline as _pipeline
from crashscope.pipeline import analyze, load_timeline, resolve_tz

__all__ = ["analyze", "load_timeline", "resolve_tz"]

sys.modules[__name__] = _pipeline
