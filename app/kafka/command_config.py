"""``--command-config FILE``: a Kafka client properties file, as Kafka's own tools take it.

The file is in Java's properties format (``key=value``, ``key: value`` or ``key value``;
``#`` and ``!`` comments; a trailing backslash continues a line). Each property it may
hold maps onto one of the service's settings, so that the file a Kafka shop already
keeps for ``kafka-topics --command-config`` works here too:

================================================  =========================================
property                                          setting
================================================  =========================================
``bootstrap.servers``                             ``KAFKA_BOOTSTRAP_SERVERS``
``security.protocol``                             ``KAFKA_TIMERS_SECURITY_PROTOCOL``
``sasl.mechanism`` (librdkafka: ``sasl.mechanisms``)  ``KAFKA_TIMERS_SASL_MECHANISM``
``sasl.username``, ``sasl.password``              ``KAFKA_TIMERS_SASL_USERNAME``, ``_PASSWORD``
``sasl.jaas.config`` (its username and password)  ``KAFKA_TIMERS_SASL_USERNAME``, ``_PASSWORD``
``ssl.ca.location``                               ``KAFKA_TIMERS_SSL_CAFILE``
``ssl.certificate.location``                      ``KAFKA_TIMERS_SSL_CERTFILE``
``ssl.key.location``                              ``KAFKA_TIMERS_SSL_KEYFILE``
================================================  =========================================

``client.id`` and ``ssl.endpoint.identification.algorithm=https`` (what both clients
do anyway) are accepted and change nothing. Any other property is refused in one line
naming it: a setting that silently did nothing would be worse.
"""

from __future__ import annotations

import re
from pathlib import Path

from kafka_timers_client.errors import ConfigurationError

__all__ = ["PROPERTY_SETTINGS", "parse_properties", "read_command_config"]

#: Each property this command understands, and the setting it sets.
PROPERTY_SETTINGS: dict[str, str] = {
    "bootstrap.servers": "KAFKA_BOOTSTRAP_SERVERS",
    "security.protocol": "KAFKA_TIMERS_SECURITY_PROTOCOL",
    "sasl.mechanism": "KAFKA_TIMERS_SASL_MECHANISM",
    "sasl.mechanisms": "KAFKA_TIMERS_SASL_MECHANISM",
    "sasl.username": "KAFKA_TIMERS_SASL_USERNAME",
    "sasl.password": "KAFKA_TIMERS_SASL_PASSWORD",
    "ssl.ca.location": "KAFKA_TIMERS_SSL_CAFILE",
    "ssl.certificate.location": "KAFKA_TIMERS_SSL_CERTFILE",
    "ssl.key.location": "KAFKA_TIMERS_SSL_KEYFILE",
}
#: Properties taken and ignored, with the only values that may be ignored (None: any).
_NO_OP: dict[str, str | None] = {
    "client.id": None,
    "ssl.endpoint.identification.algorithm": "https",
}
#: Java keystores the Python clients cannot read, and what to give instead.
_KEYSTORES = {
    "ssl.truststore.location": "ssl.ca.location (a PEM CA bundle)",
    "ssl.keystore.location": "ssl.certificate.location and ssl.key.location (PEM files)",
}
_JAAS_FIELD = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
#: Longest file read: a properties file is a few hundred bytes.
_MAX_BYTES = 1 << 20


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: continuations joined, comments and
    blank lines dropped."""
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip()
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
            pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd count of backslashes: the line goes on
            pending += line[:-1]
            continue
        out.append((start, pending + line))
        pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """(line number, key, value) of each property in ``text``, in order."""
    out: list[tuple[int, str, str]] = []
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = _unescape(line[:i])
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out.append((number, key, _unescape(rest)))
    return out


def read_command_config(path: str) -> dict[str, tuple[str, str]]:
    """The settings ``path`` sets: ``{variable: (where, value)}``, ``where`` naming the
    file, line and property for an error message.

    Raises:
        ConfigurationError: the file cannot be read, or holds a property this command
            does not understand (one line naming it and what to write instead).
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(
            f"--command-config {path!r}: cannot read it ({exc.strerror})"
        ) from None
    if len(raw) > _MAX_BYTES:
        raise ConfigurationError(f"--command-config {path!r}: over {_MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # Java's own encoding for a properties file
    name = Path(path).name
    settings: dict[str, tuple[str, str]] = {}
    for number, key, value in parse_properties(text):
        where = f"--command-config {name}:{number} {key}"
        if key in PROPERTY_SETTINGS:
            settings[PROPERTY_SETTINGS[key]] = (where, value)
        elif key == "sasl.jaas.config":
            fields = dict(_JAAS_FIELD.findall(value))
            if "username" not in fields or "password" not in fields:
                raise ConfigurationError(
                    f'{where}: needs username="..." and password="..." (PLAIN or SCRAM); '
                    "or set sasl.username and sasl.password"
                )
            for field_name in ("username", "password"):
                variable = f"KAFKA_TIMERS_SASL_{field_name.upper()}"
                settings[variable] = (where, _unescape(fields[field_name]))
        elif key in _KEYSTORES:
            raise ConfigurationError(
                f"{where}: a Java keystore, which these clients cannot read; set "
                f"{_KEYSTORES[key]} instead"
            )
        elif key in _NO_OP:
            wanted = _NO_OP[key]
            if wanted is not None and value.strip().lower() != wanted:
                raise ConfigurationError(
                    f"{where}={value[:40]!r}: only {wanted!r} is supported (the clients always "
                    "check the broker's host name)"
                )
        else:
            known = ", ".join(sorted({*PROPERTY_SETTINGS, "sasl.jaas.config", *_NO_OP}))
            raise ConfigurationError(f"{where}: not a property this command uses ({known})")
    return settings
