"""`crashscope rules check|list|docs`: validate, list and document the rule files.

Exit codes of `rules check`: 0 no errors (warnings allowed unless --strict), 1 errors found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

rules_app = typer.Typer(help="Validate, list and document detection rules (rules/**/*.yaml).", no_args_is_help=True, rich_markup_mode=None,
                        context_settings={"help_option_names": ["-h", "--help"]})

RulesOpt = typer.Option(None, "--rules", metavar="DIR", help="A site's own rules folder, on top of the shipped rules (repeatable; also $CRASHSCOPE_RULES).")
NoShippedOpt = typer.Option(False, "--no-shipped", help="Only the --rules folders, not the shipped rules.")


def _ruleset(rules: Optional[list[Path]], no_shipped: bool):  # type: ignore[no-untyped-def]
    """The rule set a command works on: shipped + $CRASHSCOPE_RULES + --rules, or with
    --no-shipped only the --rules folders."""
    from crashscope.cli.analyze_cmd import configure_rules
    from crashscope.engine.load import load_rules
    from crashscope.errors import UsageError

    if not no_shipped:
        configure_rules(rules)
        return load_rules()
    if not rules:
        raise UsageError("--no-shipped needs at least one --rules DIR")
    configure_rules(rules)  # checks they are folders
    rs = load_rules(rules[0])
    for d in rules[1:]:
        more = load_rules(d)
        rs.rules += more.rules
        rs.issues += more.issues
        rs.files += more.files
    rs.roots = list(rules)
    return rs


@rules_app.command("check")
def check_cmd(
    rules: Optional[list[Path]] = RulesOpt,
    no_shipped: bool = NoShippedOpt,
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    examples: bool = typer.Option(True, "--examples/--no-examples", help="Also run every rule's hit/miss examples."),
) -> None:
    """Validate every rule file; print `path:line: severity: check [id]: message. Fix: ...`.

    Example:
        crashscope rules check --strict
        crashscope rules check --no-shipped --rules /site/rules
    """
    from crashscope.engine.validate import check, check_examples

    rs = _ruleset(rules, no_shipped)
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
    rules: Optional[list[Path]] = RulesOpt,
    no_shipped: bool = NoShippedOpt,
    cause: Optional[str] = typer.Option(None, "--cause", metavar="CAUSE", help="Only rules for this cause label."),
) -> None:
    """List rules: id, status, role, cause, weight, title.

    Example:
        crashscope rules list --cause fabric_timeout
    """
    rs = _ruleset(rules, no_shipped)
    for r in sorted(rs.rules, key=lambda r: (r.cause, r.id)):
        if cause and r.cause != cause:
            continue
        typer.echo(f"{r.id:40} {r.status:12} {r.role:8} {r.cause:15} {r.weight:4.2f}  {r.title}")


@rules_app.command("docs")
def docs_cmd(
    rules: Optional[list[Path]] = RulesOpt,
    no_shipped: bool = NoShippedOpt,
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write here instead of standard output (e.g. docs/rules.md)."),
) -> None:
    """Generate the rules reference (docs/rules.md) from the rule files.

    Example:
        crashscope rules docs -o docs/rules.md
    """
    from crashscope.engine.docs import render_rules_md
    from crashscope.report.output import SafeOutput

    target = SafeOutput(output) if output and str(output) != "-" else None
    text = render_rules_md(_ruleset(rules, no_shipped).rules)
    if target is not None:
        target.write_text(text)
    else:
        typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
