"""What a worker shows over HTTP (status page, JSON, health) and what the CLI reads back.

Never a token or a payload. views and health register on the worker's web server;
model is the pure arithmetic behind the page; cli is ``kafka-timers status``; static/
is the page itself.
"""
