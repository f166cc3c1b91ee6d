/** The errors the JavaScript client raises on purpose. */

/** Root of the errors this client raises on purpose; `retriable` says whether trying again later may succeed. */
export class KafkaTimersError extends Error {
  readonly retriable: boolean = false;
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A cancel was sent and acknowledged, but no worker answered it in time: it is still applied later. */
export class CancelNotAnswered extends KafkaTimersError {
  override readonly retriable = true;
}
