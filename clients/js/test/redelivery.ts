/**
 * Run by tests/integration/test_js_redelivery.py against a real worker: reads a queue
 * through `RedeliveringConsumer`, acks every message except the first copies of those
 * whose number is a multiple of 10 and every copy of those whose value starts with
 * "fail"; writes one line per message handed out (`kind number deliveries topic
 * partition offset`, `A` acked or `I` ignored) to stdout. Stops on SIGTERM.
 *
 * Usage: node dist/test/redelivery.js BROKERS REQUEST_TOPIC QUEUE DLT RETRY GROUP
 */

import { Kafka, logLevel } from "kafkajs";

import { RedeliveringConsumer } from "../src";

async function main(): Promise<void> {
  const [brokers, requestTopic, queue, dlt, retry, group] = process.argv.slice(2);
  const config = { brokers: brokers.split(","), requestTopic };
  const kafka = new Kafka({ brokers: config.brokers, logLevel: logLevel.WARN });
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 6000, heartbeatInterval: 1000, maxWaitTimeInMs: 50 });
  await consumer.connect();
  await consumer.subscribe({ topics: [queue, retry], fromBeginning: true });
  const redelivery = new RedeliveringConsumer(consumer, config, {
    deadLetterTopic: dlt,
    retryTopic: retry,
    visibilityTimeout: 2,
    maxDeliveries: 3,
    namespace: group,
  });
  process.on("SIGTERM", () => {
    void consumer
      .disconnect()
      .then(() => redelivery.close())
      .then(() => process.exit(0));
  });
  await redelivery.run((delivery) => {
    const text = delivery.message.value?.toString() ?? "";
    const number = Number(text.replace("fail-", ""));
    const ignored = text.startsWith("fail") || (delivery.deliveries === 1 && number % 10 === 0);
    const kind = ignored ? "I" : "A";
    const where = `${delivery.topic} ${delivery.partition} ${delivery.message.offset}`;
    process.stdout.write(`${kind} ${text} ${delivery.deliveries} ${where}\n`);
    if (!ignored) redelivery.ack(delivery);
  });
}

main().catch((error) => {
  process.stderr.write(`${error}\n`);
  process.exit(1);
});
