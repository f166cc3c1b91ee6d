/**
 * The JSON request a `schedule` or a cancel sends, built and checked before anything is
 * sent: whatever the worker would dead-letter by format is refused here with one-line
 * `KafkaTimersError`, so that `schedule` never resolves for a timer that will not exist.
 *
 * The bounds are the worker's (`kafka_timers_client.bounds`, the Python client's and the
 * worker's one copy), checked the way the worker checks them: lengths in code points,
 * text as well-formed UTF-16 (a lone surrogate is sent by `JSON.stringify` as `\ud800`,
 * which the worker refuses to encode), numbers finite and in range before any rounding.
 * What only the worker can judge is left to it and dead-lettered there with a reason: a
 * cron expression's fields and a time zone's name (no cron or tz database here), the
 * callback topic's name against the deployment's policy, and the record's size against
 * its budget. `tests/unit/test_js_requests.py` proves the rest by generation: any
 * options either raise here or make a request the worker reads as the very timer.
 */

import { KafkaTimersError } from "./errors";

/** Largest epoch second a request may name (10^12 - 1): the worker's keys hold 12 digits. */
export const MAX_SECONDS = 10 ** 12 - 1;
/** Longest timer id and token, in code points: an id is in every store key of its timer. */
export const MAX_ID_CHARS = 1024;
export const MAX_TOKEN_CHARS = 1024;
/** Most headers a request may carry, and the longest header name, in code points. */
export const MAX_HEADERS = 256;
export const MAX_HEADER_NAME_CHARS = 1024;
/** Longest late-fire policy, duration or time text, in code points. */
export const MAX_SPEC_CHARS = 256;
/** Most occurrences a series may ask for. */
export const MAX_SERIES_COUNT = 10 ** 12;
/** Longest interval of a series: about 100 years. */
export const MAX_EVERY_SECONDS = 100 * 366 * 86400;
/** Longest spread: a day. */
export const MAX_SPREAD_SECONDS = 86_400;
/** Header names the service writes on callbacks, compared without case. */
export const RESERVED_HEADER_PREFIXES = ["timer-", "scheduler-"];

/** A time: epoch seconds, a `Date`, or ISO 8601 text (without a zone: UTC, as the service reads it). */
export type Instant = number | Date | string;

export interface ScheduleOptions {
  /** The callback's key (none: a keyless callback). */
  key?: string | Buffer;
  /** One-shot: fire at this time (a fraction of a second rounds up: never early). */
  at?: Instant;
  /** One-shot: fire this many seconds from now. */
  delay?: number;
  /** A series on a cron expression (5 fields, or 6 with the seconds first) in `tz`. */
  cron?: string;
  /** IANA time zone of `cron`, default UTC. */
  tz?: string;
  /** A series every so many seconds, or a duration such as `"30s"`. */
  every?: number | string;
  /** A series: no occurrence before it. */
  start?: Instant;
  /** A series: no occurrence after it. */
  end?: Instant;
  /** A series: at most this many occurrences. */
  count?: number;
  /** The late-fire policy, e.g. `"skip-after 5m"`, `"all"`. */
  late?: string;
  /** Fire at a second in [due, due + spread] fixed by the id: seconds or `"60s"`, whole, up to a day. */
  spread?: number | string;
  /** The timer's id (generated if absent or empty); scheduling the same id again with its token replaces it (another token is refused `wrong_token`). */
  id?: string;
  /** The token cancels must present (generated if absent; `""`: none, a tombstone cancels it). */
  token?: string;
  /** Headers copied onto the callback (not `timer-*` or `scheduler-*`: those are the service's). */
  headers?: Record<string, string>;
  /**
   * A debounced timer, instead of `at`, `delay`, `cron` or `every`: due this long after the
   * request (seconds, or a duration such as `"30s"`; whole seconds, at least 1). Each later
   * debounced request for the same `id` while it is pending moves the fire to this long
   * after that request and makes the callback its own; the callback carries
   * `timer-debounced: <requests merged>`. Without `token` none is sent (not a random one),
   * so that every request for the id merges.
   */
  debounce?: number | string;
  /** With `debounce`: never fire later than the first request merged plus this (at least the debounce). */
  maxWait?: number | string;
}

