"""Only what pyproject.toml cannot say: the packages, plus the top-level ``rules/`` folder
shipped inside the wheel as the package ``crashscope._rules`` (read with
importlib.resources by ``crashscope.engine.load``). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

EXCLUDE = ["*.__pycache__", "*.__pycache__.*"]
RULE_PACKAGES = ["crashscope._rules", *(f"crashscope._rules.{p}" for p in find_namespace_packages(where="rules", exclude=EXCLUDE))]

setup(
    packages=[*find_namespace_packages(include=["crashscope", "crashscope.*"], exclude=EXCLUDE), *RULE_PACKAGES],
    package_dir={"crashscope._rules": "rules"},
)
