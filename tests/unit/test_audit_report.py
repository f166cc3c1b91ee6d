"""The audit's flags, exit policy, reports and Arrow glue, without Spark."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from kafka_timers_client.recurrence import Recurrence
from spark_audit.charts import bar_chart
from spark_audit.errors import AuditError
from spark_audit.judging import (
    EVENT_FIELDS,
    SOURCE_FIRE,
    SOURCE_REPORT,
    SOURCE_REQUEST,
    SOURCE_SKIP,
    judge_arrays,
)
from spark_audit.options import parse_options
from spark_audit.parsing import series_json
from spark_audit.reading import SourceKind
from spark_audit.report import console_summary, fire_rate_bars, html_report, verdict_line
from spark_audit.verdicts import Rules
from tests.support.audit_summary import audit_summary as summary


def test_options_default_to_now_a_minute_of_grace_and_the_python_source() -> None:
    options = parse_options([], now=1767225600.25)
    assert options.as_of_ms == 1767225600250
    assert options.grace_ms == 60_000
    assert options.source is SourceKind.PYTHON
    assert not options.allow_duplicates


def test_options_read_times_durations_and_pairs() -> None:
    options = parse_options(
        [
            "--as-of=2026-01-01T00:00:00Z",
            "--grace=2m",
            "--allow-duplicates",
            "--source=kafka",
            "--kafka-option=minPartitions=8",
            "--conf=spark.executor.memory=2g",
        ]
    )
    assert options.as_of_ms == 1767225600000
    assert options.grace_ms == 120_000
    assert options.allow_duplicates and options.source is SourceKind.KAFKA
    assert options.kafka_options == {"minPartitions": "8"}
    assert options.spark_conf == {"spark.executor.memory": "2g"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--as-of=yesterday"], "cannot read time"),
        (["--grace=soon"], "cannot read duration"),
        (["--conf=novalue"], "--conf needs name=value"),
        (["--max-offsets-per-partition=0"], "at least 1"),
    ],
)
def test_bad_options_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(AuditError, match=message) as caught:
        parse_options(argv)
    assert "\n" not in str(caught.value)


def test_unknown_flags_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_options(["--frobnicate"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_any_violation_fails_the_audit_and_duplicates_only_unless_allowed() -> None:
    assert summary({}).exit_code == 0
    assert summary({"missing": 1}).exit_code == 1
    assert summary({"duplicate": 2}).exit_code == 1
    excused = summary({"duplicate": 2}, allow_duplicates=True)
    assert (excused.exit_code, excused.total_violations, excused.gating_violations) == (0, 2, 0)
    assert "2 duplicate fires allowed" in verdict_line(excused)
    assert summary({"duplicate": 2, "early": 1}, allow_duplicates=True).exit_code == 1


def test_the_console_summary_ends_with_the_verdict_and_lists_violations() -> None:
    text = console_summary(summary({"early": 1}))
    assert text.splitlines()[-1] == "audit FAIL: 1 violation in 11 timers: 1 early"
    assert "id=timer-early" in text
    assert re.search(r"all\s+10\s+40\s+90\s+120\s+130", text)


def test_the_reports_count_extra_fires_apart_from_the_occurrences() -> None:
    counted = summary({}, extra_fires={"triggered": 2, "backfilled": 50})
    text = console_summary(counted)
    assert "  extra fires (not violations): triggered=2  backfilled=50" in text.splitlines()
    assert "<td>extra: backfilled</td><td>50</td>" in html_report(counted)
    assert "extra fires (not violations): triggered=0  backfilled=0" in console_summary(summary({}))


def test_the_html_report_has_both_charts_and_escapes_what_it_shows() -> None:
    page = html_report(summary({"missing": 1}))
    assert page.count("<svg") == 3
    assert "Lateness of first fires" in page and "Fires per minute" in page
    assert "Violations by kind" in page
    assert "&lt;b&gt;why&lt;/b&gt;" in page and "<b>why</b>" not in page
    assert 'class="fail"' in page
    assert 'class="pass"' in html_report(summary({}))


def test_chart_axes_are_round_and_short() -> None:
    svg = bar_chart([("a", 410_000), ("b", 3)], "t", y_label="fires")
    assert all(f">{tick}</text>" in svg for tick in ("0", "125k", "250k", "375k", "500k"))


def test_the_fire_rate_chart_shows_quiet_minutes_and_widens_bars_for_long_spans() -> None:
    t = 1767225600  # 2026-01-01 00:00 UTC
    step, bars = fire_rate_bars([(t, 3), (t + 180, 5)])
    assert step == 1
    assert bars == [("00:00", 3), ("00:01", 0), ("00:02", 0), ("00:03", 5)]
    step, bars = fire_rate_bars([(t, 1), (t + 60, 2), (t + 86400 - 60, 4)])
    assert step == 5 and len(bars) == 288
    assert bars[0] == ("00:00", 3) and bars[-1] == ("23:55", 4)
    assert fire_rate_bars([]) == (1, [])


def test_judge_arrays_turns_grouped_events_into_verdicts() -> None:
    def event(
        src: int,
        seq: int,
        kind: str,
        token: str,
        due: int | None,
        series: str | None = None,
        occurrence: int | None = None,
        outcome: str | None = None,
    ) -> dict[str, object]:
        values = [src, seq, seq, kind, token, due, True, "cb", outcome, "w1"]
        values += [series, occurrence, None, None, None]
        return dict(zip(EVENT_FIELDS, values, strict=True))

    due = 1767225600
    timer_a = [
        event(SOURCE_REQUEST, 0, "schedule", "k", due),
        event(SOURCE_FIRE, due * 1000 + 5, "fired", "k", due),
    ]
    timer_b = [event(SOURCE_REQUEST, 1, "schedule", "k", due)]
    every = series_json(Recurrence.interval(10, count=3).anchored(due - 10))
    timer_c = [
        event(SOURCE_REQUEST, 2, "schedule", "k", due, series=every),
        event(SOURCE_FIRE, due * 1000 + 5, "fired", "k", due, occurrence=1),
        event(SOURCE_FIRE, (due + 20) * 1000 + 5, "fired", "k", due + 20, occurrence=3),
        event(SOURCE_SKIP, (due + 10) * 1000 + 9000, "skipped", "k", due + 10, None, 2, "late"),
    ]
    struct = pa.struct(
        [
            ("src", pa.int32()),
            ("seq", pa.int64()),
            ("ts_ms", pa.int64()),
            ("kind", pa.string()),
            ("token", pa.string()),
            ("due", pa.int64()),
            ("check_token", pa.bool_()),
            ("topic", pa.string()),
            ("outcome", pa.string()),
            ("worker", pa.string()),
            ("series", pa.string()),
            ("occurrence", pa.int64()),
            ("coalesced", pa.int64()),
            ("spread", pa.int64()),
            ("request_offset", pa.int64()),
        ]
    )
    # a one-shot triggered 60 s before its second, and a series' trigger and backfill,
    # keyed under the series (occurrence: the number the extra id names), with the
    # worker's answers (occurrence: the request offset)
    triggered_ms = (due - 60) * 1000
    timer_d = [
        event(SOURCE_REQUEST, 3, "schedule", "k", due),
        event(SOURCE_FIRE, triggered_ms + 300, "trigger", "k", due),
        event(SOURCE_REPORT, triggered_ms, "trigger", "k", None, None, 4, "triggered"),
    ]
    timer_e = [
        event(SOURCE_REQUEST, 5, "schedule", "k", due, series=every),
        event(SOURCE_FIRE, due * 1000 + 5, "fired", "k", due, occurrence=1),
        event(SOURCE_FIRE, due * 1000 + 900, "trigger", "k", due, occurrence=6),
        event(SOURCE_FIRE, due * 1000 + 900, "backfill", "k", due - 100, occurrence=due - 100),
        event(SOURCE_REPORT, due * 1000 + 200, "trigger", "k", None, None, 6, "triggered"),
    ]
    events = pa.array([[], timer_a, timer_b, timer_c, timer_d, timer_e], pa.list_(struct)).slice(1)
    verdicts = judge_arrays(events, Rules(as_of_ms=(due + 3600) * 1000)).to_pylist()
    assert [v["status"] for v in verdicts] == ["fired", "missing", "fired", "fired", "missing"]
    assert verdicts[3]["violations"] == [], "triggered: not early"
    assert (verdicts[3]["extra_triggered"], verdicts[3]["extra_backfilled"]) == (1, 0)
    assert verdicts[3]["fires"][0]["extra"] == "trigger"
    assert verdicts[3]["fires"][0]["lateness_ms"] == 300
    assert [x["kind"] for x in verdicts[4]["violations"]] == ["missing", "missing"]
    assert (verdicts[4]["extra_triggered"], verdicts[4]["extra_backfilled"]) == (1, 1)
    assert verdicts[4]["occurrences_fired"] == 1
    extra = {f["extra"]: f for f in verdicts[4]["fires"]}
    assert extra.keys() == {None, "trigger", "backfill"}
    assert extra["trigger"]["lateness_ms"] == 700, "from the trigger's answer"
    assert (verdicts[2]["occurrences_fired"], verdicts[2]["occurrences_skipped"]) == (2, 1)
    assert verdicts[2]["violations"] == []
    assert verdicts[0]["fires"][0]["lateness_ms"] == 5
    assert [x["kind"] for x in verdicts[1]["violations"]] == ["missing"]


def test_a_log_scale_shows_a_handful_among_thousands_with_counts_on_bars() -> None:
    svg = bar_chart([("early", 5), ("on time", 19_800)], "t", y_label="fires", log_scale=True)
    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([0-9.]+)"', svg)]
    assert heights[0] > heights[1] / 10  # linear: 1/3960 of the other, under a pixel
    assert ">5</text>" in svg and ">19,800</text>" in svg and "(log scale)" in svg


def test_every_kind_is_listed_however_many_another_kind_has() -> None:
    s = summary({"missing": 5000, "early": 1})
    s.violations = [{**s.violations[0], "id": f"m-{i}"} for i in range(100)] + [
        v for v in s.violations if v["kind"] == "early"
    ]
    text = console_summary(s)
    assert "id=timer-early" in text and "... and 4,995 more" in text
    assert "due=2026-01-01 00:00:00Z" in text  # times in UTC, not epoch numbers
    page = html_report(s)
    assert "early: 1</h3>" in page and "missing: the first 100 of 5,000</h3>" in page


def test_records_set_aside_are_listed_with_coordinates_and_a_table_per_topic_shows() -> None:
    s = summary({})
    s.set_aside = [
        {
            "disposition": "set_aside",
            "topic": "timer-fired",
            "partition": 2,
            "offset": 41,
            "ts_ms": 1767225600000,
            "reason": "out_of_range",
            "detail": "due is out of range",
        }
    ]
    s.by_topic = {"cb": {"fired": 10, "cancelled": 1}}
    text = console_summary(s)
    assert "timer-fired[2]@41 out_of_range: due is out of range" in text
    page = html_report(s)
    assert "<td>41</td>" in page and "<td>out_of_range</td>" in page
    assert "<td>cb</td>" in page
