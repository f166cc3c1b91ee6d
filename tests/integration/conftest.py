from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.stack import Stack, running_stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    with running_stack(settings, tmp_path) as s:
        yield s
