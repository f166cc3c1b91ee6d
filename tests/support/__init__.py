"""Shared test helpers: the broker, real processes (on moved clocks too), fault scenes, waiting."""
