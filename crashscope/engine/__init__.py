"""The rule engine: rules as YAML data (``rules/``), loaded by :func:`load_rules`, checked by
:mod:`crashscope.engine.validate`, evaluated over an events frame by :func:`evaluate`."""

from crashscope.engine.evaluate import DETECTORS, evaluate, evaluate_rule
from crashscope.engine.load import RuleError, RuleSet, load_rules
from crashscope.engine.model import Evidence, Finding, Issue, Rule

__all__ = ["DETECTORS", "Evidence", "Finding", "Issue", "Rule", "RuleError", "RuleSet", "evaluate", "evaluate_rule", "load_rules"]
