/**
 * Per-message acknowledgement, and redelivery after a visibility timeout, on a kafkajs
 * consumer: one durable kafka-timers timer per message handed out.
 *
 * For every batch the consumer fetches, `RedeliveringConsumer` first schedules one timer
 * per message (id from its topic, partition and offset; due `visibilityTimeout` seconds
 * from now) whose callback is a copy of the message (key, value, headers) for the queue
 * topic or a retry topic, waits until the broker has them all, commits the batch's
 * offsets, and only then hands the messages to the application. `ack(delivery)` cancels
 * the message's timer with its token: cancels are batched and never waited for. A copy
 * carries a `delivery-count` header; the timer of a message handed out `maxDeliveries`
 * times sends its copy to the dead-letter topic instead. The Python client's
 * `kafka_timers_client.redelivery` does the same, with the same ids, headers and
 * requests; docs/redelivery.md has the guarantees.
 */

import { randomBytes } from "node:crypto";
import { Consumer, IHeaders, Kafka, KafkaMessage, logLevel, Partitioners, Producer } from "kafkajs";

import { KafkaTimersError } from "./errors";
import type { ClientConfig } from "./index";

/** How many times this message has been handed out (absent on the original: 1). */
export const DELIVERY_COUNT_HEADER = "delivery-count";
/** Where the first copy was read, `topic/partition/offset`: the same on every copy. */
export const DELIVERY_ORIGIN_HEADER = "delivery-origin";
/** On a message dead-lettered at once, never handed out: why. */
export const DEAD_LETTER_REASON_HEADER = "delivery-dead-letter-reason";

const MAX_HEADERS = 256;
const MAX_ID_CHARS = 1024;
const RESERVED = ["timer-", "scheduler-"];
/** Acks sent together at most, and the longest an ack waits to be sent (ms). */
const ACK_BATCH = 1000;
const ACK_LINGER_MS = 5;

/** One message handed to the application: acknowledge it with `ack(delivery)`. */
export interface Delivery {
  topic: string;
  partition: number;
  message: KafkaMessage;
  /** How many times it has been handed out, this time included. */
  deliveries: number;
  /** Where its first copy was read: names the message across its copies. */
  origin: string;
}

export interface RedeliveryOptions {
  /** Where a message goes once handed out `maxDeliveries` times without an ack. */
  deadLetterTopic: string;
  /** Whole seconds to ack a message before a copy of it comes back (default 30). */
  visibilityTimeout?: number;
  /** How many times a message is handed out at most (default 5). */
  maxDeliveries?: number;
  /** Where copies go; by default the topic the message was read from (subscribe to it). */
  retryTopic?: string;
  /** Prefix of the timer ids: one per group reading the same topics (default "redelivery"). */
  namespace?: string;
  /**
   * The largest value a copy may carry: the service's payload limit
   * (`KAFKA_TIMERS_MAX_PAYLOAD_BYTES`, default 934,464). A larger message goes to the
   * dead-letter topic at once.
   */
  maxValueBytes?: number;
  /** Wall clock, epoch seconds. */
  clock?: () => number;
}

/** What a `RedeliveringConsumer` did. */
export interface RedeliveryStats {
  handedOut: number;
  acked: number;
  /** Handed out for the last time: their timers send them to the dead-letter topic. */
  lastChance: number;
  /** Dead-lettered at once, never handed out: no request could carry their copy. */
  deadLetteredNow: number;
  /** Acks the broker refused: those messages come back after the timeout. */
  refused: number;
}

type Headers = Array<[string, Buffer]>;

/** The id of the redelivery timer of the message at `topic[partition]@offset`. */
export function timerIdOf(namespace: string, topic: string, partition: number, offset: string): string {
  return `${namespace}/${topic}/${partition}/${offset}`;
}

function headerList(headers: IHeaders | undefined): Headers {
  const out: Headers = [];
  for (const [name, raw] of Object.entries(headers ?? {})) {
    for (const value of Array.isArray(raw) ? raw : [raw]) {
      out.push([name, value === undefined ? Buffer.alloc(0) : Buffer.from(value)]);
    }
  }
  return out;
}

/** How many times `message` has been handed out, this time included. */
export function deliveriesOf(message: KafkaMessage): number {
  for (const [name, value] of headerList(message.headers)) {
    if (name === DELIVERY_COUNT_HEADER) {
      const count = Number(value.toString());
      return Number.isInteger(count) && count >= 1 ? count : 1;
    }
  }
  return 1;
}

/** Where `message`'s first copy was read (`topic/partition/offset`). */
export function originOf(topic: string, partition: number, message: KafkaMessage): string {
  for (const [name, value] of headerList(message.headers)) {
    if (name === DELIVERY_ORIGIN_HEADER && value.length > 0) return value.toString();
  }
  return `${topic}/${partition}/${message.offset}`;
}

