"""One request's path through the worker, measured: the modules it stops in, in order.

One protobuf request (a timer due in a minute, on a partition already loaded) goes
through :meth:`app.worker.service.TimerService.handle_requests` on the unit tests'
harness (memory stores, a fake output), under :func:`sys.setprofile`. Every Python
frame the request runs is attributed to a *stop*: the worker-level module running at
that moment. Stops are the modules of ``app`` outside ``app.core``, and the test
stand-ins for two of them (``FakeOutput`` is ``app.worker.output``, the memory stores
are ``app.worker.partition_store``). The rest is not a stop of its own:

- ``app.core``, the slim client's modules and third-party libraries are *leaves*: what
  runs under them (a wheel's store reads included) belongs to the stop that called them;
- the standard library is glue (context managers, locks, dataclasses): a worker module
  called through it is a stop as if called directly.

The path is the list of stops with repeats in a row folded; a resumed coroutine is not a
new call, and a coroutine that yields has not returned. A *re-entry* is a stop in the
entry module (the one :meth:`TimerService.handle_requests` is defined in) after the
first: control came back after the path had left it, by a return or by a callback.
Few re-entries mean a reader follows a request down, not back and forth.

``python -m tests.support.request_path`` prints the listing;
``--write docs/architecture.md`` puts it between the file's markers, which
``tests/unit/test_request_path.py`` checks are up to date.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

#: The opcode a coroutine or generator frame suspends on (a profile "return" there is
#: a suspension, not a return).
_YIELD = dis.opmap["YIELD_VALUE"]
#: The listing's markers in docs/architecture.md.
BEGIN = "<!-- request-path:begin (generated: python -m tests.support.request_path) -->"
END = "<!-- request-path:end -->"
#: Stand-ins of the unit tests' harness, by class, and the worker module each replaces.
_STAND_INS = {"FakeOutput": "app.worker.output"}
_STAND_IN_MODULES = {
    "tests.support.memstores": "app.worker.partition_store",
    "tests.support.memkv": "app.worker.partition_store",
}


@dataclass
class Stop:
    """A stretch of the path in one module, and the functions of it called meanwhile."""

    module: str
    functions: list[str] = field(default_factory=list)


@dataclass
class RequestPath:
    """The stops of one request's path, and its entry module."""

    entry: str
    stops: list[Stop]

    @property
    def modules(self) -> list[str]:
        return [stop.module for stop in self.stops]

    @property
    def reentries(self) -> int:
        return reentries(self.modules, self.entry)


def reentries(modules: Sequence[str], entry: str) -> int:
    """How many times ``modules`` (a path's stops, repeats in a row folded) comes back
    to ``entry`` after leaving it."""
    return max(0, sum(1 for module in modules if module == entry) - 1)


def _kind(module: str) -> str:
    """``stop``, ``leaf`` or ``glue``: what a frame of ``module`` is on the path."""
    if module in _STAND_IN_MODULES:
        return "stop"
    if module == "app" or module.startswith("app."):
        return "leaf" if module == "app.core" or module.startswith("app.core.") else "stop"
    top = module.partition(".")[0]
    if top in sys.stdlib_module_names or top in ("__main__", "builtins"):
        return "glue"
    return "leaf"


def _stop_of(frame: FrameType) -> str:
    module = frame.f_globals.get("__name__", "?")
    if module in _STAND_IN_MODULES:
        owner = frame.f_code.co_qualname.partition(".")[0]
        return _STAND_INS.get(owner, _STAND_IN_MODULES[module])
    return str(module)


