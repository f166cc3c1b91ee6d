"""One request's path through the worker: it goes down the service's modules, not back
and forth (the tracer and its definitions: :mod:`tests.support.request_path`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from app.worker import service as service_module
from app.worker.service import TimerService
from tests.support import request_path
from tests.support.request_path import documented, listing, measure, reentries

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: At most this many times back in the entry module after leaving it.
MAX_REENTRIES = 3


def test_one_request_comes_back_to_its_entry_module_at_most_three_times() -> None:
    path = measure()
    # The count is over the whole path, not an empty trace: the request went through
    # its intake, the unit of work, the store and the output before it returned.
    assert path.entry == "app.worker.service"
    for module in (
        "app.worker.service_requests",
        "app.worker.unit_of_work",
        "app.worker.partition_store",
        "app.worker.output",
    ):
        assert module in path.modules, module
    assert path.reentries == reentries(path.modules, path.entry)
    assert path.reentries <= MAX_REENTRIES, listing(path)


def test_the_count_counts_returns_and_callbacks() -> None:
    assert reentries(["a", "b", "a", "c", "a"], "a") == 2
    assert reentries(["a", "b", "c"], "a") == 0
    assert reentries([], "a") == 0


def _in_module(module: ModuleType, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, called through a function defined in ``module`` (as a helper of that
    module's would be)."""
    namespace: dict[str, Any] = {"__name__": module.__name__, "fn": fn}
    exec("def helper(*args, **kwargs):\n    return fn(*args, **kwargs)\n", namespace)
    return namespace["helper"]  # type: ignore[no-any-return]


def test_a_path_that_keeps_coming_back_to_the_service_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check can fail: with four of the steps the request module takes run through
    helpers of service.py (as they were before the split), the path comes back to it
    each time."""
    for name in ("_partition", "_account_fired", "_stores_held", "_export_keys"):
        monkeypatch.setattr(
            TimerService, name, _in_module(service_module, getattr(TimerService, name))
        )
    path = measure()
    assert path.reentries > MAX_REENTRIES, listing(path)


def test_docs_architecture_lists_the_path_as_it_is() -> None:
    """docs/architecture.md's listing is the measured one; after a change of the path,
    ``python -m tests.support.request_path --write docs/architecture.md``."""
    assert documented(DOC.read_text()) == listing(measure())


def test_the_listing_block_round_trips() -> None:
    text = "a\n  b"
    document = f"before\n{request_path.block('old')}\nafter\n"
    replaced = request_path.replace_block(document, text)
    assert documented(replaced) == text
    assert replaced.startswith("before\n") and replaced.endswith("\nafter\n")
