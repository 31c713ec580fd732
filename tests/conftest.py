from __future__ import annotations

import pytest

from slurm_cluster import slurm_cluster  # noqa: F401  (session fixture: a throw-away real Slurm, tests/slurm_cluster.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite expected golden outputs from the current code (review the diff!)",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))
