/**
 * The JavaScript client of kafka-timers: schedule, cancel and tombstone durable timers by
 * producing JSON requests to the service's request topic, on kafkajs.
 *
 * Requests are keyed by timer id and placed by kafkajs' DefaultPartitioner, Kafka's
 * murmur2 (as Java, Faust and the Python client place them), so a cancel lands on the
 * partition that holds its timer. A cancel can wait for its answer: the worker writes it
 * to the fired topic, on the partition numbered like the request's, naming the request's
 * offset. The client takes the fired topic's ends before sending, learns the request's
 * partition and offset from the broker's acknowledgement, and reads that partition from
 * its old end until the record that names that offset (the Python client's protocol).
 */

import { randomBytes, randomUUID } from "node:crypto";
import {
  Admin,
  Consumer,
  Kafka,
  KafkaConfig,
  logLevel,
  Partitioners,
  PartitionMetadata,
  Producer,
} from "kafkajs";

import { CancelNotAnswered, KafkaTimersError } from "./errors";
import { ScheduleOptions, cancelRequest, checkedName, scheduleRequest } from "./request";
export {
  DEAD_LETTER_REASON_HEADER,
  DELIVERY_COUNT_HEADER,
  DELIVERY_ORIGIN_HEADER,
  Delivery,
  RedeliveringConsumer,
  RedeliveryOptions,
  RedeliveryStats,
  ackRequest,
  copyHeaders,
  copyRequest,
  deliveriesOf,
  originOf,
  timerIdOf,
} from "./redelivery";

export { CancelNotAnswered, KafkaTimersError } from "./errors";
export {
  Instant,
  MAX_SECONDS,
  ScheduleOptions,
  ScheduleRequest,
  cancelRequest,
  checkedName,
  debounceWindow,
  debouncedDue,
  epochSeconds,
  firstOfInterval,
  parseDuration,
  scheduleRequest,
} from "./request";

/** What a cancel did (the worker's answer on the fired topic). */
export enum CancelOutcome {
  /** The pending timer was removed and will not fire (also the answer to a repeat). */
  Cancelled = "cancelled",
  /** The token did not match the pending timer's: refused, the timer still fires. */
  WrongToken = "wrong_token",
  /** The timer has already fired (or is firing right now): nothing to cancel. */
  AlreadyFired = "already_fired",
  /** No such timer yet: remembered, so a request with this id and token that comes later is dropped. */
  CancelledInAdvance = "cancelled_in_advance",
  /** No such timer, and a tombstone waits for none. */
  NotFound = "not_found",
  /** No such timer, and the partition remembers as many cancels in advance as it may. */
  NotRemembered = "not_remembered",
}

/** Where the service is. The topic defaults are the service's defaults. */
export interface ClientConfig {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  /** The topic requests go to (`KAFKA_TIMERS_REQUEST_TOPIC`), default `timer-request`. */
  requestTopic?: string;
  /** The topic workers answer on (`KAFKA_TIMERS_FIRED_TOPIC`), default `timer-fired`. */
  firedTopic?: string;
  /** Anything else for kafkajs (ssl, sasl, clientId, logLevel...). */
  kafka?: Omit<KafkaConfig, "brokers">;
}

/** What `schedule` promises: keep `token` to cancel. */
export interface ScheduledTimer {
  id: string;
  token: string;
  /**
   * Epoch second the callback is due (a series: its first occurrence). `undefined` for a
   * cron series: its first occurrence is computed by the worker (cron and time zones).
   */
  due: number | undefined;
}

export interface WaitOptions {
  /** Seconds to wait for the worker's answer; without it, the request is only sent. */
  wait?: number;
}

const DEFAULT_REQUEST_TOPIC = "timer-request";
const DEFAULT_FIRED_TOPIC = "timer-fired";
/** The broker holds an empty fetch this long (ms): an answer waits at most this long there. */
const FETCH_WAIT_MS = 50;

/**
 * The partition kafkajs' DefaultPartitioner gives `key` among `partitions`: Kafka's murmur2,
 * `toPositive(murmur2(key)) % partitions`, as Java, Faust and the Python client compute it.
 */
export function partitionFor(key: string | Buffer, partitions: number): number {
  const partitionMetadata: PartitionMetadata[] = Array.from({ length: partitions }, (_, i) => ({
    partitionErrorCode: 0,
    partitionId: i,
    leader: 0,
    replicas: [0],
    isr: [0],
  }));
  return Partitioners.DefaultPartitioner()({
    topic: "",
    partitionMetadata,
    message: { key, value: null },
  });
}