/** What `schedule` sends and promises. */
export interface ScheduleRequest {
  /** The record's value, the service's JSON request format. */
  request: Record<string, unknown>;
  id: string;
  token: string;
  /** Epoch second due (a series: its first occurrence; a cron series: `undefined`). */
  due: number | undefined;
  /** The spread in whole seconds (0: none). */
  spread: number;
}

/** In u-mode a class of surrogates matches only unpaired ones: a pair is one code point. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;
const DECIMAL = /^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$/;
/** ISO 8601 as the service reads it (Python's `datetime.fromisoformat`, a `Z` for UTC). */
const ISO_8601 =
  /^\s*(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?\s*$/;
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$/;
const UNITS: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** `text` if it is a string of at most `limit` code points with no lone surrogate. */
export function checkedText(text: unknown, name: string, limit: number = Infinity): string {
  if (typeof text !== "string") throw new KafkaTimersError(`${name} must be a string, not ${typeof text}`);
  if (text.length > limit && codePoints(text) > limit) {
    throw new KafkaTimersError(`${name} has ${codePoints(text)} characters, at most ${limit}`);
  }
  if (LONE_SURROGATE.test(text)) throw new KafkaTimersError(`${name} is not valid UTF-8 (a lone surrogate)`);
  return text;
}

/** `seconds` if it is an epoch second the worker takes (0 to `MAX_SECONDS`), else refused. */
export function boundedSecond(seconds: number, name: string): number {
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds < 0 || seconds > MAX_SECONDS) {
    throw new KafkaTimersError(`${name} ${String(seconds)}: epoch seconds from 0 to ${MAX_SECONDS}`);
  }
  return seconds;
}

/** Epoch seconds of `instant`: a number, a `Date`, decimal text, or ISO 8601 (UTC without a zone). */
export function epochSeconds(instant: Instant): number {
  if (instant instanceof Date) return instant.getTime() / 1000;
  if (typeof instant === "number") return instant;
  const text = checkedText(instant, "a time", MAX_SPEC_CHARS);
  if (DECIMAL.test(text)) return Number(text);
  const ms = isoMs(text);
  if (ms === undefined) throw new KafkaTimersError(`${JSON.stringify(text)} is not a time: epoch seconds or ISO 8601`);
  return ms / 1000;
}

/** Epoch ms of ISO 8601 `text`, a time without a zone in UTC; undefined unless every field is in range. */
function isoMs(text: string): number | undefined {
  const iso = ISO_8601.exec(text);
  if (iso === null) return undefined;
  const [, year, month, day, hour = "0", minute = "0", second = "0", zone] = iso;
  const days = new Date(Date.UTC(Number(year), Number(month), 0)).getUTCDate();
  if (!(Number(month) >= 1 && Number(month) <= 12 && Number(day) >= 1 && Number(day) <= days)) return undefined;
  if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) return undefined;
  const trimmed = text.trim().replace(" ", "T");
  const ms = Date.parse(iso[4] === undefined ? `${trimmed}T00:00:00Z` : zone === undefined ? `${trimmed}Z` : trimmed);
  return Number.isNaN(ms) ? undefined : ms;
}

/** Seconds of `30s`, `5m`, `2h`, `3d`, `1w`, `250ms` or bare seconds (the service's syntax). */
export function parseDuration(text: number | string): number {
  if (typeof text === "number") return text;
  const seconds = durationSeconds(text);
  if (seconds === undefined) throw new KafkaTimersError(`${JSON.stringify(text)} is not a duration`);
  if (!(seconds <= MAX_SECONDS)) throw new KafkaTimersError(`duration ${text} is longer than ${MAX_SECONDS}s`);
  return seconds;
}

