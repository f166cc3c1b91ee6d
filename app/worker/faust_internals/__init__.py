"""Every use of a private Faust or aiokafka attribute, behind one door: this package.

Faust exposes no public way to do a few things the worker needs, so each is done here
and nowhere else, and an upgrade has one package to read:

* :mod:`.group`: send LeaveGroup in generation 0 (the leader first), renew the group
  lease from the coordinator's answers, and recover from the dev broker's departed
  group leader;
* :mod:`.recovery`: run the worker's changelog catch-up before the table recovery, end
  that recovery where the catch-up ended, move its starting offsets, and start it over
  when a broker request of it gets no answer;
* :mod:`.stores`: open a table partition's RocksDB with the worker's options (on every
  open, not only the first) and reach it;
* :mod:`.streams`: shorten the fetch wait, read committed records only, and take a
  stream's events in batches without waking while none arrive;
* :mod:`.web`: list the routes the web server serves;
* :mod:`.checks`: :func:`~.checks.missing_internals`, what the above relies on and is
  gone. A unit test calls it, so a Faust or aiokafka release that renames something
  fails one test with a clear message instead of a worker at run time.
  ``pyproject.toml`` pins both packages to the ranges tested with this package.

Nothing is patched at import: :func:`apply_patches` (here) is called by the worker at
start and installs every patch of the modules above.
"""

from __future__ import annotations

from typing import Any

from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator
from faust.stores.rocksdb import RocksDBOptions
from faust.tables.recovery import Recovery

from app.worker.faust_internals.group import _maybe_leave_group, _send_req
from app.worker.faust_internals.recovery import _recovery_targets, _recovery_wait
from app.worker.faust_internals.stores import _open_partition_db
from app.worker.faust_internals.streams import _paced_fetch_actions

__all__ = ["apply_patches", "patches_applied", "remove_patches"]


def _patches() -> tuple[tuple[type, str, Any], ...]:
    """What :func:`apply_patches` installs: (class, attribute, replacement)."""
    return (
        (Recovery, "_wait", _recovery_wait),
        (Recovery, "_build_highwaters", _recovery_targets),
        (GroupCoordinator, "_maybe_leave_group", _maybe_leave_group),
        (GroupCoordinator, "_send_req", _send_req),
        (RocksDBOptions, "open", _open_partition_db),
        (Fetcher, "_get_actions_per_node", _paced_fetch_actions),
    )


#: The attributes the patches replace, as the libraries define them (taken at import,
#: before anything is patched).
#: ``None``: the class only inherits the attribute, so removing the patch deletes it.
_ORIGINALS = {(cls, name): vars(cls).get(name) for cls, name, _ in _patches()}


def apply_patches() -> None:
    """Install the worker's patches of aiokafka and Faust (idempotent; called at worker start)."""
    for cls, name, replacement in _patches():
        setattr(cls, name, replacement)


def remove_patches() -> None:
    """Put back what :func:`apply_patches` replaced (for tests that patch in-process)."""
    for (cls, name), original in _ORIGINALS.items():
        if original is None:
            if name in vars(cls):
                delattr(cls, name)
        else:
            setattr(cls, name, original)


def patches_applied() -> bool:
    """Whether every patch is installed in this process."""
    return all(vars(cls).get(name) is replacement for cls, name, replacement in _patches())
