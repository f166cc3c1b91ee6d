/**
 * Run by tests/integration/test_js_client.py against a real worker: schedules a one-shot
 * timer, cancels one and tombstones one with their answers, schedules a series and sends a
 * burst of debounced requests for one id; prints
 * one JSON line for the Python side to check against the callbacks that arrive.
 *
 * Usage: node dist/test/e2e.js BROKERS REQUEST_TOPIC FIRED_TOPIC CALLBACK_TOPIC ID...
 */

import { KafkaTimersError, TimerClient, cancelAnswerOf, partitionFor } from "../src";

/** Whatever the fired topic holds is an answer or not, never an error (checked first). */
function checkHostileAnswers(): void {
  for (const text of ["null", "5", "[1]", '"cancel"', "{", "", '{"event": "cancel"}', "[".repeat(100000)]) {
    if (cancelAnswerOf(Buffer.from(text)) !== null) throw new Error(`read as an answer: ${text.slice(0, 20)}`);
  }
  const answer = cancelAnswerOf(Buffer.from('{"event": "cancel", "request_offset": 7, "id": "x", "partition": 1}'));
  if (answer === null || answer.request_offset !== 7) throw new Error("an answer was not read");
}

/** A due time no request can carry is refused before anything is sent (checked first). */
async function checkHostileDueTimes(client: TimerClient): Promise<void> {
  const hostile: Array<Record<string, unknown>> = [
    { at: Number.NaN },
    { at: Infinity },
    { at: -1 },
    { at: 1e13 },
    { at: new Date(Number.NaN) },
    { delay: Number.NaN },
    { delay: -Infinity },
    { every: "1s", start: 1e400 },
    { every: "1s", end: Number.NaN },
    { debounce: 0 },
    { debounce: "1.5s" },
    { maxWait: "5m" },
    { debounce: "10s", maxWait: "5s" },
    { debounce: "10s", delay: 5 },
  ];
  for (const options of hostile) {
    try {
      await client.schedule("never-sent", "x", options);
    } catch (error) {
      if (error instanceof KafkaTimersError) continue;
      throw error;
    }
    throw new Error(`scheduled with ${JSON.stringify(options)}`);
  }
}

async function main(): Promise<void> {
  checkHostileAnswers();
  const [brokers, requestTopic, firedTopic, callbacks, partitionsText, ...ids] = process.argv.slice(2);
  const client = new TimerClient({ brokers: brokers.split(","), requestTopic, firedTopic });
  try {
    await checkHostileDueTimes(client);
    const partitions = Number(partitionsText);
    const placed = Object.fromEntries(ids.map((id) => [id, partitionFor(id, partitions)]));
    const now = Date.now() / 1000;
    const once = await client.schedule(callbacks, "from js", {
      key: "k-js",
      delay: 1,
      headers: { trace: "js-1" },
    });
    const binary = await client.schedule(callbacks, Buffer.from([0, 1, 2, 255]), {
      key: Buffer.from("k-bin"),
      at: new Date((now + 1.5) * 1000),
    });
    const later = await client.schedule(callbacks, "never", { at: now + 3600 });
    const cancelled = await client.cancel(later.id, later.token, { wait: 30 });
    const wrong = await client.schedule(callbacks, "never either", { at: now + 3600 });
    const refused = await client.cancel(wrong.id, "not-its-token", { wait: 30 });
    const protectedOutcome = await client.tombstone(wrong.id, { wait: 30 });
    const open = await client.schedule(callbacks, "no token", { at: now + 3600, token: "" });
    const tombstoned = await client.tombstone(open.id, { wait: 30 });
    const series = await client.schedule(callbacks, "tick", {
      key: "k-series",
      every: "1s",
      count: 3,
      late: "all",
    });
    // A burst of three debounced requests for one id: one callback, the last one's.
    const burstId = `js-debounce-${now}`;
    const debounced = [];
    for (const n of [1, 2, 3]) {
      debounced.push(
        await client.schedule(callbacks, `edit ${n}`, { id: burstId, key: "k-deb", debounce: 2, maxWait: "1m" }),
      );
    }
    console.log(
      JSON.stringify({
        placed,
        once,
        binary,
        later,
        cancelled,
        wrong,
        refused,
        protectedOutcome,
        tombstoned,
        series,
        debounced,
      }),
    );
  } finally {
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
