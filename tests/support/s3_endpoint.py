"""A small in-memory S3-compatible endpoint, so the dev broker (Tansu on its ``s3://``
storage engine) keeps its data across its own restarts in tests.

Why our own: Tansu stores every record batch as one object, guards its metadata with
conditional writes, and *lists every batch object of a partition on each fetch* that has
data to return, stopping when the fetch's max wait runs out. So the endpoint must honour
conditional writes (the npm ``s3rver`` ignores them: everything was lost after a kill -9)
and list fast (``moto[server]`` takes 40-68 ms for 400 keys: a reader with a 10 ms fetch
wait never reaches the end of a partition, and workers' changelog catch-up timed out);
both measured before (the team's platform notes, issue 23).

What it serves, and only what Tansu's ``object_store`` client (the Rust crate, S3 flavour,
path-style URLs) sends: CreateBucket and HeadBucket; PutObject with ``If-None-Match: *``
(412 if the key exists) and ``If-Match: <etag>`` (412 unless the key exists with that
ETag); GetObject and HeadObject (``Range``, ``If-Match``, ``If-None-Match``); DeleteObject;
DeleteObjects (``POST ?delete``); CopyObject; ListObjectsV2 (prefix, delimiter,
start-after, max-keys, continuation tokens). Anything else is answered 501 and printed
to stderr, so a request it does not understand is seen, never silently accepted.
Signatures are not checked. ``GET /_stats`` returns counts and handling time per
operation as JSON (``_stats`` is not a valid bucket name).

Listing is a ``bisect`` into a sorted key list and a join of per-object XML fragments
rendered once at write time, so its cost grows with the keys returned, not with the
bucket. Measured here (2 cores shared, aiohttp 3.14, ``python -m tests.support.s3_endpoint
--port P --bench`` against one serving on P, a keep-alive ``http.client``; 2026-11-25):
a ListObjectsV2 of a 400-key prefix in a bucket of 20,400 keys takes 0.47-0.53 ms round
trip (p50; p99 0.8-1.5 ms), a full 1,000-key page 0.85-1.24 ms, a 200-byte PutObject
with ``If-None-Match: *`` 0.39-0.51 ms. Inside the broker-restart fault tests (Tansu,
2 oscillators, 2 workers, 500 timers) the endpoint spent 0.11-0.15 ms per listing,
0.07-0.10 ms per GetObject and 0.12-0.20 ms per conditional PutObject (``/_stats``), and
refused 2-26 conditional writes per run (a stale ETag or an existing key: Tansu re-reads
the object and tries again, or answers e.g. TOPIC_ALREADY_EXISTS), which is why the
endpoint must refuse them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import hashlib
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import unquote
from xml.sax.saxutils import escape

from aiohttp import web

__all__ = ["Store", "bench", "main"]

_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
_XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>'


@dataclass(frozen=True)
class StoredObject:
    body: bytes
    #: Quoted, as S3 sends it: ``"<md5 hex>"``.
    etag: str
    modified: float
    #: Its ``<Contents>`` element of a listing, rendered once at write time.
    fragment: str


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


class Bucket:
    """Objects by key, and the keys in order (for listing)."""

    def __init__(self) -> None:
        self.objects: dict[str, StoredObject] = {}
        self.keys: list[str] = []

    def put(self, key: str, body: bytes) -> StoredObject:
        now = time.time()
        etag = f'"{hashlib.md5(body, usedforsecurity=False).hexdigest()}"'
        quoted = etag.replace('"', "&quot;")
        fragment = (
            f"<Contents><Key>{escape(key)}</Key><LastModified>{_iso(now)}</LastModified>"
            f"<ETag>{quoted}</ETag><Size>{len(body)}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
        if key not in self.objects:
            bisect.insort(self.keys, key)
        stored = self.objects[key] = StoredObject(body, etag, now, fragment)
        return stored

    def delete(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]


def _etag_matches(header: str, etag: str) -> bool:
    """``If-Match`` / ``If-None-Match`` semantics: ``*`` or any listed tag (weak or not)."""
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags or etag.strip('"') in tags


def _error(status: int, code: str, message: str = "") -> web.Response:
    body = f"{_XML_HEAD}<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


def _xml(body: str) -> web.Response:
    return web.Response(body=(_XML_HEAD + body).encode(), content_type="application/xml")


def _successor(prefix: str) -> str:
    """The smallest string above every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _page_delimited(
    bucket: Bucket, i: int, prefix: str, delimiter: str, max_keys: int
) -> tuple[list[str], list[str], str | None]:
    """One page of a listing with a delimiter from position ``i``: object fragments,
    common prefixes, and the key the next page starts at (``None`` on the last page)."""
    keys = bucket.keys
    parts: list[str] = []
    prefixes: list[str] = []
    while i < len(keys) and keys[i].startswith(prefix):
        if len(parts) + len(prefixes) == max_keys:
            return parts, prefixes, keys[i]
        key = keys[i]
        cut = key.find(delimiter, len(prefix))
        if cut >= 0:
            common = key[: cut + len(delimiter)]
            prefixes.append(f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>")
            i = bisect.bisect_left(keys, _successor(common))  # past every key under it
        else:
            parts.append(bucket.objects[key].fragment)
            i += 1
    return parts, prefixes, None


class Store:
    """Every bucket, and per-operation counts and time spent (for ``/_stats``)."""

    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.calls: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)

    def list_objects(self, name: str, bucket: Bucket, query: dict[str, str]) -> web.Response:
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        max_keys = int(query.get("max-keys", "1000"))
        keys = bucket.keys
        if "continuation-token" in query:
            start = base64.urlsafe_b64decode(query["continuation-token"]).decode()
            i = bisect.bisect_left(keys, start)
        else:
            i = bisect.bisect_left(keys, prefix)
            if "start-after" in query:
                i = max(i, bisect.bisect_right(keys, query["start-after"]))
        if delimiter:
            parts, prefixes, next_key = _page_delimited(bucket, i, prefix, delimiter, max_keys)
        else:  # what a fetch asks for: one slice, no Python work per key but a lookup
            end = bisect.bisect_left(keys, _successor(prefix)) if prefix else len(keys)
            page = keys[i : min(end, i + max_keys)]
            parts, prefixes = [bucket.objects[key].fragment for key in page], []
            next_key = keys[i + len(page)] if i + len(page) < end else None
        count = len(parts) + len(prefixes)
        token = (
            f"<NextContinuationToken>{base64.urlsafe_b64encode(next_key.encode()).decode()}"
            "</NextContinuationToken>"
            if next_key is not None
            else ""
        )
        return _xml(
            f'<ListBucketResult xmlns="{_XMLNS}"><Name>{escape(name)}</Name>'
            f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{count}</KeyCount>"
            f"<MaxKeys>{max_keys}</MaxKeys><Delimiter>{escape(delimiter)}</Delimiter>"
            f"<IsTruncated>{'true' if next_key is not None else 'false'}</IsTruncated>"
            f"{token}{''.join(parts)}{''.join(prefixes)}</ListBucketResult>"
        )

    async def put_object(self, bucket: Bucket, key: str, request: web.BaseRequest) -> web.Response:
        current = bucket.objects.get(key)
        if_none_match = request.headers.get("If-None-Match")
        if_match = request.headers.get("If-Match")
        if (
            if_none_match is not None
            and current is not None
            and _etag_matches(if_none_match, current.etag)
        ):
            return _error(412, "PreconditionFailed", f"{key} exists")
        if if_match is not None and (current is None or not _etag_matches(if_match, current.etag)):
            return _error(412, "PreconditionFailed", f"{key}: ETag does not match")
        source = request.headers.get("x-amz-copy-source")
        if source is not None:
            from_bucket, _, from_key = unquote(source).lstrip("/").partition("/")
            found = self.buckets.get(from_bucket)
            original = found.objects.get(from_key) if found else None
            if original is None:
                return _error(404, "NoSuchKey", from_key)
            stored = bucket.put(key, original.body)
            return _xml(
                f"<CopyObjectResult><LastModified>{_iso(stored.modified)}</LastModified>"
                f"<ETag>{escape(stored.etag)}</ETag></CopyObjectResult>"
            )
        stored = bucket.put(key, await request.read())
        return web.Response(headers={"ETag": stored.etag})

    def get_object(self, bucket: Bucket, key: str, request: web.BaseRequest) -> web.Response:
        stored = bucket.objects.get(key)
        if stored is None:
            return _error(404, "NoSuchKey", key)
        headers = {
            "ETag": stored.etag,
            "Last-Modified": formatdate(stored.modified, usegmt=True),
        }
        if_match = request.headers.get("If-Match")
        if if_match is not None and not _etag_matches(if_match, stored.etag):
            return _error(412, "PreconditionFailed", key)
        if_none_match = request.headers.get("If-None-Match")
        if if_none_match is not None and _etag_matches(if_none_match, stored.etag):
            return web.Response(status=304, headers=headers)
        body, status = stored.body, 200
        wanted = request.headers.get("Range", "")
        if wanted.startswith("bytes="):
            first_text, _, last_text = wanted[6:].partition("-")
            size = len(body)
            if first_text:
                first = int(first_text)
                last = min(int(last_text), size - 1) if last_text else size - 1
            else:
                first, last = max(0, size - int(last_text)), size - 1
            if first >= size or first > last:
                return _error(416, "InvalidRange", wanted)
            body, status = body[first : last + 1], 206
            headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(body))
            return web.Response(status=status, headers=headers)
        return web.Response(status=status, body=body, headers=headers)

    async def delete_objects(self, bucket: Bucket, request: web.BaseRequest) -> web.Response:
        root = ET.fromstring(await request.read())
        deleted = []
        for element in root.iter():
            if element.tag.rsplit("}", 1)[-1] == "Key" and element.text is not None:
                bucket.delete(element.text)
                deleted.append(f"<Deleted><Key>{escape(element.text)}</Key></Deleted>")
        return _xml(f'<DeleteResult xmlns="{_XMLNS}">{"".join(deleted)}</DeleteResult>')

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        started = time.perf_counter()
        operation = "unknown"
        try:
            operation, response = await self._route(request)
        finally:
            self.calls[operation] += 1
            self.seconds[operation] += time.perf_counter() - started
        if response.status == 501:
            print(
                f"s3_endpoint: not implemented: {request.method} {request.raw_path}",
                file=sys.stderr,
            )
        return response

    async def _route(self, request: web.BaseRequest) -> tuple[str, web.StreamResponse]:
        path, _, _ = request.raw_path.partition("?")
        name, _, raw_key = path.lstrip("/").partition("/")
        key = unquote(raw_key)
        query = dict(request.query)
        method = request.method
        if name == "_stats":
            return "stats", web.json_response(self.stats())
        if not key and method == "PUT":
            self.buckets.setdefault(name, Bucket())
            return "create_bucket", web.Response()
        bucket = self.buckets.get(name)
        if bucket is None:
            return "no_bucket", _error(404, "NoSuchBucket", name)
        if not key:
            if method == "HEAD":
                return "head_bucket", web.Response()
            if method == "GET" and query.get("list-type") == "2":
                return "list", self.list_objects(name, bucket, query)
            if method == "POST" and "delete" in query:
                return "delete_objects", await self.delete_objects(bucket, request)
        elif method == "PUT":
            response = await self.put_object(bucket, key, request)
            kind = (
                "put_if_none_match"
                if "If-None-Match" in request.headers
                else "put_if_match"
                if "If-Match" in request.headers
                else "put"
            )
            return kind + ("_refused" if response.status == 412 else ""), response
        elif method in ("GET", "HEAD"):
            return method.lower(), self.get_object(bucket, key, request)
        elif method == "DELETE":
            bucket.delete(key)
            return "delete", web.Response(status=204)
        return "not_implemented", _error(501, "NotImplemented", f"{method} {request.raw_path}")

    def stats(self) -> dict[str, dict[str, float]]:
        return {
            op: {"calls": n, "mean_ms": round(self.seconds[op] / n * 1000, 4)}
            for op, n in sorted(self.calls.items())
        }


