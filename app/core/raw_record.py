"""A record as read from the request topic, before any interpretation, and its derived id."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.timer import Header

__all__ = ["RawRecord", "derived_id", "with_headers"]


@dataclass(frozen=True, init=False)
class RawRecord:
    """A record as consumed from the request topic, before any interpretation.

    Frozen, with its own ``__init__`` for the reason :class:`~app.core.timer.Timer`
    has one: the generated one sets each field through ``object.__setattr__``, and every
    record consumed builds one.
    """

    topic: str
    partition: int
    offset: int
    #: Record timestamp in epoch milliseconds (CreateTime), the base for relative ``in``.
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    #: Why the record could not even be read as a record (a header name that is not
    #: UTF-8, say), or None: such a record is dead-lettered as ``malformed``.
    defect: str | None = None
    #: For a copy a worker forwarded to its owner partition: ``(partition, offset)``
    #: where the request was first read (its ``timer-hop`` header,
    #: :func:`app.core.routing.without_hop`); None for a record read where it was sent.
    origin: tuple[int, int] | None = None

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...] = (),
        defect: str | None = None,
        origin: tuple[int, int] | None = None,
    ) -> None:
        # A copy of the defaults' dict, the fields given set in it, made the instance's
        # dict (frozen stops assignment, not construction): cheaper than the keywords of
        # a ``__dict__.update``, as for Timer. Every field is in it, in the same order.
        fields = _copy_defaults()
        fields["topic"] = topic
        fields["partition"] = partition
        fields["offset"] = offset
        fields["timestamp_ms"] = timestamp_ms
        fields["key"] = key
        fields["value"] = value
        if headers:
            fields["headers"] = headers
        if defect is not None:
            fields["defect"] = defect
        if origin is not None:
            fields["origin"] = origin
        _set_dict(self, "__dict__", fields)

    def header(self, name: str) -> bytes | None:
        """The first header called ``name``."""
        return next((v for k, v in self.headers if k == name), None)


#: A record's instance dict at its fields' defaults, copied by ``RawRecord.__init__``.
_copy_defaults = {
    name: getattr(RawRecord, name, None) for name in RawRecord.__dataclass_fields__
}.copy
#: Sets an instance's dict past the frozen dataclass's ``__setattr__``.
_set_dict = object.__setattr__
_new_record = object.__new__


def with_headers(
    record: RawRecord, headers: tuple[Header, ...], origin: tuple[int, int] | None
) -> RawRecord:
    """``record`` with these ``headers`` and ``origin``, every other field its own: its
    instance dict copied and the two set (the same dict a ``RawRecord(...)`` of the
    fields builds, in the same order), for a forwarded copy read (its ``timer-hop``
    taken off). ``dataclasses.replace`` walks every field, and a call of the class sets
    nine of them through ``__init__``: each cost several times this."""
    fields = record.__dict__.copy()
    fields["headers"] = headers
    fields["origin"] = origin
    copy: RawRecord = _new_record(RawRecord)
    _set_dict(copy, "__dict__", fields)
    return copy


def derived_id(record: RawRecord) -> str:
    """A stable id for a request that names none: ``<topic>-<partition>-<offset>`` of
    where it was sent, the same for the record and for the copy a worker forwards to
    the id's owner partition (:attr:`RawRecord.origin`), so the timer is stored where
    a ``get`` or a ``cancel`` by that id goes."""
    partition, offset = record.origin or (record.partition, record.offset)
    return f"{record.topic}-{partition}-{offset}"
