"""No route of a running worker's web server gives away a timer's token or payload.

A real worker (and an oscillator) on the dev broker, three timers with known secrets —
one pending, one fired, one cancelled — and then every route the worker's web server
has registered is requested with every path parameter filled in every way that could
reach a timer: its id, its due second, its table keys, the table's name, each partition.
The routes are read from the running worker (it logs its aiohttp route table once every
view is registered), not from a list kept here: a view added later, by Faust or by us,
is walked too.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.core.keys import index_key, timer_key
from app.dev.broker import accepts_connections
from app.dev.stack import ServiceProcess
from app.settings import TABLE_NAME
from kafka_timers_client.client import ScheduledTimer, TimerClient
from tests.conftest import OPERATOR_TOKEN
from tests.support.stack import Stack
from tests.support.waiting import wait_until

ROUTES_LINE = re.compile(r"web server on (\S+):(\d+) serves routes (\[.*\])")
PARAM = re.compile(r"\{(\w+)(?::[^}]*)?\}")
#: Query strings tried on every route, beside none: the ones our views read, and more.
QUERIES = ("", "?n=1000", "?n=1", "?id={id}&key={id}&partition=0&token=1&value=1")


@dataclass(frozen=True)
class Secret:
    timer: ScheduledTimer
    payload: bytes

    def forms(self) -> dict[str, bytes]:
        """Every spelling of the token and payload a response could carry."""
        out = {}
        for name, raw in (("token", self.timer.token.encode()), ("payload", self.payload)):
            out[name] = raw
            out[f"{name} (base64)"] = base64.b64encode(raw).rstrip(b"=")
            out[f"{name} (urlsafe base64)"] = base64.urlsafe_b64encode(raw).rstrip(b"=")
            out[f"{name} (hex)"] = raw.hex().encode()
        return out


@dataclass(frozen=True)
class Answer:
    method: str
    url: str
    status: int
    headers: str
    body: bytes


def request(method: str, url: str, *, operator: bool = True) -> Answer:
    """``method`` on ``url``, with the operator's credential unless ``operator`` is False."""
    data = b"" if method in ("POST", "PUT", "PATCH") else None
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"} if operator else {}
    req = urllib.request.Request(url, method=method, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return Answer(method, url, response.status, str(response.headers), response.read())
    except urllib.error.HTTPError as exc:
        return Answer(method, url, exc.code, str(exc.headers), exc.read())


def fills(pattern: str, values: dict[str, list[str]]) -> Iterator[str]:
    """``pattern`` with each of its path parameters replaced by every candidate value."""
    names = PARAM.findall(pattern)
    every = sorted({v for vs in values.values() for v in vs})
    choices = [values.get(name, every) for name in names]
    for combo in itertools.product(*choices):
        path = pattern
        for value in combo:
            path = PARAM.sub(lambda _m, v=value: urllib.parse.quote(v, safe=""), path, count=1)
        yield path


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            out.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return out


def served_routes(worker: ServiceProcess) -> re.Match[str]:
    """The worker's logged route line, once its web server also accepts connections.

    Faust calls the hook that logs the routes when the views are registered, before the
    server binds its port: a request sent on the line alone can be refused.
    """
    found = wait_until(
        lambda: ROUTES_LINE.search(worker.log_text()),
        60,
        "the worker to log its web routes",
        interval=0.2,
    )
    port = int(found.group(2))
    wait_until(lambda: accepts_connections(port), 60, f"the web server to listen on {port}")
    return found


def test_no_route_shows_a_token_or_a_payload(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic(f"http-surface-{uuid.uuid4().hex[:6]}")
    stack.oscillator()
    worker = stack.worker("http-worker", loglevel="info", web_bind="127.0.0.1")

    found = served_routes(worker)
    bind, port = found.group(1), int(found.group(2))
    routes = [tuple(r.split(" ", 1)) for r in json.loads(found.group(3))]
    base = f"http://127.0.0.1:{port}"
    assert bind == "127.0.0.1" and listening_addresses(port) == {"127.0.0.1"}

    now = time.time()
    secrets: dict[str, Secret] = {}
    with TimerClient(settings) as client:
        for state, at in (("pending", now + 3600), ("fired", now + 1), ("cancelled", now + 3600)):
            payload = f"payload-{state}-{uuid.uuid4().hex}".encode()
            timer = client.schedule(
                topic, payload, key="k", at=at, token=f"token-{uuid.uuid4().hex}"
            )
            secrets[state] = Secret(timer, payload)
        client.cancel(secrets["cancelled"].timer.id, secrets["cancelled"].timer.token)
        client.flush()
    with stack.reader(topic) as callbacks:
        callbacks.wait_for(lambda records: len(records) >= 1, timeout=60)

    def states_settled() -> bool:
        answers = {s: request("GET", f"{base}/timers/{t.timer.id}") for s, t in secrets.items()}
        return all(a.status == 200 and json.loads(a.body)["state"] == s for s, a in answers.items())

    wait_until(states_settled, 30, "the worker to know all three timers", interval=0.2)

    values: dict[str, list[str]] = {
        "timer_id": [s.timer.id for s in secrets.values()],
        "name": [TABLE_NAME, "timers"],
    }
    keys = []
    for s in secrets.values():
        for raw in (timer_key(s.timer.due, s.timer.id), index_key(s.timer.id)):
            keys += [raw.decode("latin-1"), json.dumps(raw.decode("latin-1"))]
    values["key"] = keys
    values["partition"] = [str(p) for p in range(settings.partitions)]
    values["id"] = values["timer_id"]
    values["due"] = [str(s.timer.due) for s in secrets.values()]
    values["topic"] = [topic]

    answers: list[Answer] = []
    for method, pattern in routes:
        for path in fills(pattern, values):
            for query in QUERIES:
                url = base + path + query.format(id=secrets["pending"].timer.id)
                answers.append(request(method, url))

    leaks = [
        f"{a.method} {a.url} ({a.status}) shows the {state} timer's {form}"
        for a in answers
        for state, secret in secrets.items()
        for form, spelled in secret.forms().items()
        if spelled in a.body or spelled.decode() in a.headers
    ]
    assert not leaks, "\n".join(leaks)

    # The walk reached real data, and Faust's own table and cluster views are gone.
    served = {pattern for _, pattern in routes}
    assert {"/status/data", "/timers/{timer_id}"} <= served
    pending = secrets["pending"].timer
    looked_up = [a for a in answers if a.url == f"{base}/timers/{pending.id}" and a.status == 200]
    assert looked_up and json.loads(looked_up[0].body)["due"] == pending.due
    assert not [p for p in served if p.startswith(("/table", "/router", "/graph", "/assign"))]
    for path in (f"/table/{TABLE_NAME}/", "/router/", "/assignment/", "/performance/"):
        assert request("GET", base + path).status == 404, path
    assert len(answers) > 50


def test_without_an_operator_credential_the_timer_routes_are_off(stack: Stack) -> None:
    worker = stack.worker("no-operator", loglevel="info", operator_token=None)
    found = served_routes(worker)
    base = f"http://127.0.0.1:{int(found.group(2))}"
    for path in ("/timers/next?n=5", "/timers/anything"):
        answer = request("GET", base + path)  # even with a token: none is configured
        assert answer.status == 403, answer
        assert b"KAFKA_TIMERS_OPERATOR_TOKEN" in answer.body
