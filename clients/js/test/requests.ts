/**
 * Run by tests/unit/test_js_requests.py: reads one case a line on stdin and writes one
 * answer a line, so that a generated test on the Python side can check every request the
 * JavaScript client would send against the worker's own reader, with no broker.
 *
 * A case is `{"schedule": [topic, value, options, sentMs]}` or `{"cancel": [id, token]}`.
 * JSON cannot carry every JavaScript value, so `{"$num": "NaN"}` (or `"Infinity"`,
 * `"-Infinity"`) is that number, `{"$buf": base64}` a Buffer and `{"$date": n}` a Date of
 * `n` ms (itself possibly a `$num`). The answer is `{"sent": value, "id", "token", "due",
 * "spread"}` with the record's value as the client encodes it, `{"refused": message}`
 * for a `KafkaTimersError`, or `{"crash": text}` for anything else (a bug).
 *
 * Usage: node dist/test/requests.js < cases.jsonl
 */

import { createInterface } from "node:readline";

import { KafkaTimersError, cancelRequest, scheduleRequest } from "../src";

function decoded(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decoded);
  if (value === null || typeof value !== "object") return value;
  const doc = value as Record<string, unknown>;
  if ("$num" in doc) return Number(doc.$num);
  if ("$buf" in doc) return Buffer.from(String(doc.$buf), "base64");
  if ("$date" in doc) return new Date(decoded(doc.$date) as number);
  return Object.fromEntries(Object.entries(doc).map(([k, v]) => [k, decoded(v)]));
}

function answer(line: string): Record<string, unknown> {
  try {
    const case_ = decoded(JSON.parse(line)) as Record<string, unknown[]>;
    if (case_.cancel !== undefined) {
      const [id, token] = case_.cancel as [string, string];
      return { sent: JSON.stringify(cancelRequest(id, token)) };
    }
    const [topic, value, options, sentMs] = case_.schedule as [string, string, object, number];
    let n = 0;
    const built = scheduleRequest(topic, value, options, sentMs, () => `generated-${++n}`, () => "generated-token");
    return { ...built, request: undefined, sent: JSON.stringify(built.request) };
  } catch (error) {
    if (error instanceof KafkaTimersError) return { refused: error.message };
    return { crash: String(error instanceof Error ? error.stack : error) };
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  process.stdout.write(`${JSON.stringify(answer(line))}\n`);
});
