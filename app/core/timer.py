"""The timer model: what a request asks for, independent of its wire format."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.core.debounce import Debounce
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import spread_second

__all__ = ["Cancel", "Header", "Timer", "TokenAction", "one_shot"]

#: One Kafka record header: a name and raw bytes.
Header = tuple[str, bytes]

#: Sets an instance's dict past the frozen dataclass's ``__setattr__`` (Timer.__init__).
_set_dict = object.__setattr__
#: Makes an instance without calling its ``__init__`` (:func:`one_shot`).
_new_object = object.__new__


@dataclass(frozen=True, init=False)
class Timer:
    """A request to deliver one record to ``topic`` at (or after) epoch second ``due``.

    A recurring timer (``recurrence`` set) is stored as its next occurrence: ``due`` and
    ``seq`` are that occurrence's, and after each fire the next one replaces it.

    Frozen, with its own ``__init__``: the one a frozen dataclass generates sets each of
    the fields through ``object.__setattr__``, which made building a Timer cost
    more than parsing it (3.1 µs of an 8.5 µs unpack). Every request parsed and every
    timer fired builds one.
    """

    #: Stable id of the timer; receivers de-duplicate callbacks on it.
    id: str
    #: Epoch second at or after which the callback is produced (fractions already rounded up).
    due: int
    #: Topic the callback is produced to.
    topic: str
    #: Key of the callback record (``None`` for a keyless record).
    key: bytes | None
    #: Value of the callback record, passed through unchanged.
    value: bytes | None
    #: Token of this version of the timer; cancels must present it.
    token: str = ""
    #: Headers copied onto the callback, after the service's own ``timer-*`` headers.
    headers: tuple[Header, ...] = ()
    #: The series this timer is an occurrence of; ``None`` for a one-shot timer. Its
    #: ``start`` is occurrence 1's due second: with the token, the version's identity.
    recurrence: Recurrence | None = None
    #: This occurrence's number in its series, from 1 (0 for a one-shot timer).
    seq: int = 0
    #: Occurrences of the series delivered before this one (for status).
    fired_before: int = 0
    #: The timer's own late-fire policy; ``None`` (or what it leaves out): the service's.
    late: LatePolicy | None = None
    #: Seconds past ``due`` over which the callback may be spread (0: none). It fires at
    #: :attr:`fire_at`, in ``[due, due + spread]``; ``due`` stays the requested second.
    spread: int = 0
    #: The Schema Registry schema id of the request's frame (:mod:`app.core.sr_framing`),
    #: or ``None`` for a request that came unframed. Kept for the fired record (audit).
    schema_id: int | None = None
    #: A debounced timer's window and what it merged (:mod:`app.core.debounce`); ``None``
    #: for any other. Left out of the instance's dict when ``None`` (the class attribute
    #: answers): building and unpacking every other timer costs nothing more for it.
    debounce: Debounce | None = None

    def __init__(
        self,
        id: str,
        due: int,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        token: str = "",
        headers: tuple[Header, ...] = (),
        recurrence: Recurrence | None = None,
        seq: int = 0,
        fired_before: int = 0,
        late: LatePolicy | None = None,
        spread: int = 0,
        schema_id: int | None = None,
        debounce: Debounce | None = None,
    ) -> None:
        # A copy of the defaults' dict, the fields given set in it, made the instance's
        # dict (frozen stops assignment, not construction): for a plain timer a third
        # less than the 13 keywords of a ``__dict__.update`` (7,359 instructions against
        # 8,695, callgrind). Every field is in it, in the same order, as before.
        fields = _copy_defaults()
        fields["id"] = id
        fields["due"] = due
        fields["topic"] = topic
        fields["key"] = key
        fields["value"] = value
        fields["token"] = token
        if headers:
            fields["headers"] = headers
        if recurrence is not None:
            fields["recurrence"] = recurrence
        if seq:
            fields["seq"] = seq
        if fired_before:
            fields["fired_before"] = fired_before
        if late is not None:
            fields["late"] = late
        if spread:
            fields["spread"] = spread
        if schema_id is not None:
            fields["schema_id"] = schema_id
        if debounce is not None:
            fields["debounce"] = debounce
        _set_dict(self, "__dict__", fields)

    @property
    def fire_at(self) -> int:
        """The second this occurrence fires at: ``due``, or for a spread timer ``due``
        plus an offset fixed by its id and ``seq`` (:mod:`kafka_timers_client.spread`)."""
        if not self.spread:
            return self.due
        return spread_second(self.id, self.seq, self.due, self.spread)

    @property
    def version_due(self) -> int:
        """The due second that, with the token, identifies this version of the timer:
        its own for a one-shot timer, occurrence 1's for a series."""
        if self.recurrence is not None and self.recurrence.start is not None:
            return self.recurrence.start
        return self.due


#: A timer's instance dict at its fields' defaults (all but ``debounce``, which stays out
#: of it when ``None``), copied by ``Timer.__init__``: the required ones are set anyway.
_DEFAULTS: dict[str, object] = {
    name: getattr(Timer, name, None) for name in Timer.__dataclass_fields__ if name != "debounce"
}
_copy_defaults = _DEFAULTS.copy


def one_shot(
    id: str, due: int, topic: str, key: bytes | None, value: bytes | None, token: str
) -> Timer:
    """``Timer(id, due, topic, key, value, token)``, every other field at its default,
    without a call of ``__init__`` (its defaults and checks of the other fields): what
    the plain protobuf reader builds for most requests, a fifth cheaper."""
    timer: Timer = _new_object(Timer)
    fields = _copy_defaults()
    fields["id"] = id
    fields["due"] = due
    fields["topic"] = topic
    fields["key"] = key
    fields["value"] = value
    fields["token"] = token
    _set_dict(timer, "__dict__", fields)
    return timer


class TokenAction(str, Enum):
    """What a request that names a pending timer by id and token asks of it."""

    #: Remove it: it never fires.
    CANCEL = "cancel"
    #: Hold its occurrences when due until resumed (``PartitionWheel.pause``).
    PAUSE = "pause"
    #: Release a paused timer: what came due fires now, by its late policy.
    RESUME = "resume"
    #: Fire it now: a one-shot's callback goes out at once (then it is gone), a series
    #: gets one extra occurrence (:mod:`app.core.wheel_extra`).
    TRIGGER = "trigger"
    #: Deliver the occurrences a series would have had in a past window
    #: (:attr:`Cancel.window`).
    BACKFILL = "backfill"


@dataclass(frozen=True)
class Cancel:
    """A request about the pending timer ``id``, authorised by its ``token``: to cancel
    it (the default), or to pause, resume, trigger or backfill it (:attr:`action`). All
    travel the same way: routed by id, answered on the fired topic at the request's
    offset."""

    #: Id of the timer to cancel.
    id: str
    #: Token the timer was scheduled with; a mismatch refuses the cancel.
    token: str
    #: False for an etf1 tombstone: it carries no token and waits for no timer (a
    #: tombstone for an id with no timer is ``not_found``, never remembered). It cancels
    #: only a timer stored without a token, as every cancel needs the timer's token.
    check_token: bool = True
    #: What is asked: cancel, pause, resume, trigger or backfill.
    action: TokenAction = TokenAction.CANCEL
    #: A backfill's window ``[from, to)``, epoch seconds; ``None`` for any other action.
    window: tuple[int, int] | None = None
