"""Child processes that die with their parent, even when the parent is killed with -9.

The dev broker and the demo's workers and oscillators run in sessions of their own (a
Ctrl-C is the parent's to handle, and it stops them in order), so no terminal signal
reaches them; without more, a parent killed with ``kill -9`` (or one whose terminal
closed before it could stop them) leaves them running, the broker holding its port.
On Linux the kernel ends them instead: ``prctl(PR_SET_PDEATHSIG)`` in the child, set
between fork and exec. Elsewhere nothing does, as before: stop them with the parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_parent"]

#: ``PR_SET_PDEATHSIG`` from ``<linux/prctl.h>``.
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that has the child sent ``sig`` when
    this process ends, or ``None`` where that cannot be had.

    ``None`` off Linux (no ``prctl``) and off the main thread: the kernel sends the
    signal when the *thread* that forked the child ends, not the process, so a child
    forked from a short-lived thread would be killed with that thread. Start such
    children from the main thread.

    ``prctl`` is looked up here, in the parent: the child, between fork and exec, only
    calls it. If the parent died before the child set the signal, the child was already
    handed to another parent and would never get it: it checks and ends itself. Where a
    sandbox refuses ``prctl``, the child runs on as it would on another platform.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0)  # refused (a sandbox): as on other platforms
        if os.getppid() != parent:
            os._exit(1)  # the parent is already gone: nobody would ever stop this child

    return preexec