/** The headers of the next copy: its own less `timer-*` and the old count; its origin; `count`. */
export function copyHeaders(headers: IHeaders | undefined, origin: string, count: number): Headers {
  const out: Headers = [];
  let hasOrigin = false;
  for (const [name, value] of headerList(headers)) {
    const low = name.slice(0, 10).toLowerCase();
    if (RESERVED.some((p) => low.startsWith(p)) || name === DELIVERY_COUNT_HEADER) continue;
    hasOrigin ||= name === DELIVERY_ORIGIN_HEADER;
    out.push([name, value]);
  }
  if (!hasOrigin) out.push([DELIVERY_ORIGIN_HEADER, Buffer.from(origin)]);
  out.push([DELIVERY_COUNT_HEADER, Buffer.from(String(count))]);
  return out;
}

function varint(value: number): Buffer {
  const bytes: number[] = [];
  let rest = value;
  while (rest >= 0x80) {
    bytes.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  bytes.push(rest);
  return Buffer.from(bytes);
}

function field(number: number, payload: Buffer): Buffer {
  return Buffer.concat([varint((number << 3) | 2), varint(payload.length), payload]);
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function isUtf8(bytes: Buffer): boolean {
  try {
    utf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/**
 * The request for a timer that sends `key`, `value` and `headers` to `topic` at `due`:
 * protobuf (`future.proto`'s `Future`), or JSON when the key is not UTF-8 (protobuf
 * carries the key as text). A reason (a string) when no request can carry it.
 */
export function copyRequest(
  topic: string,
  key: Buffer | null,
  value: Buffer | null,
  headers: Headers,
  timerId: string,
  token: string,
  due: number,
): Buffer | string {
  if (headers.length > MAX_HEADERS) return "too-many-headers";
  if ([...timerId].length > MAX_ID_CHARS) return "id-too-long";
  if (key !== null && !isUtf8(key)) return jsonRequest(topic, key, value, headers, timerId, token, due);
  const parts = [field(1, Buffer.from(topic))];
  if (key !== null) parts.push(field(2, key));
  if (value !== null) parts.push(field(3, value));
  parts.push(field(4, Buffer.from(timerId)), field(5, Buffer.from(token)));
  parts.push(varint(6 << 3), varint(due));
  for (const [name, hvalue] of headers) {
    parts.push(field(7, Buffer.concat([field(1, Buffer.from(name)), field(2, hvalue)])));
  }
  return Buffer.concat(parts);
}

function jsonRequest(
  topic: string,
  key: Buffer,
  value: Buffer | null,
  headers: Headers,
  timerId: string,
  token: string,
  due: number,
): Buffer | string {
  const text: Record<string, string> = {};
  for (const [name, hvalue] of headers) {
    if (name in text || !isUtf8(hvalue)) return "binary-key-and-headers";
    text[name] = hvalue.toString();
  }
  const doc: Record<string, unknown> = { topic, key_b64: key.toString("base64"), id: timerId, token, at: due, headers: text };
  if (value !== null) doc.value_b64 = value.toString("base64");
  return Buffer.from(JSON.stringify(doc));
}

/** The protobuf request that cancels `timerId` (an acknowledgement). */
export function ackRequest(timerId: string, token: string): Buffer {
  return Buffer.concat([field(4, Buffer.from(timerId)), field(5, Buffer.from(token)), varint(8 << 3), varint(1)]);
}

/**
 * A kafkajs consumer whose messages are acknowledged one by one. The consumer is the
 * application's: connected and subscribed by it (to the retry topic too, if any), never
 * `run` by it; `run(handler)` here reads it. A handler that throws leaves its message
 * unacknowledged: it comes back after the timeout.
 */
export class RedeliveringConsumer {
  readonly stats: RedeliveryStats = { handedOut: 0, acked: 0, lastChance: 0, deadLetteredNow: 0, refused: 0 };
  private readonly producer: Producer;
  private readonly requestTopic: string;
  private readonly token = randomBytes(12).toString("hex");
  private readonly visibilityTimeout: number;
  private readonly maxDeliveries: number;
  private readonly namespace: string;
  private readonly clock: () => number;
  private pending: Array<{ key: string; value: Buffer }> = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();
  private connected: Promise<void> | undefined;

  constructor(
    private readonly consumer: Consumer,
    config: ClientConfig,
    private readonly options: RedeliveryOptions,
  ) {
    this.visibilityTimeout = options.visibilityTimeout ?? 30;
    this.maxDeliveries = options.maxDeliveries ?? 5;
    this.namespace = options.namespace ?? "redelivery";
    this.clock = options.clock ?? (() => Date.now() / 1000);
    if (!Number.isInteger(this.visibilityTimeout) || this.visibilityTimeout < 1) {
      throw new KafkaTimersError(`visibilityTimeout must be whole seconds, 1 or more, not ${this.visibilityTimeout}`);
    }
    if (!Number.isInteger(this.maxDeliveries) || this.maxDeliveries < 1) {
      throw new KafkaTimersError(`maxDeliveries must be 1 or more, not ${this.maxDeliveries}`);
    }
    if (!options.deadLetterTopic) throw new KafkaTimersError("a dead-letter topic is needed");
    this.requestTopic = config.requestTopic ?? "timer-request";
    const kafka = new Kafka({ clientId: "kafka-timers-redelivery", logLevel: logLevel.WARN, ...config.kafka, brokers: config.brokers });
    this.producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  }

  /** Read the consumer, handing each message to `handler` once its timer is durable. */
  async run(handler: (delivery: Delivery) => Promise<void> | void): Promise<void> {
    this.connected ??= this.producer.connect();
    await this.connected;
    await this.consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        if (batch.messages.length === 0) return;
        const handOut = await this.protect(batch.topic, batch.partition, batch.messages);
        const last = batch.messages[batch.messages.length - 1].offset;
        await this.consumer.commitOffsets([
          { topic: batch.topic, partition: batch.partition, offset: (BigInt(last) + 1n).toString() },
        ]);
        resolveOffset(last);
        this.stats.handedOut += handOut.length;
        for (const delivery of handOut) {
          if (!isRunning() || isStale()) break; // committed and protected: they come back
          try {
            await handler(delivery);
          } catch {
            // Not acknowledged: it comes back after the visibility timeout.
          }
        }
        await heartbeat();
      },
    });
  }

  /** Schedule the timers of `messages` and wait for the broker to have them all. */
  private async protect(topic: string, partition: number, messages: KafkaMessage[]): Promise<Delivery[]> {
    const due = Math.ceil(this.clock() + this.visibilityTimeout);
    const requests: Array<{ key: string; value: Buffer }> = [];
    const dead: Array<{ key: Buffer | null; value: Buffer | null; headers: IHeaders }> = [];
    const out: Delivery[] = [];
    for (const message of messages) {
      const count = deliveriesOf(message);
      const origin = originOf(topic, partition, message);
      const lastChance = count >= this.maxDeliveries;
      const target = lastChance ? this.options.deadLetterTopic : (this.options.retryTopic ?? topic);
      const id = timerIdOf(this.namespace, topic, partition, message.offset);
      const headers = copyHeaders(message.headers, origin, lastChance ? count : count + 1);
      const value = message.value ?? null;
      const request =
        value !== null && value.length > (this.options.maxValueBytes ?? 934_464)
          ? "too-large"
          : copyRequest(target, message.key ?? null, value, headers, id, this.token, due);
      if (typeof request === "string") {
        const kept = Object.fromEntries(headerList(message.headers));
        dead.push({
          key: message.key ?? null,
          value: message.value ?? null,
          headers: { ...kept, [DEAD_LETTER_REASON_HEADER]: request, [DELIVERY_ORIGIN_HEADER]: origin },
        });
        continue;
      }
      requests.push({ key: id, value: request });
      if (lastChance) this.stats.lastChance += 1;
      out.push({ topic, partition, message, deliveries: count, origin });
    }
    const sends: Array<Promise<unknown>> = [];
    if (requests.length > 0) sends.push(this.producer.send({ topic: this.requestTopic, acks: -1, messages: requests }));
    if (dead.length > 0) {
      sends.push(this.producer.send({ topic: this.options.deadLetterTopic, acks: -1, messages: dead }));
      this.stats.deadLetteredNow += dead.length;
    }
    await Promise.all(sends);
    return out;
  }

  /**
   * `delivery` is processed: cancel its timer, so that it never comes back (unless the
   * timer fired already: then its copy comes back with its delivery count). Returns at
   * once; acks go out in batches, never waited for (`flush()` waits for them).
   */
  ack(delivery: Delivery): void {
    const id = timerIdOf(this.namespace, delivery.topic, delivery.partition, delivery.message.offset);
    this.pending.push({ key: id, value: ackRequest(id, this.token) });
    this.stats.acked += 1;
    if (this.pending.length >= ACK_BATCH) this.sendAcks();
    else this.flushTimer ??= setTimeout(() => this.sendAcks(), ACK_LINGER_MS);
  }

  private sendAcks(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.pending.length === 0) return;
    const messages = this.pending;
    this.pending = [];
    const sent = this.producer
      .send({ topic: this.requestTopic, acks: -1, messages })
      .then(
        () => undefined,
        () => {
          this.stats.refused += messages.length;
        },
      )
      .finally(() => this.inFlight.delete(sent));
    this.inFlight.add(sent);
  }

  /** Wait until every ack so far is with the broker; reject if some were refused. */
  async flush(): Promise<void> {
    const refused = this.stats.refused;
    this.sendAcks();
    await Promise.all([...this.inFlight]);
    if (this.stats.refused > refused) {
      throw new KafkaTimersError(`${this.stats.refused - refused} acknowledgements were refused by the broker`);
    }
  }

  /** Flush the acks and disconnect the producer. Stop (disconnect) the consumer first. */
  async close(): Promise<void> {
    try {
      await this.flush();
    } finally {
      if (this.connected) await this.producer.disconnect();
    }
  }
}