/** Seconds of duration `text` in the service's syntax, unbounded; undefined if it is none. */
function durationSeconds(text: unknown): number | undefined {
  const match = typeof text === "string" && text.length <= MAX_SPEC_CHARS ? DURATION.exec(text) : null;
  return match === null ? undefined : Number(match[1]) * UNITS[match[2] ?? "s"];
}

/**
 * `text` if the worker reads it as a late-fire policy: `fire` or `skip-after <duration>`,
 * and/or `coalesce` or `all`, comma-separated (`LatePolicy.parse`). ASCII only: the
 * worker's whitespace and case folding are Python's, and on ASCII the two languages agree.
 */
export function checkedLatePolicy(text: unknown): string {
  const policy = checkedText(text, "late", MAX_SPEC_CHARS);
  const bad = (why: string) =>
    new KafkaTimersError(
      `late-fire policy ${JSON.stringify(policy)} ${why}: use fire or skip-after <duration>, and/or coalesce or all`,
    );
  if (/[^\x20-\x7e\t\n\r\v\f]/.test(policy)) throw bad("is not printable ASCII");
  let skip = false;
  let catchUp = false;
  for (const raw of policy.split(",")) {
    const item = raw.trim().split(/\s+/).join(" ").toLowerCase();
    if (item === "") continue;
    if (item === "coalesce" || item === "all") {
      if (catchUp) throw bad("names coalesce/all twice");
      catchUp = true;
      continue;
    }
    if (item.startsWith("skip-after")) {
      const seconds = durationSeconds(item.slice("skip-after".length).trim());
      if (seconds === undefined || !(seconds <= MAX_SECONDS)) throw bad("has no duration after skip-after");
      // The worker rounds to ms half to even: 0.5 ms is 0, refused.
      if (seconds * 1000 <= 0.5) throw bad("skips after 0: use a positive duration");
    } else if (item !== "fire") {
      throw bad(`has an unknown item ${JSON.stringify(item)}`);
    }
    if (skip) throw bad("names fire/skip-after twice");
    skip = true;
  }
  return policy;
}

function checkedHeaders(headers: unknown): Record<string, string> {
  if (headers === null || typeof headers !== "object" || Array.isArray(headers) || Buffer.isBuffer(headers)) {
    throw new KafkaTimersError("headers must be an object of strings");
  }
  const entries = Object.entries(headers as Record<string, unknown>);
  if (entries.length > MAX_HEADERS) throw new KafkaTimersError(`${entries.length} headers, at most ${MAX_HEADERS}`);
  for (const [name, value] of entries) {
    checkedText(name, "a header name", MAX_HEADER_NAME_CHARS);
    const folded = name.slice(0, 10).toLowerCase();
    if (RESERVED_HEADER_PREFIXES.some((prefix) => folded.startsWith(prefix))) {
      throw new KafkaTimersError(
        `header ${JSON.stringify(name.slice(0, 80))}: timer-* and scheduler-* are the service's own`,
      );
    }
    checkedText(value, `header ${JSON.stringify(name.slice(0, 80))}`);
  }
  return headers as Record<string, string>;
}

function setPayload(request: Record<string, unknown>, name: string, data: unknown): void {
  if (Buffer.isBuffer(data)) request[`${name}_b64`] = data.toString("base64");
  else request[name] = checkedText(data, `the ${name}`);
}

function spreadSeconds(spread: number | string, every: number | undefined): number {
  const seconds = parseDuration(spread);
  if (!Number.isInteger(seconds) || seconds < 0 || seconds > MAX_SPREAD_SECONDS) {
    throw new KafkaTimersError(`spread ${String(spread)}: whole seconds from 0 to ${MAX_SPREAD_SECONDS} (a day)`);
  }
  if (seconds > 0 && every !== undefined && seconds >= every) {
    throw new KafkaTimersError(`spread ${String(spread)}: less than the interval (${every}s)`);
  }
  return seconds;
}

