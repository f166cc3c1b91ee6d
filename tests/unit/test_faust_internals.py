"""The private Faust/aiokafka attributes the worker relies on are all still there."""

from __future__ import annotations

from importlib.metadata import version

from aiokafka.consumer.group_coordinator import GroupCoordinator

from app.worker import faust_app, faust_internals


def test_every_private_attribute_the_worker_relies_on_exists() -> None:
    missing = faust_internals.missing_internals()
    assert not missing, (
        f"faust-streaming {version('faust-streaming')} / aiokafka {version('aiokafka')} "
        f"lack what app/worker/faust_internals.py relies on: {', '.join(missing)}. "
        "Pin the tested versions (pyproject.toml) or port that module."
    )


def test_patches_are_applied_at_worker_start_not_at_import() -> None:
    assert faust_app.build_worker  # importing the worker module patches nothing
    original = GroupCoordinator._maybe_leave_group
    assert original is not faust_internals._maybe_leave_group
    try:
        faust_internals.apply_patches()
        assert GroupCoordinator._maybe_leave_group is faust_internals._maybe_leave_group
    finally:
        GroupCoordinator._maybe_leave_group = original  # type: ignore[method-assign]