async def _serve(port: int, buckets: list[str]) -> None:
    store = Store()
    for name in buckets:
        store.buckets[name] = Bucket()
    runner = web.ServerRunner(web.Server(store.handle), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"s3_endpoint listening on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()  # serve until killed


def bench(port: int, listed: int = 400, others: int = 20_000, rounds: int = 500) -> str:
    """Round-trip times from a keep-alive client to an endpoint already serving on
    ``port``: ``listed`` keys under the prefix a fetch lists, ``others`` elsewhere."""
    import http.client
    import statistics

    conn = http.client.HTTPConnection("127.0.0.1", port)

    def call(method: str, path: str, body: bytes = b"", **headers: str) -> float:
        started = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return (time.perf_counter() - started) * 1000

    def figures(name: str, times: list[float]) -> str:
        times.sort()
        return (
            f"{name}: p50 {statistics.median(times):.2f} ms, "
            f"p99 {times[int(len(times) * 0.99)]:.2f} ms"
        )

    call("PUT", "/bench")
    body = b"x" * 200
    put_times = [
        call("PUT", f"/bench/p/records/{i:020d}.batch", body, **{"If-None-Match": "*"})
        for i in range(listed)
    ]
    for i in range(others):
        call("PUT", f"/bench/q{i % 50}/records/{i:020d}.batch", body)
    lists = [call("GET", "/bench?list-type=2&prefix=p/records/") for _ in range(rounds)]
    pages = [call("GET", "/bench?list-type=2&prefix=q") for _ in range(rounds // 5)]
    return "; ".join(
        [
            figures(f"PutObject If-None-Match 200 B ({listed})", put_times),
            figures(f"ListObjectsV2 {listed} keys of {listed + others}", lists),
            figures("ListObjectsV2 a full 1,000-key page", pages),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[], help="create it at start")
    parser.add_argument(
        "--bench", action="store_true", help="measure an endpoint already on --port, then exit"
    )
    args = parser.parse_args(argv)
    if args.bench:
        print(bench(args.port))
        return
    asyncio.run(_serve(args.port, args.bucket))


if __name__ == "__main__":
    main()