/**
 * Whole seconds of a debounce or max-wait, at least 1 (`debounce_seconds` of the Python
 * client: a duration such as `"30s"`, or seconds), else refused as the worker refuses it
 * (`invalid_debounce`).
 */
export function debounceSeconds(value: unknown, name: string): number {
  const seconds =
    typeof value === "number" ? value : typeof value === "string" ? durationSeconds(value) : undefined;
  if (seconds === undefined) {
    throw new KafkaTimersError(`${name} must be a duration such as "30s" or seconds, not ${JSON.stringify(value)}`);
  }
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > MAX_SECONDS) {
    throw new KafkaTimersError(
      `${name} ${String(value).slice(0, 40)}: whole seconds from 1 to ${MAX_SECONDS} (the service's resolution)`,
    );
  }
  return seconds;
}

/**
 * `[debounce, maxWait]` in whole seconds (maxWait `undefined`: no bound), checked as the
 * worker checks them (`checked_debounce`): a max-wait needs a debounce and is at least it.
 */
export function debounceWindow(debounce: unknown, maxWait: unknown): [number, number | undefined] {
  if (debounce === undefined) throw new KafkaTimersError("maxWait needs a debounce");
  const seconds = debounceSeconds(debounce, "debounce");
  const longest = maxWait === undefined ? undefined : debounceSeconds(maxWait, "maxWait");
  if (longest !== undefined && longest < seconds) {
    throw new KafkaTimersError(`maxWait ${longest}s is shorter than the debounce (${seconds}s)`);
  }
  return [seconds, longest];
}

/** The second a debounce of `seconds` after a request at `sentMs` ends, rounded up: never early. */
export function debouncedDue(sentMs: number, seconds: number): number {
  return Math.ceil((sentMs + 1000 * seconds) / 1000);
}

/**
 * The first occurrence of an interval series, as the worker computes it: `start` if not
 * before the send, else the first second of its grid after the send; without a start,
 * one interval after the send.
 */
export function firstOfInterval(every: number, start: number | undefined, sentSecond: number): number {
  if (start === undefined) return sentSecond + every;
  if (start >= sentSecond) return start;
  return start + Math.ceil((sentSecond - start) / every) * every;
}

/**
 * The request that schedules `value` for `topic` with `options`, sent at `sentMs` (the
 * record's timestamp: the worker anchors a series there); `newId` and `newToken` make
 * what the options leave out. Raises `KafkaTimersError` for anything the worker would
 * refuse by format.
 */
