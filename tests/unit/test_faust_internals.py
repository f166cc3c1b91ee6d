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
    original_send = GroupCoordinator._send_req
    assert original is not faust_internals._maybe_leave_group
    assert original_send is not faust_internals._send_req
    try:
        faust_internals.apply_patches()
        faust_internals.apply_patches()  # idempotent: the wrapper never wraps itself
        assert GroupCoordinator._maybe_leave_group is faust_internals._maybe_leave_group
        assert GroupCoordinator._send_req is faust_internals._send_req
        assert faust_internals._AIOKAFKA_SEND_REQ is original_send
    finally:
        GroupCoordinator._maybe_leave_group = original  # type: ignore[method-assign]
        GroupCoordinator._send_req = original_send  # type: ignore[method-assign]
