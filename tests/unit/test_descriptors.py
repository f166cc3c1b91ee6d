"""The worker's descriptors: the limit raised, the need estimated, running out systemic."""

from __future__ import annotations

import errno
import resource

import pytest

from app.worker import descriptors
from app.worker.descriptors import (
    descriptors_needed,
    is_out_of_descriptors,
    prepare_descriptors,
    raise_soft_limit,
)
from app.worker.isolation import is_systemic
from kafka_timers_client.errors import ConfigurationError, RejectedRequest, RejectReason


class FakeLimits:
    def __init__(self, soft: int, hard: int, refuse: bool = False) -> None:
        self.limits = (soft, hard)
        self.refuse = refuse

    def get(self, _which: int) -> tuple[int, int]:
        return self.limits

    def set(self, _which: int, limits: tuple[int, int]) -> None:
        if self.refuse:
            raise ValueError("not allowed")
        self.limits = limits


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    limits = FakeLimits(1024, 524288)
    assert raise_soft_limit(limits.get, limits.set) == (524288, 524288)
    assert limits.limits == (524288, 524288)


def test_a_soft_limit_already_at_the_hard_one_or_a_refused_raise_stays() -> None:
    same = FakeLimits(1024, 1024)
    assert raise_soft_limit(same.get, same.set) == (1024, 1024)
    refused = FakeLimits(1024, 4096, refuse=True)
    assert raise_soft_limit(refused.get, refused.set) == (1024, 4096)


def test_an_unlimited_hard_limit_means_the_kernels_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(descriptors, "_nr_open", lambda: 1048576)
    limits = FakeLimits(1024, resource.RLIM_INFINITY)
    assert raise_soft_limit(limits.get, limits.set)[0] == 1048576


def test_the_need_counts_every_partition_the_connections_and_the_rest() -> None:
    need = descriptors_needed(8, 256)
    assert need.total == 8 * need.per_partition + 256 + need.base
    assert need.per_partition > descriptors.ROCKSDB_MAX_OPEN_FILES
    # The defaults fit the most common low limit, 1,024, with room to spare.
    assert need.total < 1024 * 0.9


def test_a_limit_that_cannot_hold_the_need_stops_the_start_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(descriptors, "raise_soft_limit", lambda: (1024, 1024))
    assert prepare_descriptors(8, 256) == 1024
    with pytest.raises(ConfigurationError) as refused:
        prepare_descriptors(64, 256)
    message = str(refused.value)
    assert "\n" not in message and refused.value.exit_status == 2
    assert "1024" in message and "LimitNOFILE" in message
    assert "KAFKA_TIMERS_WEB_MAX_CONNECTIONS" in message


def rocksdb_error(text: str) -> Exception:
    return Exception(f"IO error: While open a file for appending: /d/000012.log: {text}")


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.ENFILE, "Too many open files in system"),
        rocksdb_error("Too many open files"),
    ],
)
def test_running_out_of_descriptors_is_recognised_and_systemic(exc: Exception) -> None:
    assert is_out_of_descriptors(exc)
    assert is_systemic(exc)
    try:
        try:
            raise exc
        except Exception as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_out_of_descriptors(outer) and is_systemic(outer)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOENT, "No such file"),
        ValueError("Too many open files"),
        RejectedRequest(RejectReason.MALFORMED, "IO error: x: Too many open files"),
        Exception("a record said: Too many open files"),
        KeyError("IO error: x: Too many open files"),
    ],
)
def test_a_records_text_cannot_pass_for_running_out(exc: Exception) -> None:
    # A record's bytes quoted into an error message must never stop a worker.
    assert not is_out_of_descriptors(exc)
    assert not is_systemic(exc)
