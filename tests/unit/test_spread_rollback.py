"""A rollback with spread timers pending: the previous release (RELEASES' newest line,
0.2.0) reads the store this tree wrote and fires each spread timer once, at the second
this tree chose, never early, and forgets it (docs/deploy.md: Upgrades and rollbacks).

0.2.0's own wheel and firing plan run in a process of their own on the exact keys and
values this tree's wheel stored (a spread one-shot timer, a spread series, a plain
timer beside them), tick by tick. Needs the release's commit in the clone's history,
like tests/integration/test_upgrade.py, and fails loudly without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000

#: Runs inside the previous release's tree: loads the store, ticks T0-1..T0+90, prints
#: what fired (id, seq, due header, tick second) and what is left.
OLD_RELEASE_TICKS = """
import bisect, json, sys
from app.core.firing import plan
from app.core.late import DEFAULT_POLICY
from app.core.wheel import PartitionWheel

class KV:
    def __init__(self, items):
        self.data = dict(items)
    def get(self, key):
        return self.data.get(key)
    def put(self, key, value):
        self.data[key] = value
    def delete(self, key):
        self.data.pop(key, None)
    def scan(self, low, high):
        for key in sorted(k for k in self.data if low <= k < high):
            yield key, self.data[key]

t0 = int(sys.argv[1])
kv = KV((bytes.fromhex(k), bytes.fromhex(v)) for k, v in json.load(sys.stdin))
wheel = PartitionWheel(kv, clock=lambda: t0 - 10)
fired = []
for second in range(t0 - 1, t0 + 91):
    due = wheel.begin_tick(second)
    successors = {}
    for timer in due:
        steps = plan(timer, second, second * 1000 + 20, DEFAULT_POLICY)
        fired += [[s.timer.id, s.timer.seq, s.timer.due, second] for s in steps.steps]
        if steps.successor is not None:
            successors[timer.id] = steps.successor
    wheel.finish_tick(second, due, successors)
print(json.dumps({
    "fired": fired,
    "pending": wheel.count_pending(),
    "lookups": {i: wheel.lookup(i) for i in ("one", "series", "plain")},
}))
"""


def previous_release() -> tuple[str, str]:
    rows = [
        line.split()
        for line in (ROOT / "RELEASES").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return rows[-1][0], rows[-1][1]


def ticks_in_previous_release(kv: MemoryKV, tmp_path: Path) -> dict[str, Any]:
    """:data:`OLD_RELEASE_TICKS` run on the store ``kv`` by the previous release's
    tree, extracted under ``tmp_path``: what it printed."""
    version, commit = previous_release()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "app"], capture_output=True, check=False
    )
    assert archive.returncode == 0, (
        f"cannot extract release {version} ({commit[:7]}) with git archive (a clone "
        f"without history?): {archive.stderr.decode()[-500:]}"
    )
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    ran = subprocess.run(
        [sys.executable, "-c", OLD_RELEASE_TICKS, str(T0)],
        input=json.dumps([[k.hex(), v.hex()] for k, v in kv.data.items()]),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result: dict[str, Any] = json.loads(ran.stdout)
    return result


def test_the_previous_release_fires_a_spread_timer_once_at_its_second(tmp_path: Path) -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: T0 - 10)
    one = Timer("one", T0, "cb", b"k", b"v", "tok", spread=40)
    rec = Recurrence.interval(30, start=T0, count=3).anchored(T0 - 1)
    series = Timer("series", T0, "cb", None, b"v", "tok", recurrence=rec, seq=1, spread=20)
    plain = Timer("plain", T0 + 5, "cb", None, b"v", "tok")
    for timer in (one, series, plain):
        wheel.schedule(timer)
    result = ticks_in_previous_release(kv, tmp_path)
    fired = {(i, seq): (due, second) for i, seq, due, second in result["fired"]}
    assert len(fired) == len(result["fired"]) == 5, result["fired"]  # each once
    # The one-shot timer: at the second this tree chose, its due header that second.
    assert fired[("one", 0)] == (one.fire_at, one.fire_at)
    assert one.fire_at >= T0
    # The series' first occurrence likewise; 0.2.0 stores the rest without a spread,
    # from that second on: each of them within its window, never early.
    assert fired[("series", 1)] == (series.fire_at, series.fire_at)
    for seq in (2, 3):
        due, second = fired[("series", seq)]
        assert T0 + (seq - 1) * 30 <= due == second <= T0 + (seq - 1) * 30 + 20
    assert fired[("plain", 0)] == (T0 + 5, T0 + 5)
    # Forgotten, as it forgets any fired timer: nothing pending, nothing left behind.
    assert result["pending"] == 0
    assert result["lookups"]["one"] == ["fired", one.fire_at, "tok"]
    assert result["lookups"]["series"][0] == "fired"
    assert result["lookups"]["plain"] == ["fired", T0 + 5, "tok"]
