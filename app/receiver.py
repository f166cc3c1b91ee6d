"""Receiver-side tokens: ignore a callback whose timer the receiver no longer wants.

The service cancels timers itself (``TimerClient.cancel``), but a cancel can lose the
race against a timer that is already firing, and delivery is at least once. A receiver
that must never act on a stale or repeated callback keeps, per timer id, the token it
currently expects, and checks every callback against it::

    guard = TokenGuard()
    timer = client.schedule("payments-retry", payload, delay=30)
    guard.expect(timer.id, timer.token)          # persist this with your own state

    # later, to cancel on the receiving side alone:
    guard.forget(timer.id)

    # in the consumer of payments-retry:
    if guard.accept(record.headers()):           # right token: act, and consume it
        retry_payment(record.value())
    # else: cancelled, superseded by a reschedule, or a duplicate delivery — ignore

``accept`` consumes the token, so a duplicate delivery of the same callback is refused
too (the article's advice: reset the token as soon as the notification arrives).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

__all__ = ["TokenGuard"]


def _header(headers: Iterable[tuple[str, bytes | str | None]], name: str) -> str | None:
    for key, value in headers:
        if key == name and value is not None:
            return value.decode() if isinstance(value, bytes) else value
    return None


class TokenGuard:
    """Expected token per timer id; ``store`` may be any mapping you persist yourself."""

    def __init__(self, store: MutableMapping[str, str] | None = None) -> None:
        self._store: MutableMapping[str, str] = {} if store is None else store

    def expect(self, timer_id: str, token: str) -> None:
        """Remember ``token`` as the only acceptable one for ``timer_id`` (replacing any other)."""
        self._store[timer_id] = token

    def forget(self, timer_id: str) -> None:
        """Cancel on the receiving side: every callback of ``timer_id`` will be refused."""
        self._store.pop(timer_id, None)

    def is_current(self, timer_id: str, token: str) -> bool:
        """Whether ``token`` is the one expected for ``timer_id``, without consuming it."""
        return self._store.get(timer_id) == token

    def accept(self, headers: Iterable[tuple[str, bytes | str | None]] | None) -> bool:
        """True exactly once for a callback carrying the expected ``timer-id``/``timer-token``."""
        headers = list(headers or ())
        timer_id = _header(headers, "timer-id")
        token = _header(headers, "timer-token")
        if timer_id is None or token is None or not self.is_current(timer_id, token):
            return False
        del self._store[timer_id]
        return True
