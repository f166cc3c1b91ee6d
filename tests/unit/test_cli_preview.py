"""``kafka-timers preview`` and the client's :func:`preview`: a series' next fires,
without a broker."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from app.cli import main
from kafka_timers_client import preview

ACCEPTANCE = [
    "preview",
    "--cron",
    "0 0 9 * * MON-FRI",
    "--tz",
    "Europe/Paris",
    "--skip-holidays",
    "FR",
    "--from",
    "2026-12-20T00:00:00Z",
    "-n",
    "5",
]


def test_french_weekdays_around_christmas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ACCEPTANCE) == 0
    assert capsys.readouterr().out.splitlines() == [
        "   1  Mon 2026-12-21 09:00:00 CET  2026-12-21T08:00:00Z  1797840000",
        "   2  Tue 2026-12-22 09:00:00 CET  2026-12-22T08:00:00Z  1797926400",
        "   3  Wed 2026-12-23 09:00:00 CET  2026-12-23T08:00:00Z  1798012800",
        "   4  Thu 2026-12-24 09:00:00 CET  2026-12-24T08:00:00Z  1798099200",
        "   5  Mon 2026-12-28 09:00:00 CET  2026-12-28T08:00:00Z  1798444800",
    ]


def test_without_the_calendar_christmas_fires(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a for a in ACCEPTANCE if a not in ("--skip-holidays", "FR")]) == 0
    assert "Fri 2026-12-25 09:00:00" in capsys.readouterr().out


def test_an_ics_file_and_next_and_a_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ics = tmp_path / "closed.ics"
    ics.write_bytes(
        b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n"
        b"DTSTART;VALUE=DATE:20261222\r\nDTEND;VALUE=DATE:20261223\r\nEND:VEVENT\r\n"
        b"END:VCALENDAR\r\n"
    )
    args = [*ACCEPTANCE, "--skip-ics", str(ics), "--skip-policy", "next", "--spread", "60s"]
    assert main([*args, "--id", "digest"]) == 0
    lines = capsys.readouterr().out.splitlines()
    days = [line.split()[2] for line in lines]
    # The 22nd (the file) moves to the 23rd, which fires once; the 25th (FR) to the 26th.
    assert days == ["2026-12-21", "2026-12-23", "2026-12-24", "2026-12-26", "2026-12-28"]
    assert all(" fires " in line or line.endswith("Z  " + line.split()[-1]) for line in lines)
    assert main(args) == 0
    assert "give --id" in capsys.readouterr().out


def test_a_bad_calendar_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ACCEPTANCE[:5], "--skip-holidays", "Narnia"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kafka-timers: error: ") and err.count("\n") == 1


def test_the_client_previews_the_same() -> None:
    fires = preview(
        cron="0 0 9 * * MON-FRI",
        tz="Europe/Paris",
        skip_holidays="FR",
        from_="2026-12-20T00:00:00Z",
        n=5,
    )
    assert [o.local.day for o in fires] == [21, 22, 23, 24, 28]
    assert all(o.local.hour == 9 and o.fire_at == o.due for o in fires)
    assert [o.seq for o in fires] == [1, 2, 3, 4, 5]
    assert fires[0].local == datetime.fromisoformat("2026-12-21T09:00:00+01:00")