/** Waits taken one at a time: one reader follows one partition's answers at a time. */
class Turns {
  private last: Promise<void> = Promise.resolve();

  async run<T>(work: () => Promise<T>): Promise<T> {
    const previous = this.last;
    let done!: () => void;
    this.last = new Promise<void>((resolve) => (done = resolve));
    await previous;
    try {
      return await work();
    } finally {
      done();
    }
  }
}

interface Answer {
  outcome: string;
}

/** Schedules and cancels timers; `close()` when done. */
export class TimerClient {
  readonly requestTopic: string;
  readonly firedTopic: string;
  private readonly kafka: Kafka;
  private readonly producer: Producer;
  private admin: Admin | undefined;
  private answers: Consumer | undefined;
  private joined: Promise<void> | undefined;
  private readonly waiting = new Map<string, (answer: Answer) => void>();
  private readonly turns = new Turns();
  private connected: Promise<void> | undefined;

  constructor(
    config: ClientConfig,
    private readonly clock: () => number = () => Date.now() / 1000,
  ) {
    this.requestTopic = config.requestTopic ?? DEFAULT_REQUEST_TOPIC;
    this.firedTopic = config.firedTopic ?? DEFAULT_FIRED_TOPIC;
    this.kafka = new Kafka({
      clientId: "kafka-timers-client",
      logLevel: logLevel.WARN,
      ...config.kafka,
      brokers: config.brokers,
    });
    this.producer = this.kafka.producer({
      createPartitioner: Partitioners.DefaultPartitioner,
      // The service creates its topics; a request topic created here would have the
      // broker's default partition count, not the service's.
      allowAutoTopicCreation: false,
    });
  }

  /** Connect the producer (done by the first request if not called). */
  connect(): Promise<void> {
    this.connected ??= this.producer.connect();
    return this.connected;
  }

  /**
   * Ask for `value` to reach `topic` once (`at` or `delay`), on every occurrence of a
   * series (`cron` or `every`, with `start`, `end`, `count`), or once a burst of requests
   * for its `id` is over (`debounce`, with `maxWait`: see `ScheduleOptions.debounce`; the
   * `due` promised is this request's alone, as if none followed). Resolves once the
   * broker acknowledged the request. Sent as the service's JSON request format.
   */
  async schedule(
    topic: string,
    value: string | Buffer,
    options: ScheduleOptions = {},
  ): Promise<ScheduledTimer> {
    // The worker anchors a series, and a debounce, at the record's timestamp: set it, and
    // compute from it here too.
    const sentMs = Math.floor(this.clock() * 1000);
    const { request, id, token, due } = scheduleRequest(
      topic,
      value,
      options,
      sentMs,
      () => randomUUID().replace(/-/g, ""),
      () => randomBytes(8).toString("hex"),
    );
    await this.send(id, Buffer.from(JSON.stringify(request)), sentMs);
    return { id, token, due };
  }

  /**
   * Ask for timer `id` never to fire; refused unless `token` matches. With `wait`
   * (seconds), resolves to what the worker did; rejects with `CancelNotAnswered` if no
   * answer came in time (the cancel is still applied when a worker reads it).
   */
  cancel(id: string, token: string, options?: { wait?: undefined }): Promise<undefined>;
  cancel(id: string, token: string, options: { wait: number }): Promise<CancelOutcome>;
  async cancel(id: string, token: string, options: WaitOptions = {}): Promise<CancelOutcome | undefined> {
    return this.cancelWith(id, Buffer.from(JSON.stringify(cancelRequest(id, token))), options.wait);
  }

  /**
   * Cancel `id` as etf1 producers do: a record with a null value keyed by the id. It
   * carries no token, so it cancels only a timer scheduled without one (`token: ""`):
   * a protected timer answers `WrongToken`; an unknown id `NotFound`.
   */
  tombstone(id: string, options?: { wait?: undefined }): Promise<undefined>;
  tombstone(id: string, options: { wait: number }): Promise<CancelOutcome>;
  async tombstone(id: string, options: WaitOptions = {}): Promise<CancelOutcome | undefined> {
    checkedName(id, "");
    return this.cancelWith(id, null, options.wait);
  }

  /** Disconnect everything this client connected. */
  async close(): Promise<void> {
    await Promise.all([
      this.connected ? this.producer.disconnect() : undefined,
      this.answers?.disconnect(),
      this.admin?.disconnect(),
    ]);
  }

