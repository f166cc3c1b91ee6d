"""How ``status``, ``get`` and ``list`` find a running demo: its discovery file, read only
when the command was told nothing else, and ignored once its demo is gone (issue 25)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from app.cli import _worker_urls
from app.dev.demo import _stop_on
from app.dev.discovery import DemoStack, read_demo_stack, remove_demo_stack, write_demo_stack
from app.dev.lifetime import die_with_parent
from app.settings import Settings, default_demo_file

TOKEN = "demo-token-0123456789abcdef"


def stack(pid: int | None = None) -> DemoStack:
    return DemoStack(
        pid=os.getpid() if pid is None else pid,
        bootstrap="127.0.0.1:23456",
        app_id="kafka-timers-demo",
        workers=("http://127.0.0.1:21001", "http://127.0.0.1:21002"),
        metrics=("http://127.0.0.1:22001/metrics", "http://127.0.0.1:22002/metrics"),
        operator_token=TOKEN,
    )


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process
    return child.pid


def test_a_written_stack_reads_back_and_only_its_user_may_read_it(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "demo.json"
    write_demo_stack(path, stack())
    assert read_demo_stack(path) == stack()
    assert path.stat().st_mode & 0o077 == 0, "it holds the demo's operator credential"
    assert "operator_token" not in repr(stack())


def test_a_stale_or_broken_file_is_no_demo(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    assert read_demo_stack(path) is None
    write_demo_stack(path, stack(dead_pid()))
    assert read_demo_stack(path) is None, "its demo was killed: a stale file"
    for text in (
        "",
        "{",
        "[]",
        '{"pid": 1}',
        '{"pid": "x", "bootstrap": 1}',
        "[" * 100_000,  # past the decoder's depth: RecursionError
        '{"pid": 100000000000000000000, "bootstrap": "b", "app_id": "a", "workers": ["w"], '
        '"operator_token": null}',  # past what os.kill takes: OverflowError
    ):
        path.write_text(text)
        assert read_demo_stack(path) is None, text


def test_a_demo_removes_only_its_own_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    write_demo_stack(path, stack(os.getppid()))  # another live demo's
    remove_demo_stack(path)
    assert path.exists()
    write_demo_stack(path, stack())
    remove_demo_stack(path)
    assert not path.exists()


def urls(env: dict[str, str], *url: str) -> tuple[Settings, list[str]]:
    return _worker_urls(Settings.from_env(env), argparse.Namespace(url=list(url) or None))


def test_the_demo_is_found_only_when_nothing_else_was_said(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    env = {"KAFKA_TIMERS_DEMO_FILE": str(path)}
    settings, found = urls(env)
    assert found == ["http://127.0.0.1:6066"] and settings.bootstrap_servers == "127.0.0.1:9092"

    write_demo_stack(path, stack())
    settings, found = urls(env)
    assert found == list(stack().workers)
    assert settings.bootstrap_servers == "127.0.0.1:23456"
    assert settings.app_id == "kafka-timers-demo" and settings.operator_token == TOKEN
    # The demo's own broker named explicitly is still the demo.
    settings, found = urls({**env, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:23456"})
    assert found == list(stack().workers)

    # Flags and variables win.
    assert urls(env, "http://w:1/")[1] == ["http://w:1"]
    assert urls({**env, "KAFKA_TIMERS_WEB_PORT": "7000"})[1] == ["http://127.0.0.1:7000"]
    other = {**env, "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"}
    settings, found = urls(other)
    assert found == ["http://127.0.0.1:6066"] and settings.bootstrap_servers == "kafka:9092"
    assert urls({**env, "KAFKA_TIMERS_APP_ID": "prod"})[1] == ["http://127.0.0.1:6066"]
    own = "operator-token-of-my-own-0123"
    assert urls({**env, "KAFKA_TIMERS_OPERATOR_TOKEN": own})[0].operator_token == own


def test_the_default_file_is_per_user() -> None:
    assert default_demo_file({"XDG_RUNTIME_DIR": "/run/user/7"}) == (
        "/run/user/7/kafka-timers-demo.json"
    )
    assert default_demo_file({"XDG_CACHE_HOME": "/c"}) == "/c/kafka-timers/demo.json"
    assert Settings.from_env({"KAFKA_TIMERS_DEMO_FILE": "/x.json"}).demo_file == "/x.json"


def test_a_child_dies_with_the_thread_that_started_it_so_only_the_main_thread_may() -> None:
    # Off Linux there is no prctl: children are started as before.
    assert (die_with_parent() is not None) == sys.platform.startswith("linux")
    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(die_with_parent()))
    worker.start()
    worker.join()
    assert seen == [None]


def test_the_demo_stops_on_a_hangup_unless_nohup_ignores_it() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        stop = threading.Event()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
        _stop_on(stop)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        _stop_on(stop)
        os.kill(os.getpid(), signal.SIGHUP)  # handled between two bytecodes, at once
        assert stop.wait(10), "a hangup stops the demo as Ctrl-C does"
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
