"""Loud degradations: the parts of crashscope whose absence would silently weaken every
verdict. :func:`component_warnings` returns them as report warnings; the CLI also prints
them on standard error. (A source module that fails to import breaks the source registry
import itself, which the CLI reports as an error with exit code 4.)"""

from __future__ import annotations


def classifier_warnings() -> list[str]:
    """A warning when the shipped cause classifier does not load (verdicts then use the rules alone)."""
    try:
        from crashscope.classify.model import default_model

        default_model()
    except Exception as e:  # any failure: missing file, bad JSON, feature mismatch, import error
        return [f"the cause classifier failed to load ({type(e).__name__}: {str(e)[:200]}); verdicts use the rules alone"]
    return []


def component_warnings() -> list[str]:
    """Rule-set and classifier problems, in words (empty when all is well)."""
    from crashscope.engine.load import rule_set_warnings

    return rule_set_warnings() + classifier_warnings()
