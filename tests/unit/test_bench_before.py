"""The rows of the bench's before-and-now comparison: pure arithmetic on counts."""

from __future__ import annotations

from bench.before import BEFORE, figures, verdict


def test_the_growth_is_judged_against_its_bound() -> None:
    share, met = verdict(104.9, 100.0, 0.05)
    assert round(share, 6) == 0.049 and met
    assert not verdict(105.1, 100.0, 0.05)[1]
    share, met = verdict(99.0, 100.0, 0.02)
    assert round(share, 6) == -0.01 and met  # cheaper is within any bound


def test_each_path_is_a_row_against_each_commit_before() -> None:
    counted = {"now": {"request": 102.5, "fire": 100.0}}
    for before in BEFORE:
        counted[before.commit] = {"request": 100.0, "fire": 100.0}
    rows = figures(counted)
    assert [(r.scenario, r.name.split()[0]) for r in rows] == [
        (b.label, path) for b in BEFORE for path in ("request", "fire")
    ]
    by_label = {(r.scenario, r.name.split()[0]): r for r in rows}
    redesign, anchors = BEFORE
    assert by_label[(redesign.label, "request")].met  # +2.5% within 5%
    assert not by_label[(anchors.label, "request")].met  # +2.5% past 2%
    assert by_label[(anchors.label, "fire")].met
    assert f"({anchors.commit}) 100 (+2.50%)" in by_label[(anchors.label, "request")].baseline
    assert by_label[(anchors.label, "request")].target == "≤ +2%"
