// Package producer publishes messages to an SQS queue so that a lambdakit
// consumer and SQS agree on what a duplicate is.
//
// It is a package of its own so that consumer functions, which never
// publish, do not link the SQS client.
//
// # Keys and deduplication IDs
//
// The producer takes the consumer's own lambdakit.KeyFunc (for example
// lambdakit.KeyFromField("payment_id")) and calls it on the message it is
// about to send, as the consumer will on the message it receives. On a FIFO
// queue the message's MessageDeduplicationId is DedupID(key), the hex
// SHA-256 of the key: 64 characters, within SQS's 128, the same in every
// process and run, and different for different keys.
//
// The consumer's idempotency record for that message has the ID
// "<prefix>#<DedupID(key)>" (lambdakit.Options.Prefix), so an
// operator holding a message from the dead-letter queue finds its record by
// putting the prefix in front of the message's MessageDeduplicationId
// attribute.
//
// SQS drops a FIFO message whose deduplication ID it has seen in the last
// five minutes, at publish time only: it accepts the message and answers
// with a message ID, but does not deliver it. A redelivery, a redrive from
// the DLQ, or a producer retry after the window are not caught there: the
// consumer's idempotency records are what make them safe.
//
// # One key, two messages
//
// Within one Send on a FIFO queue, the first message with a key that passes
// the other checks goes, and a later one with the same key is not sent, since SQS would drop it while
// answering that it was sent. Its payload (Options.Payload, by default the
// body's JSON value, as the consumer compares it) decides how: the same
// payload is a plain duplicate, left out with ErrDuplicate, which alone
// does not make Send fail; a different payload is refused with
// ErrKeyConflict, because the consumer would have failed it with
// lambdakit.ErrPayloadMismatch had it arrived.
//
// The producer keeps nothing between calls. A message sent by a later Send
// (or another producer) within five minutes of one with its key is
// accepted by SQS, reported sent, and not delivered: that is the
// deduplication the IDs are for when the payload is the same, and when it
// is not, the consumer would have refused it as a payload mismatch anyway.
// Standard queues take no deduplication ID and deliver every message; their
// consumer skips a repeated key or fails it with ErrPayloadMismatch.
//
// # Sending
//
// Send packs messages into SendMessageBatch calls (at most 10 entries, and
// at most MaxBatchBytes of messages, per call) in the order given, and
// reports one Result per message. Before anything is sent, each message is
// checked: its key and group, its size (body and attributes, counted as SQS
// counts them) against Options.MaxMessageSize, its characters, and on a
// FIFO queue whose key an earlier message of the call carries. A message
// that fails a check is refused with the reason and never sent; the others
// go on.
//
// Entries that SQS fails for its own reasons (SenderFault false) are sent
// again, up to Options.MaxAttempts times in all, after a backoff with
// jitter; entries SQS rejects as invalid (SenderFault true) are not. Errors
// of the whole call (network, throttling, 5xx) are retried by the SDK's own
// retryer; when it gives up, the call's messages are reported failed. No
// message of a call is dropped without a Result that says so; a key used
// by an earlier call in the last five minutes is the one case SQS reports
// sent and drops (see above).
package producer
