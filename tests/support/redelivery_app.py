"""An application that reads a queue through :class:`RedeliveringConsumer`, in its own
process, for the redelivery tests (and killed -9 by them).

It acknowledges every redelivered copy, and of the first copies all but those whose
message number is chosen by ``--ignore-every`` (and all of them with ``--fail-all``).
Before it acknowledges a batch, it writes one line per message to its log (``kind
number deliveries topic partition offset pid timer``: ``kind`` ``A`` for acked and ``I``
for ignored, ``timer`` the id of the timer that sent this copy or ``-`` for a first
copy) and flushes it: a line is on disk before its ack is sent, so an ack the test does
not know of cannot exist. It imports only the slim client and confluent-kafka.

Run: ``python -m tests.support.redelivery_app --help``.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from confluent_kafka import Consumer

from kafka_timers_client.config import ClientConfig, confluent_consumer
from kafka_timers_client.redelivery import RedeliveringConsumer, deliveries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--fired", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--dead-letter", required=True)
    parser.add_argument("--retry-topic")
    parser.add_argument("--group", required=True)
    parser.add_argument("--visibility", type=int, default=5)
    parser.add_argument("--max-deliveries", type=int, default=5)
    parser.add_argument("--ignore-every", type=int, default=10)
    parser.add_argument("--fail-all", action="store_true")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds of work per batch")
    parser.add_argument("--log", required=True)
    parser.add_argument("--one-by-one", action="store_true", help="read with poll(), not consume()")
    args = parser.parse_args()

    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    config = ClientConfig(
        bootstrap_servers=args.bootstrap, request_topic=args.requests, fired_topic=args.fired
    )
    consumer = Consumer(confluent_consumer(config, args.group, **{"fetch.wait.max.ms": 50}))
    topics = [args.queue] + ([args.retry_topic] if args.retry_topic else [])
    consumer.subscribe(topics)
    queue = RedeliveringConsumer(
        consumer,
        config,
        dead_letter_topic=args.dead_letter,
        visibility_timeout=args.visibility,
        max_deliveries=args.max_deliveries,
        retry_topic=args.retry_topic,
        namespace=args.group,
        batch_size=args.batch,
    )
    pid = os.getpid()
    with open(args.log, "a") as log:
        while not stopping:
            if args.one_by_one:
                one = queue.poll(0.2)
                batch = [] if one is None else [one]
            else:
                batch = queue.consume(args.batch, 0.2)
            if not batch:
                continue
            lines, acks = [], []
            for message in batch:
                number = int(message.value() or b"-1")
                count = deliveries(message)
                ignored = args.fail_all or (count == 1 and number % args.ignore_every == 0)
                place = f"{message.topic()} {message.partition()} {message.offset()}"
                timer = dict(message.headers() or ()).get("timer-id") or "-"
                if isinstance(timer, bytes):
                    timer = timer.decode()
                kind = "I" if ignored else "A"
                lines.append(f"{kind} {number} {count} {place} {pid} {timer}\n")
                if not ignored:
                    acks.append(message)
            if args.pause:
                time.sleep(args.pause)  # the application's work on the batch
            log.write("".join(lines))
            log.flush()
            for message in acks:
                queue.ack(message)
    queue.close()
    consumer.close()


if __name__ == "__main__":
    main()
