"""Fixtures: one broker per session, fresh topics and app id per test.

``--refuse-skips`` (what CI passes) turns every skip into a failure: a test that skips
because a tool is missing passes quietly on a developer's machine, never in CI.

``own_broker("why")`` marks a test that starts the dev broker it needs because it stops,
restarts or cuts off its broker; it must give the reason and must not also use the
session's ``broker`` (which may be a broker someone else runs).

``--part`` picks one of the suite's two parts (``make test`` runs both, see the
Makefile): ``parallel``, the tests that may run beside another (pytest-xdist, a module
per process), or ``serial``, those marked ``serial``: they gate on a time measured on
the machine (lateness, an event loop's stalls, a rate), which another test's load
beside them would move. The default runs everything, in one process.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _pytest.reports import TestReport

from app.kafka.topics import ensure_topics
from app.settings import Settings, TopicNames
from tests.support.broker import BrokerInfo, planned, resolve_broker


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--refuse-skips",
        action="store_true",
        help="fail every test that skips (CI: every test must run)",
    )
    parser.addoption(
        "--part",
        choices=("all", "parallel", "serial"),
        default="all",
        help="run only the tests that may run in parallel, or only those marked serial",
    )


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist (3.5 on) hands out a ``--dist loadfile`` run's modules by their number
    # of tests, most first, unless told not to (3.8 on): the order set below (the fault
    # modules first) then never held, and the last modules handed out were one-test
    # modules of 70-90 s each (test_request_lag, test_stale_writer, test_export_import),
    # one process running them while the other had nothing left.
    if getattr(config.option, "loadscopereorder", None) is not None:
        config.option.loadscopereorder = False


def pytest_report_header(config: pytest.Config) -> str:
    return f"broker: {planned()}; tests marked own_broker start the dev broker"


def _check_own_broker(item: pytest.Item) -> None:
    marker = item.get_closest_marker("own_broker")
    if marker is None:
        return
    if not (marker.args and isinstance(marker.args[0], str) and marker.args[0].strip()):
        raise pytest.UsageError(f"{item.nodeid}: own_broker needs its reason, own_broker('why')")
    if "broker" in getattr(item, "fixturenames", ()):
        raise pytest.UsageError(
            f"{item.nodeid}: marked own_broker, it must not use the session's broker fixture"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _check_own_broker(item)
    part = config.getoption("part")
    if part == "all":
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (keep if serial == (part == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    if part == "parallel":
        # Modules with fault tests (real processes killed and restarted: the longest)
        # first, so that the last module handed out is a short one and both processes
        # finish together; the order within each group is kept.
        slow = {item.path for item in keep if item.get_closest_marker("fault")}
        keep.sort(key=lambda item: item.path not in slow)
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, Any, None]:
    outcome = yield
    report: TestReport = outcome.get_result()
    # An xfail names a known open defect with its reason: reported, not refused.
    expected_failure = hasattr(report, "wasxfail")
    if report.skipped and not expected_failure and item.config.getoption("refuse_skips"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skip refused (--refuse-skips): {reason}"


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerInfo]:
    with resolve_broker() as info:
        yield info


#: The operator's credential every test stack's workers and CLIs share (the routes that
#: say which timers exist need it).
OPERATOR_TOKEN = "test-operator-token-4f1c9a"
#: The control secret every test stack's workers and CLIs share (the workers apply only
#: control records signed with it).
CONTROL_SECRET = "test-control-secret-8d27e0b5"


def fresh_settings(bootstrap: str, partitions: int = 8) -> Settings:
    """Settings with topics and app id no other test uses."""
    tag = uuid.uuid4().hex[:8]
    return replace(
        Settings(),
        bootstrap_servers=bootstrap,
        partitions=partitions,
        topics=TopicNames.named(lambda kind: f"{kind}-{tag}"),
        app_id=f"kt-{tag}",
        session_timeout=6.0,
        heartbeat_interval=1.0,
        operator_token=OPERATOR_TOKEN,
        control_secret=CONTROL_SECRET,
    )


@pytest.fixture
def settings(broker: BrokerInfo) -> Settings:
    """Fresh topics (created explicitly) and a fresh app id on the session broker."""
    s = fresh_settings(broker.bootstrap)
    ensure_topics(s)
    return s


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
