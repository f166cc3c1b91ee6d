"""The settings table: each setting declared once, on its dataclass field, and read from it.

A field of :class:`~app.settings.model.Settings` (or of a group of it, such as
:class:`~app.settings.model.TopicNames`) declared with :func:`setting` carries a
:class:`Spec`: its variable, its kind (how the text is read and checked, its bounds),
its help and how the docs show its default. :func:`specs` lists them in field order,
and everything else is generated from that list: reading the environment
(:func:`read_values`), writing it back (:func:`to_env`), the ``kafka-timers config``
listing and the docs' table (:mod:`app.settings.reference`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.settings.kinds import Kind, Values
from app.settings.limits import PREFIX
from kafka_timers_client.errors import ConfigurationError

__all__ = ["Spec", "build", "group", "read_values", "setting", "specs", "to_env", "value_at"]

_SPEC = "kafka_timers.setting"
_GROUP = "kafka_timers.group"


@dataclass(frozen=True)
class Spec:
    """One setting: where it lives, how it is read, what it means."""

    #: The field's path from :class:`Settings`, e.g. ``"web_port"``, ``"topics.ticks"``.
    path: str
    #: Its environment variable.
    env: str
    #: How its text is read, checked and written back.
    kind: Kind
    #: What it does, for the docs and ``kafka-timers config`` (Markdown).
    help: str
    #: The field's default (``None`` when it is computed: see :attr:`shown_default`).
    default: Any = None
    #: The command-line flags that set it too.
    flags: tuple[str, ...] = ()
    #: Other variables read when :attr:`env` is unset or empty, in order.
    aliases: tuple[str, ...] = ()
    #: The default as the docs say it, when it is not just :attr:`default` written out.
    shown_default: str | None = None
    #: Never shown: ``kafka-timers config`` masks it, ``repr`` leaves it out.
    secret: bool = False
    #: The value when the variable is unset, computed from the values read so far and
    #: the environment; ``None``: the field's own default.
    fallback: Callable[[Values, Mapping[str, str]], Any] | None = None


def setting(
    env: str,
    kind: Kind,
    help: str,
    *,
    default: Any = None,
    factory: Callable[[], Any] | None = None,
    flags: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
    shown_default: str | None = None,
    secret: bool = False,
    fallback: Callable[[Values, Mapping[str, str]], Any] | None = None,
) -> Any:
    """A dataclass field that is a setting: its default (or ``factory``) and its
    :class:`Spec` (the path is filled in by :func:`specs`)."""
    spec = Spec(
        path="",
        env=env,
        kind=kind,
        help=" ".join(help.split()),
        default=default,
        flags=flags,
        aliases=aliases,
        shown_default=shown_default,
        secret=secret,
        fallback=fallback,
    )
    metadata = {_SPEC: spec}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata, repr=not secret)
    return field(default=default, metadata=metadata, repr=not secret)


def group(cls: type[Any]) -> dict[str, Any]:
    """The metadata of a dataclass field holding a group of settings (a dataclass of
    them): ``field(default_factory=cls, metadata=group(cls))``."""
    return {_GROUP: cls}


def specs(cls: type[Any], prefix: str = "") -> Iterator[Spec]:
    """The settings of dataclass ``cls``, its groups' included, in field order."""
    for f in dataclasses.fields(cls):
        if _GROUP in f.metadata:
            yield from specs(f.metadata[_GROUP], f"{prefix}{f.name}.")
        elif _SPEC in f.metadata:
            yield dataclasses.replace(f.metadata[_SPEC], path=prefix + f.name)


def value_at(obj: Any, path: str) -> Any:
    """The value at ``path`` (``"topics.ticks"``) of a settings object."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _text(env: Mapping[str, str], name: str) -> str | None:
    """Variable ``name``, or ``None`` when unset or empty.

    Refused unless it is valid UTF-8: bytes that are not come in as lone surrogates,
    which librdkafka cannot take (an unreadable ``SASL_USERNAME`` failed every Kafka
    client with a traceback instead of this line)."""
    value = env.get(name)
    if value in (None, ""):
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ConfigurationError(f"{name} is not valid UTF-8") from None
    return value


def _raw(spec: Spec, env: Mapping[str, str]) -> tuple[str, str | None]:
    """The variable that gives ``spec`` its value, and its text (``None``: unset).

    The service's own variables (``KAFKA_TIMERS_*``) must be UTF-8; the names other
    software shares (``KAFKA_BOOTSTRAP_SERVERS``, ``METRICS_PORT``, ``OTEL_*``) are taken
    as they are, and their kind refuses what it cannot read."""
    if not spec.env.startswith(PREFIX):
        for name in (spec.env, *spec.aliases):
            if env.get(name):
                return name, env[name]
        return spec.env, None
    return spec.env, _text(env, spec.env)


def read_values(cls: type[Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Every setting of ``cls`` that the environment (or a fallback) gives, by path.

    The first malformed or out-of-range variable, in table order, raises
    :class:`ConfigurationError` naming it."""
    values: dict[str, Any] = {}
    for spec in specs(cls):
        name, raw = _raw(spec, env)
        if raw is not None:
            values[spec.path] = spec.kind.parse(name, raw, values)
        elif spec.fallback is not None:
            values[spec.path] = spec.fallback(values, env)
    return values


def build(cls: type[Any], values: Mapping[str, Any], prefix: str = "", **extra: Any) -> Any:
    """An instance of ``cls`` from ``values`` (by path); the rest keep their defaults."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path = prefix + f.name
        if _GROUP in f.metadata:
            kwargs[f.name] = build(f.metadata[_GROUP], values, path + ".")
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs, **extra)


def to_env(obj: Any) -> dict[str, str]:
    """The variables from which ``type(obj).from_env`` rebuilds ``obj``'s settings."""
    env: dict[str, str] = {}
    for spec in specs(type(obj)):
        text = spec.kind.render(value_at(obj, spec.path))
        if text is not None:
            env[spec.env] = text
    return env
