"""`crashscope rules check|list|docs`: validate, list and document the rule files.

Exit codes of `rules check`: 0 no errors (warnings allowed unless --strict), 1 errors found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

rules_app = typer.Typer(help="Validate, list and document detection rules (rules/**/*.yaml).", no_args_is_help=True)

RulesOpt = typer.Option(None, "--rules", help="Rules folder (default: rules/ of the repository or $CRASHSCOPE_RULES).")


@rules_app.command("check")
def check_cmd(
    rules: Optional[Path] = RulesOpt,
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    examples: bool = typer.Option(True, "--examples/--no-examples", help="Also run every rule's hit/miss examples."),
) -> None:
    """Validate every rule file; print `path:line: severity: check [id]: message. Fix: ...`.

    Example:
        crashscope rules check --rules rules/
    """
    from crashscope.engine.load import load_rules
    from crashscope.engine.validate import check, check_examples

    rs = load_rules(rules)
    issues = check(ruleset=rs)
    if examples:
        issues += check_examples(rs)
    for i in issues:
        typer.echo(str(i), err=False)
    errors = sum(i.severity == "error" for i in issues)
    warnings = len(issues) - errors
    typer.echo(f"{len(rs.rules)} rules in {len(rs.files)} files: {errors} errors, {warnings} warnings", err=True)
    raise typer.Exit(1 if errors or (strict and warnings) else 0)


@rules_app.command("list")
def list_cmd(
    rules: Optional[Path] = RulesOpt,
    cause: Optional[str] = typer.Option(None, "--cause", help="Only rules for this cause label."),
) -> None:
    """List rules: id, status, role, cause, weight, title.

    Example:
        crashscope rules list --cause fabric_timeout
    """
    from crashscope.engine.load import load_rules

    rs = load_rules(rules)
    for r in sorted(rs.rules, key=lambda r: (r.cause, r.id)):
        if cause and r.cause != cause:
            continue
        typer.echo(f"{r.id:40} {r.status:12} {r.role:8} {r.cause:15} {r.weight:4.2f}  {r.title}")


@rules_app.command("docs")
def docs_cmd(
    rules: Optional[Path] = RulesOpt,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of standard output (e.g. docs/rules.md)."),
) -> None:
    """Generate the rules reference (docs/rules.md) from the rule files.

    Example:
        crashscope rules docs -o docs/rules.md
    """
    from crashscope.engine.docs import render_rules_md
    from crashscope.engine.load import load_rules

    text = render_rules_md(load_rules(rules).rules)
    if output:
        output.write_text(text, encoding="utf-8")
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
