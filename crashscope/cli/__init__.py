"""The ``crashscope`` command line. Each command group lives in its own module and
registers itself here; heavy imports (polars, sklearn) happen inside the commands so
``crashscope --help`` and the Slurm epilog start fast. torch is imported only by repro.

Exit codes:
  0  analysis ran (whatever the verdict); for `simulate`/`train`, success
  1  the job failed and a cause other than `none` was found (only with `analyze --fail-on-crash`)
  2  usage error (bad option, missing directory)
  3  nothing readable in the directory
"""

from __future__ import annotations

import typer

from crashscope.cli import analyze_cmd, rules_cmd, simulate_cmd, train_cmd

app = typer.Typer(
    name="crashscope",
    help="Find why a multi-node GPU training job died, from its log directory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (analyze_cmd, simulate_cmd, rules_cmd, train_cmd):
    _module.register(app)


def main() -> None:
    app()
