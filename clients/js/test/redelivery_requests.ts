/**
 * Run by tests/unit/test_js_redelivery.py: reads one case a line on stdin and writes one
 * answer a line, so that the Python side checks every request the redelivery module
 * would send against the worker's own reader, with no broker.
 *
 * A case is `{"copy": {topic, key, value, headers, id, token, due, origin, count}}` (key,
 * value and header values as base64, key and value possibly null; headers a list of
 * `[name, base64]`, a name possibly repeated) or `{"ack": [id, token]}`. The answer is
 * `{"sent": base64}` or `{"reason": text}`.
 *
 * Usage: node dist/test/redelivery_requests.js < cases.jsonl
 */

import { createInterface } from "node:readline";

import { IHeaders } from "kafkajs";

import { ackRequest, copyHeaders, copyRequest } from "../src";

function buffer(text: string | null): Buffer | null {
  return text === null ? null : Buffer.from(text, "base64");
}

function answer(line: string): Record<string, unknown> {
  const doc = JSON.parse(line) as Record<string, unknown>;
  if (doc.ack !== undefined) {
    const [id, token] = doc.ack as [string, string];
    return { sent: ackRequest(id, token).toString("base64") };
  }
  const c = doc.copy as Record<string, unknown>;
  // As kafkajs hands consumed headers over: a repeated name becomes an array.
  const headers: IHeaders = {};
  for (const [name, value] of c.headers as Array<[string, string]>) {
    const previous = headers[name];
    const bytes = Buffer.from(value, "base64");
    if (previous === undefined) headers[name] = bytes;
    else headers[name] = [...(Array.isArray(previous) ? previous : [previous]), bytes];
  }
  const copied = copyHeaders(headers, String(c.origin), Number(c.count));
  const sent = copyRequest(
    String(c.topic),
    buffer(c.key as string | null),
    buffer(c.value as string | null),
    copied,
    String(c.id),
    String(c.token),
    Number(c.due),
  );
  return typeof sent === "string" ? { reason: sent } : { sent: sent.toString("base64") };
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let out: Record<string, unknown>;
  try {
    out = answer(line);
  } catch (error) {
    out = { crash: String(error) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