  private async send(
    id: string,
    value: Buffer | null,
    timestampMs?: number,
  ): Promise<{ partition: number; offset: string }> {
    await this.connect();
    const [meta] = await this.producer.send({
      topic: this.requestTopic,
      acks: -1,
      messages: [{ key: id, value, timestamp: timestampMs?.toString() }],
    });
    if (meta === undefined || meta.baseOffset === undefined) {
      throw new KafkaTimersError(`the broker did not say where the request for ${id} went`);
    }
    return { partition: meta.partition, offset: meta.baseOffset };
  }

  private async cancelWith(
    id: string,
    value: Buffer | null,
    wait: number | undefined,
  ): Promise<CancelOutcome | undefined> {
    if (wait === undefined) {
      await this.send(id, value);
      return undefined;
    }
    if (!(wait > 0)) throw new KafkaTimersError(`wait must be a positive number of seconds, not ${wait}`);
    const deadline = Date.now() + wait * 1000;
    return this.turns.run(() => this.sendAndWait(id, value, deadline, wait));
  }

  private async sendAndWait(
    id: string,
    value: Buffer | null,
    deadline: number,
    wait: number,
  ): Promise<CancelOutcome> {
    const consumer = await this.follow(deadline);
    // The ends before sending: the answer can only come after them.
    const ends = await this.admin!.fetchTopicOffsets(this.firedTopic);
    const { partition, offset } = await this.send(id, value);
    const end = ends.find((e) => e.partition === partition);
    if (end === undefined) {
      throw new KafkaTimersError(`${this.firedTopic} has no partition ${partition}: same partition counts?`);
    }
    const key = `${partition}/${offset}/${id}`;
    const answer = new Promise<Answer>((resolve) => this.waiting.set(key, resolve));
    consumer.seek({ topic: this.firedTopic, partition, offset: end.high });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(0, deadline - Date.now()));
    });
    try {
      const got = await Promise.race([answer, timeout]);
      if (got === undefined) {
        throw new CancelNotAnswered(
          `no answer to the cancel of timer ${JSON.stringify(id)} within ${wait}s ` +
            `(${this.requestTopic}[${partition}] offset ${offset}); it was sent and will be ` +
            "applied when a worker reads that partition: is one running?",
        );
      }
      if (!(Object.values(CancelOutcome) as string[]).includes(got.outcome)) {
        throw new KafkaTimersError(`the worker answered ${JSON.stringify(got.outcome)}: upgrade this client`);
      }
      return got.outcome as CancelOutcome;
    } finally {
      clearTimeout(timer);
      this.waiting.delete(key);
    }
  }

  /** The reader of the fired topic: made, and joined to its own group, on first use. */
  private async follow(deadline: number): Promise<Consumer> {
    if (this.answers === undefined) {
      this.admin = this.kafka.admin();
      const consumer = this.kafka.consumer({
        groupId: `kafka-timers-client-${randomUUID()}`,
        // Short sessions: the dev broker holds a join for half of it.
        sessionTimeout: 6000,
        heartbeatInterval: 1000,
        maxWaitTimeInMs: FETCH_WAIT_MS,
        allowAutoTopicCreation: false,
      });
      this.answers = consumer;
      this.joined = new Promise<void>((resolve) => {
        consumer.on(consumer.events.GROUP_JOIN, () => resolve());
      });
      await Promise.all([this.admin.connect(), consumer.connect()]);
      await consumer.subscribe({ topics: [this.firedTopic], fromBeginning: false });
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (message.value === null || this.waiting.size === 0) return;
          const doc = cancelAnswerOf(message.value);
          if (doc === null) return; // not ours to judge: the audit reports malformed records
          const resolve = this.waiting.get(`${partition}/${doc.request_offset}/${doc.id}`);
          if (resolve !== undefined && doc.partition === partition) {
            resolve({ outcome: String(doc.outcome) });
          }
        },
      });
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new KafkaTimersError(`the reader of ${this.firedTopic} did not join in time`)),
        Math.max(0, deadline - Date.now()),
      );
    });
    try {
      await Promise.race([this.joined, late]);
    } finally {
      clearTimeout(timer);
    }
    return this.answers;
  }
}

/**
 * A fired-topic record's value as a cancel's answer, or null if it is none. Anyone who
 * may write the fired topic can write anything there: `null`, `5` or `[1]` parse as JSON
 * but are no object, and reading `.event` of `null` threw inside the answers consumer's
 * handler, which kafkajs then retried, record after record, while cancels waited.
 */
export function cancelAnswerOf(value: Buffer): Record<string, unknown> | null {
  let doc: unknown;
  try {
    doc = JSON.parse(value.toString());
  } catch {
    return null;
  }
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) return null;
  const answer = doc as Record<string, unknown>;
  if (answer.event !== "cancel" || typeof answer.request_offset !== "number") return null;
  return answer;
}
