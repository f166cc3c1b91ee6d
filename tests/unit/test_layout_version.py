"""Stored layout versions: a timer in a layout newer than this release reads is refused
(one line, exit 78), never guessed at and never dropped; and the release records
(RELEASES, CHANGELOG, pyproject's version, ``kafka-timers --version``) agree."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.debounce import Debounce
from app.core.keys import timer_key
from app.core.stored import (
    NEWEST_LAYOUT,
    StoredLayoutTooNew,
    check_layout,
    pack_timer,
    stored_topic,
    unpack_timer,
)
from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from app.worker import layout_refusal
from app.worker.isolation import is_systemic
from kafka_timers_client.calendars import Calendar
from kafka_timers_client.errors import SystemicFailure
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV
from tests.unit.test_ops_jsonl import stored_timers

ROOT = Path(__file__).resolve().parents[2]

ONE_SHOT = Timer(id="a", due=1_800_000_000, topic="cb", key=b"k", value=b"v", token="t")
SERIES = Timer(
    id="s",
    due=1_800_000_000,
    topic="cb",
    key=None,
    value=b"v",
    token="t",
    recurrence=Recurrence(cron="*/10 * * * * *", tz="Europe/Paris"),
    seq=3,
    fired_before=2,
    late=LatePolicy(5000, CatchUp.ALL),
)


def newer(data: bytes, version: int = NEWEST_LAYOUT + 1) -> bytes:
    return bytes([version]) + data[1:]


def test_this_release_writes_layout_1_for_one_shot_2_for_series_3_with_a_calendar() -> None:
    assert pack_timer(ONE_SHOT)[0] == 1
    assert pack_timer(SERIES)[0] == 2
    # Layout 3: only a series with a calendar (the release before refuses it, rather than
    # fire it on the dates it skips).
    calendar = Calendar.build("FR", ["2026-12-24"], "next")
    with_calendar = dataclasses.replace(
        SERIES, recurrence=Recurrence("0 9 * * *", "Europe/Paris", calendar=calendar)
    )
    assert pack_timer(with_calendar)[0] == 3 == NEWEST_LAYOUT
    assert unpack_timer(pack_timer(with_calendar)) == with_calendar
    assert unpack_timer(pack_timer(SERIES)) == SERIES
    assert unpack_timer(pack_timer(ONE_SHOT)) == ONE_SHOT
    one_shot_with_policy = Timer(
        id="p", due=1, topic="cb", key=None, value=b"", token="", late=LatePolicy(1000, None)
    )
    assert pack_timer(one_shot_with_policy)[0] == 2  # a late policy needs layout 2 too


@pytest.mark.parametrize("version", [NEWEST_LAYOUT + 1, 7, 255])
def test_a_newer_layout_is_refused_in_one_line_as_systemic(version: int) -> None:
    data = newer(pack_timer(SERIES), version)
    with pytest.raises(StoredLayoutTooNew) as refused:
        unpack_timer(data)
    with pytest.raises(StoredLayoutTooNew):
        check_layout(data)
    error = refused.value
    assert error.version == version
    assert error.exit_status == 78
    text = str(error)
    assert "\n" not in text and f"layout version {version}" in text
    assert f"(1 to {NEWEST_LAYOUT})" in text
    # Never the record's fault: isolation stops the worker instead of dead-lettering.
    assert isinstance(error, SystemicFailure) and is_systemic(error)


def test_a_version_that_never_was_is_corruption_not_a_newer_release() -> None:
    with pytest.raises(ValueError) as raised:
        unpack_timer(newer(pack_timer(ONE_SHOT), 0))
    assert not isinstance(raised.value, StoredLayoutTooNew)
    check_layout(pack_timer(ONE_SHOT))
    check_layout(pack_timer(SERIES))


def test_a_partition_holding_a_newer_timer_is_refused_as_it_loads_and_keeps_it() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    wheel.schedule(ONE_SHOT)
    later = Timer(id="z", due=ONE_SHOT.due + 5, topic="cb", key=None, value=b"", token="t")
    wheel.schedule(later)
    key = timer_key(later.due, later.id)
    kv.put(key, newer(kv.data[key]))  # as a later release would have written it
    before = dict(kv.data)
    with pytest.raises(StoredLayoutTooNew):
        PartitionWheel(kv).recount()
    # and where a tick meets it (written after the load): refused, nothing fired or lost
    with pytest.raises(StoredLayoutTooNew):
        PartitionWheel(kv).begin_tick(later.due)
    assert kv.data == before


def test_the_worker_exits_78_with_one_line_wherever_it_surfaces(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exits: list[int] = []

    def fake_exit(status: int) -> None:
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(layout_refusal.os, "_exit", fake_exit)
    monkeypatch.setattr(layout_refusal.logging, "shutdown", lambda: None)
    caplog.set_level(logging.CRITICAL, logger=layout_refusal.__name__)
    layout_refusal.exit_if_layout_too_new(ValueError("something else"))
    layout_refusal.exit_if_layout_too_new(None)
    assert exits == []
    try:  # wrapped on its way out (raise ... from, or raised while handling it)
        try:
            raise StoredLayoutTooNew(3)
        except StoredLayoutTooNew as exc:
            raise RuntimeError("loading partition 3 failed") from exc
    except RuntimeError as wrapped:
        with pytest.raises(SystemExit):
            layout_refusal.exit_if_layout_too_new(wrapped)
    assert exits == [78]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0] and "layout version 3" in lines[0]


def test_a_crashing_faust_service_or_loop_callback_goes_through_the_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mode import Service

    seen: list[BaseException | None] = []
    monkeypatch.setattr(layout_refusal, "exit_if_layout_too_new", seen.append)
    monkeypatch.setattr(Service, "crash", Service.crash)  # undone after the test
    loop = asyncio.new_event_loop()
    try:
        layout_refusal.install_layout_refusal(loop)
        refused = StoredLayoutTooNew(4)

        class Agent(Service):  # type: ignore[misc]
            pass

        loop.run_until_complete(Agent(loop=loop).crash(refused))
        loop.call_exception_handler({"message": "callback failed", "exception": refused})
    finally:
        loop.close()
    assert seen == [refused, refused]


# -- the release records ----------------------------------------------------------------


def releases() -> list[tuple[str, str]]:
    """``(version, commit)`` of each line of RELEASES, oldest first."""
    rows = []
    for line in (ROOT / "RELEASES").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, commit, *_ = line.split()
            rows.append((version, commit))
    return rows


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.match(r"\d+(\.\d+)*", version)[0].split("."))  # type: ignore[index]


def test_releases_changelog_and_version_agree() -> None:
    rows = releases()
    assert [v for v, _ in rows][:2] == ["0.1.0", "0.2.0"]
    assert all(re.fullmatch(r"[0-9a-f]{40}", commit) for _, commit in rows)
    assert [as_tuple(v) for v, _ in rows] == sorted(as_tuple(v) for v, _ in rows)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for version, commit in rows:
        assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M)
        assert commit[:7] in changelog  # the section names its commit
    text = (ROOT / "pyproject.toml").read_text()
    current = re.search(r'^version = "([^"]+)"$', text, re.M)
    assert current is not None
    assert as_tuple(current[1]) > as_tuple(rows[-1][0])  # never an already released number


def test_version_flag_prints_the_package_version() -> None:
    from importlib.metadata import version

    out = subprocess.run(
        [sys.executable, "-m", "app", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"kafka-timers {version('kafka-timers')}"


def test_tags_where_present_name_the_recorded_commits() -> None:
    """Tags may not survive a clone (the commits in RELEASES are the record); where a tag
    v<version> exists it must be that release's commit."""
    for version, commit in releases():
        tagged = subprocess.run(
            ["git", "rev-parse", "-q", "--verify", f"refs/tags/v{version}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if tagged.returncode == 0:
            assert tagged.stdout.strip() == commit


@settings(max_examples=300, deadline=None)
@given(stored_timers(), st.integers(0, 120), st.none() | st.integers(1, 2**40))
def test_the_topic_reads_without_unpacking_in_every_layout(
    timer: Timer, spread: int, schema_id: int | None
) -> None:
    """A tick holds a gated topic's timers by :func:`stored_topic` alone: it must read
    the topic every layout and extension stores, as a full unpack does."""
    timer = dataclasses.replace(timer, spread=spread, schema_id=schema_id)
    packed = pack_timer(timer)
    assert stored_topic(packed) == unpack_timer(packed).topic == timer.topic


def test_reading_the_topic_of_a_too_new_layout_refuses_as_a_full_read_does() -> None:
    packed = bytes([NEWEST_LAYOUT + 1]) + pack_timer(ONE_SHOT)[1:]
    with pytest.raises(StoredLayoutTooNew):
        stored_topic(packed)


#: A debounced timer's state, or None.
_DEBOUNCES = st.none() | st.builds(
    Debounce,
    st.integers(1, 10**6),
    st.none() | st.integers(1, 10**7),
    st.integers(0, 2**50),
    st.integers(1, 2**40),
    st.integers(-1, 2**62),
)


@settings(max_examples=300, deadline=None)
@given(
    stored_timers(),
    st.integers(0, 120),
    st.none() | st.integers(1, 2**40),
    _DEBOUNCES,
    st.binary(),
)
def test_every_layout_unpacks_to_what_was_packed_and_a_cut_one_never_passes_for_it(
    timer: Timer, spread: int, schema_id: int | None, debounce: Debounce | None, junk: bytes
) -> None:
    """unpack_timer reads its fields inline (it runs for every timer fired): every
    layout and extension comes back whole, and bytes cut short or with junk after the
    cut raise or read as some timer, never hang or read past the bytes."""
    timer = dataclasses.replace(timer, spread=spread, schema_id=schema_id, debounce=debounce)
    packed = pack_timer(timer)
    unpacked = unpack_timer(packed)
    assert unpacked == timer
    # Built without Timer.__init__: every field there, and nothing else (a timer that
    # is not debounced leaves its debounce to the class attribute, None).
    fields = {field.name for field in dataclasses.fields(Timer)}
    if debounce is None:
        fields.discard("debounce")
    assert vars(unpacked).keys() == fields
    for cut in range(len(packed)):
        # UnicodeDecodeError is a ValueError
        with contextlib.suppress(ValueError, struct.error, StoredLayoutTooNew):
            unpack_timer(packed[:cut] + junk)
