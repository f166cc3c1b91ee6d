"""Groups of settings kept together in :class:`~app.settings.model.Settings`: the
service's topics and the credentials to reach the brokers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.settings import kinds
from app.settings.limits import PREFIX
from app.settings.table import setting, specs
from kafka_timers_client.config import SASL_MECHANISMS
from kafka_timers_client.config import SECURITY_PROTOCOLS as PROTOCOLS
from kafka_timers_client.errors import ConfigurationError

__all__ = ["SecuritySettings", "TopicNames"]

P = PREFIX


@dataclass(frozen=True)
class TopicNames:
    """The service's own topics; all created with the same partition count."""

    ticks: str = setting(P + "TICK_TOPIC", kinds.Topic(), "ticks", default="oscillator")
    requests: str = setting(
        P + "REQUEST_TOPIC", kinds.Topic(), "timer requests", default="timer-request"
    )
    fired: str = setting(
        P + "FIRED_TOPIC",
        kinds.Topic(),
        "one audit record per fire and per cancel outcome",
        default="timer-fired",
    )
    dlq: str = setting(
        P + "DLQ_TOPIC",
        kinds.Topic(),
        "rejected requests, with the original bytes and a reason header",
        default="timer-request-dlq",
    )

    @classmethod
    def named(cls, name: Callable[[str], str]) -> TopicNames:
        """Each topic named ``name(kind)``, kind ``ticks``, ``requests``, ``fired`` or
        ``dlq``: a deployment's own set, as a test or a benchmark makes one."""
        return cls(
            ticks=name("ticks"), requests=name("requests"), fired=name("fired"), dlq=name("dlq")
        )

    def all(self) -> tuple[str, ...]:
        return (self.ticks, self.requests, self.fired, self.dlq)

    def check(self) -> None:
        """Refuse two service topics with one name: each needs its own."""
        seen: dict[str, str] = {}
        for spec in specs(TopicNames):
            topic = getattr(self, spec.path)
            if topic in seen:
                raise ConfigurationError(
                    f"{spec.env}={topic!r} is also {seen[topic]}: "
                    "each service topic needs its own name"
                )
            seen[topic] = spec.env


@dataclass(frozen=True)
class SecuritySettings:
    """TLS/SASL for real clusters, for both Kafka clients (see :mod:`app.kafka.config`)."""

    protocol: str = setting(
        P + "SECURITY_PROTOCOL",
        kinds.Text(upper=True, shown=", ".join(f"`{p}`" for p in PROTOCOLS)),
        "how the Kafka clients reach the brokers",
        default="PLAINTEXT",
    )
    sasl_mechanism: str | None = setting(
        P + "SASL_MECHANISM",
        kinds.Text(upper=True, shown=", ".join(f"`{m}`" for m in SASL_MECHANISMS)),
        "SASL mechanism (with a SASL protocol)",
    )
    sasl_username: str | None = setting(P + "SASL_USERNAME", kinds.Text(), "SASL user name")
    sasl_password: str | None = setting(
        P + "SASL_PASSWORD", kinds.Text(), "SASL password", secret=True
    )
    ssl_cafile: str | None = setting(
        P + "SSL_CAFILE",
        kinds.File(),
        "CA bundle to verify the brokers' certificates",
        shown_default="the system's",
    )
    ssl_certfile: str | None = setting(
        P + "SSL_CERTFILE", kinds.File(), "client certificate, for mutual TLS"
    )
    ssl_keyfile: str | None = setting(
        P + "SSL_KEYFILE", kinds.File(), "client certificate's key, for mutual TLS"
    )

    def check(self) -> None:
        """Refuse combinations that one of the two Kafka clients would misread or reject."""
        if self.protocol not in PROTOCOLS:
            raise ConfigurationError(
                f"{P}SECURITY_PROTOCOL={self.protocol!r}: use one of {', '.join(PROTOCOLS)}"
            )
        # Checked whatever the protocol: an unsupported mechanism is a mistake even unused.
        if self.sasl_mechanism is not None and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"{P}SASL_MECHANISM={self.sasl_mechanism!r}: use one of "
                f"{', '.join(SASL_MECHANISMS)}"
            )
        if self.protocol.startswith("SASL") and not (self.sasl_username and self.sasl_password):
            raise ConfigurationError(
                f"{P}SECURITY_PROTOCOL={self.protocol} needs {P}SASL_USERNAME and {P}SASL_PASSWORD"
            )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigurationError(
                f"{P}SSL_KEYFILE needs {P}SSL_CERTFILE (the certificate of that key)"
            )
