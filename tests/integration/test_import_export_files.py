"""Import and export are careful with data, on the real broker: an import that stops part
way says so in one line (which line, how many records were sent), an export is written
0600 and replaces the file there only once complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.kafka.records import TopicReader
from app.kafka.topics import ensure_topics
from app.settings import Settings
from tests.support.cli import run_cli


def line(timer_id: str, value: str = "v") -> str:
    doc = {"id": timer_id, "token": "tok", "topic": "cb", "key": None, "value": value}
    return json.dumps({**doc, "headers": [], "due": 2_000_000_000}) + "\n"


def test_an_import_from_stdin_stopped_by_an_oversize_line_says_what_it_sent(
    settings: Settings,
) -> None:
    lines = [line(f"t-{i}") for i in range(100)]
    lines.append(line("big", "v" * 1_200_000))  # over the producer's 1,000,000 bytes
    lines += [line(f"u-{i}") for i in range(100)]
    done = subprocess.run(
        [sys.executable, "-m", "app", "import"],
        input="".join(lines),
        env={**os.environ, **settings.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "import stopped at line 101: timer 'big': its request is 1200" in err[0], err
    assert "100 records sent and acknowledged before it" in err[0], err
    with TopicReader(settings, settings.topics.requests) as reader:
        sent = reader.read_to_end()
    assert sorted((r.key or b"").decode() for r in sent) == sorted(f"t-{i}" for i in range(100))


def test_an_export_is_0600_and_a_failed_one_leaves_the_old_file(
    settings: Settings, tmp_path: Path
) -> None:
    ensure_topics(settings, [settings.changelog_topic])
    path = tmp_path / "backup.jsonl"
    path.write_text(line("yesterday"))
    path.chmod(0o644)
    done = run_cli(settings, "export", "--output", str(path))
    assert done.returncode == 0, done.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.read_text() == ""  # the deployment holds no timer
    path.write_text(line("yesterday"))
    before = path.read_bytes()
    # Another deployment's app id: no changelog to read, the export fails.
    done = run_cli(settings, "export", "--output", str(path), "--app-id", "no-such-app")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl"]


def test_an_import_sends_as_it_reads(settings: Settings) -> None:
    """Lines are sent as they are read, never all read first: input that breaks off
    after 100 lines has sent those 100, and the one line says so."""
    from app.ops.import_ import ImportStopped, import_timers

    def source() -> Iterator[str]:
        for i in range(100):
            yield line(f"t-{i}")
        yield "\n"
        raise OSError("the pipe broke")

    with pytest.raises(ImportStopped) as stopped:
        import_timers(settings, source())
    message = str(stopped.value)
    assert message.startswith("import stopped at line 102: OSError: the pipe broke; ")
    assert "100 records sent and acknowledged before it" in message
    with TopicReader(settings, settings.topics.requests) as reader:
        assert len(reader.read_to_end()) == 100
