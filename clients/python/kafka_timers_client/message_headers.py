"""Reading a consumed confluent-kafka message's headers without trusting them.

Any producer can write any bytes as a header name. confluent-kafka decodes names as
UTF-8, and on one that is not it leaves the message broken: ``headers()`` builds a list
holding a pair whose name is a null pointer, keeps it cached in the message, and hands
it out on every later call, with the decoding error only pending. A call from a hot
Python loop (CPython's specialised call, which does not check for a pending error)
returns that list as if it were good, and touching the null name kills the process
with a segmentation fault (seen in CI). So the headers are asked for through a C-level
call, which turns the pending error into an exception, and a message found broken gets
a marker list in place of the cached one: every later read gives the same answer.
"""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["UNREADABLE_HEADERS", "HeaderPairs", "header_pairs", "read_headers"]

#: Headers as ``(name, bytes)`` pairs, in the record's order (names may repeat).
HeaderPairs = tuple[tuple[str, bytes], ...]

#: Why :func:`read_headers` gives no headers for a broken message.
UNREADABLE_HEADERS = "its headers cannot be read (a header name that is not UTF-8?)"

#: ``message.headers()``, called from C: a pending error is raised, never passed over.
_ask_headers = operator.methodcaller("headers")

#: What :func:`read_headers` leaves cached in a message whose headers are broken.
_BROKEN: list[tuple[str, str | bytes | None]] = []


def header_pairs(raw: Any) -> HeaderPairs:
    """Kafka headers as ``(name, bytes)`` pairs: text values encoded, null values empty.

    Both Kafka clients hand headers over in this loose shape (a list of pairs, values
    ``str``, ``bytes`` or ``None``); everything downstream wants one shape.
    """
    if not raw:  # the common case: no generator built for nothing (a microsecond)
        return ()
    # New pairs, never the client's own tuples.
    return tuple((str(k), v.encode() if isinstance(v, str) else (v or b"")) for k, v in raw)


def read_headers(message: Any) -> tuple[HeaderPairs, str | None]:
    """A confluent-kafka message's headers as pairs, and why they cannot be read (else
    None); total, and the same answer however often it is asked."""
    try:
        raw = _ask_headers(message)
    except Exception:
        message.set_headers(_BROKEN)
        return (), UNREADABLE_HEADERS
    if raw is _BROKEN:
        return (), UNREADABLE_HEADERS
    return header_pairs(raw), None
