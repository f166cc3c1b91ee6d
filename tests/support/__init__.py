"""Shared test helpers: broker resolution and polling with deadlines."""
