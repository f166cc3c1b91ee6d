"""Translate :class:`Settings` into Faust's broker credentials (aiokafka inside Faust).

The same address and TLS/SASL as :mod:`app.kafka.config` gives librdkafka.
"""

from __future__ import annotations

import ssl
from typing import Any

import faust

from app.settings import Settings

__all__ = ["faust_credentials"]


def faust_credentials(settings: Settings) -> Any:
    """Faust ``broker_credentials`` for the same TLS/SASL as librdkafka, or ``None``."""
    sec = settings.security
    context = None
    if sec.protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=sec.ssl_cafile)
        if sec.ssl_certfile:
            context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile)
    if sec.protocol.startswith("SASL"):
        # Settings.from_env has already refused anything but PLAIN and SCRAM-SHA-*.
        return faust.SASLCredentials(
            username=sec.sasl_username,
            password=sec.sasl_password,
            mechanism=(sec.sasl_mechanism or "PLAIN").upper(),
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None