export function scheduleRequest(
  topic: string,
  value: string | Buffer,
  options: ScheduleOptions,
  sentMs: number,
  newId: () => string,
  newToken: () => string,
): ScheduleRequest {
  if (options === null || typeof options !== "object") throw new KafkaTimersError("options must be an object");
  const id = options.id === undefined || options.id === "" ? newId() : checkedText(options.id, "the id", MAX_ID_CHARS);
  const debounced = options.debounce !== undefined || options.maxWait !== undefined;
  // Token-less unless given one: the id's next debounced request merges into it.
  const token =
    options.token === undefined
      ? debounced
        ? ""
        : newToken()
      : checkedText(options.token, "the token", MAX_TOKEN_CHARS);
  const request: Record<string, unknown> = { topic: checkedText(topic, "the topic"), id, token };
  setPayload(request, "value", value);
  if (options.key !== undefined) setPayload(request, "key", options.key);
  if (options.headers !== undefined) request.headers = checkedHeaders(options.headers);
  if (options.late !== undefined) request.late = checkedLatePolicy(options.late);
  const series = options.cron !== undefined || options.every !== undefined;
  let due: number | undefined;
  let every: number | undefined;
  if (debounced) {
    if (options.at !== undefined || options.delay !== undefined || series) {
      throw new KafkaTimersError("debounce takes no at, delay, cron or every");
    }
    if (options.start !== undefined || options.end !== undefined || options.count !== undefined || options.tz !== undefined) {
      throw new KafkaTimersError("start, end, count and tz need cron or every");
    }
    const [seconds, longest] = debounceWindow(options.debounce, options.maxWait);
    due = debouncedDue(sentMs, seconds);
    if (!(due <= MAX_SECONDS)) throw new KafkaTimersError(`debounce ${seconds}s: due past epoch second ${MAX_SECONDS}`);
    request.debounce = seconds;
    if (longest !== undefined) request.max_wait = longest;
  } else if (!series) {
    if (options.start !== undefined || options.end !== undefined || options.count !== undefined || options.tz !== undefined) {
      throw new KafkaTimersError("start, end, count and tz need cron or every");
    }
    if ((options.at === undefined) === (options.delay === undefined)) {
      throw new KafkaTimersError("give exactly one of at, delay, cron or every");
    }
    const at = boundedSecond(
      options.at !== undefined ? epochSeconds(options.at) : sentMs / 1000 + options.delay!,
      options.at !== undefined ? "at" : "delay: due",
    );
    due = Math.ceil(at);
    request.at = at;
  } else {
    if (options.at !== undefined || options.delay !== undefined) {
      throw new KafkaTimersError("a recurring timer takes start, not at or delay");
    }
    if (options.cron !== undefined && options.every !== undefined) {
      throw new KafkaTimersError("give cron or every, not both");
    }
    const start = options.start === undefined ? undefined : Math.ceil(boundedSecond(epochSeconds(options.start), "start"));
    const end = options.end === undefined ? undefined : Math.floor(boundedSecond(epochSeconds(options.end), "end"));
    if (start !== undefined) request.start = start;
    if (end !== undefined) request.end = end;
    if (start !== undefined && end !== undefined && end < start) {
      throw new KafkaTimersError(`end ${end} is before start ${start}`);
    }
    if (options.count !== undefined) {
      const count = options.count;
      if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > MAX_SERIES_COUNT) {
        throw new KafkaTimersError(`count ${String(count)}: a whole number from 1 to ${MAX_SERIES_COUNT}`);
      }
      request.count = count;
    }
    if (options.cron !== undefined) {
      request.cron = checkedText(options.cron, "cron", MAX_SPEC_CHARS);
      if (options.tz !== undefined) request.tz = checkedText(options.tz, "tz", MAX_SPEC_CHARS);
    } else {
      if (options.tz !== undefined) throw new KafkaTimersError("tz applies to cron, not to every");
      every = parseDuration(options.every!);
      if (!Number.isInteger(every) || every < 1 || every > MAX_EVERY_SECONDS) {
        throw new KafkaTimersError(
          `every ${JSON.stringify(options.every)}: whole seconds from 1 to ${MAX_EVERY_SECONDS} (about 100 years)`,
        );
      }
      request.every = `${every}s`;
      due = firstOfInterval(every, start, Math.ceil(sentMs / 1000));
      if (end !== undefined && due > end) {
        throw new KafkaTimersError(`no occurrence between the send and the end ${end}`);
      }
    }
  }
  const spread = options.spread === undefined ? 0 : spreadSeconds(options.spread, every);
  if (options.spread !== undefined) request.spread = spread;
  return { request, id, token, due, spread };
}

/**
 * Refuse what the worker would dead-letter about a request naming a timer (a cancel or a
 * tombstone, whose record key is the id): no id, or an id or token too long or not UTF-8
 * (kafkajs would have sent a lone surrogate as U+FFFD, naming another timer).
 */
export function checkedName(id: unknown, token: unknown): void {
  if (id === "") throw new KafkaTimersError("a timer id is needed to name the timer");
  checkedText(id, "the id", MAX_ID_CHARS);
  checkedText(token, "the token", MAX_TOKEN_CHARS);
}

/** The JSON request that cancels timer `id` if `token` is its token. */
export function cancelRequest(id: string, token: string): Record<string, unknown> {
  checkedName(id, token);
  return { cancel: id, token };
}