class _Tracer:
    """The profile function: attributes each call and return to a stop."""

    def __init__(self, entry_code: Any) -> None:
        self.entry_code = entry_code
        self.entry_frame: FrameType | None = None
        self.seen: set[int] = set()
        self.frames: list[FrameType] = []  # kept alive, so ids are not reused
        self.stops: list[Stop] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if id(frame) in self.seen:
                return  # a coroutine resumed: not a new call
            self.seen.add(id(frame))
            self.frames.append(frame)
            if self.entry_frame is None:
                if frame.f_code is not self.entry_code:
                    return
                self.entry_frame = frame
            self._attribute(frame, called=frame)
        elif event == "return":
            code = frame.f_code.co_code
            if 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _YIELD:
                return  # suspended, not returned
            if frame is self.entry_frame or frame.f_back is None:
                return
            self._attribute(frame.f_back, called=None)

    def _attribute(self, active: FrameType, called: FrameType | None) -> None:
        chain: list[FrameType] = []
        frame: FrameType | None = active
        while frame is not None and frame is not self.entry_frame:
            chain.append(frame)
            frame = frame.f_back
        if frame is None:
            return  # outside the request (the event loop between steps)
        assert self.entry_frame is not None
        stop = _stop_of(self.entry_frame)
        top = self.entry_frame
        for inner in reversed(chain):
            kind = _kind(str(inner.f_globals.get("__name__", "?")))
            if kind == "leaf":
                break
            if kind == "stop":
                stop, top = _stop_of(inner), inner
        if not self.stops or self.stops[-1].module != stop:
            self.stops.append(Stop(stop))
        if called is not None and called is top:
            name = called.f_code.co_qualname
            functions = self.stops[-1].functions
            if name not in functions and not name.endswith(("<lambda>", "<genexpr>")):
                functions.append(name)


def measure() -> RequestPath:
    """Trace one protobuf request (a timer due in a minute) through the harness's
    service, its partition loaded by a request before it."""
    from app.worker.service import TimerService
    from tests.unit.test_service import NOW, Harness

    harness = Harness()
    harness.requests(harness.schedule("warm-up", NOW + 60))
    record = harness.schedule("traced", NOW + 60)
    service = harness.service
    entry = TimerService.handle_requests
    tracer = _Tracer(entry.__code__)

    async def traced() -> None:
        sys.setprofile(tracer)
        try:
            await service.handle_requests([record])
        finally:
            sys.setprofile(None)

    asyncio.run(traced())
    assert harness.service.wheels()[0].lookup("traced") is not None, "the request was not applied"
    return RequestPath(entry.__module__, tracer.stops)


def listing(path: RequestPath) -> str:
    """The path as docs/architecture.md carries it: the entry module, the module it hands
    the request to (its *runner*), and each excursion from the runner on one line: the
    modules it went through in order of first visit, with the first functions called in
    each. The runner's plain returns are left out: every ``→`` line starts back in it."""
    modules = path.modules
    runner = modules[1] if len(modules) > 1 else path.entry
    lines: list[str] = []
    excursion: dict[str, list[str]] = {}  # module -> functions, in order of first visit
    entries = 0

    def close() -> None:
        if excursion:
            parts = []
            for module, names in excursion.items():
                shown = ", ".join(names[:2]) + (", …" if len(names) > 2 else "")
                parts.append(f"{module} ({shown})" if shown else module)
            lines.append("    → " + " → ".join(parts))
            excursion.clear()

    for stop in path.stops:
        names = [n for n in stop.functions if "<locals>" not in n and "__create_fn__" not in n]
        if stop.module == path.entry:
            close()
            entries += 1
            tag = "" if entries == 1 else f"  (re-entry {entries - 1})"
            lines.append(f"{stop.module}{tag}" + (f": {', '.join(names)}" if names else ""))
        elif stop.module == runner:
            close()
            if names:
                lines.append(f"  {stop.module}: {', '.join(names)}")
        else:
            seen = excursion.setdefault(stop.module.removeprefix("app.worker."), [])
            seen.extend(name for name in names if name not in seen)
    close()
    returns = max(0, modules.count(runner) - 1)
    lines.append("")
    lines.append(f"re-entries into {path.entry}: {path.reentries}")
    lines.append(f"returns into {runner} (the runner): {returns}")
    return "\n".join(lines)


def block(text: str) -> str:
    return f"{BEGIN}\n```text\n{text}\n```\n{END}"


def replace_block(document: str, text: str) -> str:
    """``document`` with the text between its markers replaced by ``text``."""
    start = document.index(BEGIN)
    end = document.index(END, start) + len(END)
    return document[:start] + block(text) + document[end:]


def documented(document: str) -> str:
    """The listing between ``document``'s markers."""
    start = document.index(BEGIN) + len(BEGIN)
    inner = document[start : document.index(END, start)].strip("\n")
    return inner.removeprefix("```text\n").removesuffix("\n```")


def main(argv: Sequence[str] | None = None, out: Callable[[str], Any] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", metavar="DOC", help="put the listing between DOC's markers")
    args = parser.parse_args(argv)
    text = listing(measure())
    if args.write:
        doc = Path(args.write)
        doc.write_text(replace_block(doc.read_text(), text))
    out(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
