"""export / import / migrate refuse what they cannot do with one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("kafka-timers: error: ")
    return err[0]


def test_an_import_of_a_bad_line_names_it_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "topic": "t", "key": null, "value": "v", "due": 1}\n\n{"id": 2}\n')
    # No broker at this address: the file is refused before one is asked.
    assert main(["--bootstrap", "127.0.0.1:1", "import", "--input", str(path)]) == 2
    assert "line 3: 'due' must be a whole number" in one_error_line(capsys)


def test_an_import_of_a_missing_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "--input", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in one_error_line(capsys)


def test_a_migration_onto_its_own_request_topic_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate", "--to-request-topic", "timer-request"]) == 2
    assert "the target request topic is the source's" in one_error_line(capsys)


def test_an_import_of_a_line_over_the_producers_limit_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = '{"id": "a", "topic": "t", "key": null, "value": "v", "due": 2000000000}\n'
    big = good.replace('"v"', '"' + "v" * 1_200_000 + '"').replace('"a"', '"big"')
    path = tmp_path / "t.jsonl"
    path.write_text(good * 100 + big + good)
    # No broker at this address: the file is refused before one is asked.
    assert main(["--bootstrap", "127.0.0.1:1", "import", "--input", str(path)]) == 2
    line = one_error_line(capsys)
    assert "line 101: timer 'big': its request is 1200" in line
    assert "more than the producer sends (1000000" in line


def test_an_import_refuses_a_line_longer_than_any_request_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    with path.open("w") as out:
        out.write('{"id": "a", "topic": "t", "key": null, "value": "v", "due": 1}\n')
        out.write("x" * 7_000_000)  # no newline: a reader of whole lines would take it all
    assert main(["--bootstrap", "127.0.0.1:1", "import", "--input", str(path)]) == 2
    assert "line 2: longer than" in one_error_line(capsys)


def test_an_export_that_fails_leaves_the_file_there_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "backup.jsonl"
    yesterday = b'{"id": "kept", "token": "t"}\n' * 1000
    path.write_bytes(yesterday)
    args = ["--bootstrap", "127.0.0.1:1", "export", "--output", str(path), "--timeout", "2"]
    assert main(args) == 2  # no broker answers
    assert "no Kafka broker answered" in one_error_line(capsys)
    assert path.read_bytes() == yesterday
    assert [p.name for p in tmp_path.iterdir()] == ["backup.jsonl"]  # no temporary left
