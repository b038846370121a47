// Package lambdakit makes AWS Lambda functions that consume SQS safe under
// at-least-once delivery.
//
// Batch turns a record Handler into a batch handler for lambda.Start that
// answers with a partial batch response (only the records that failed come
// back), runs standard-queue records concurrently and FIFO records in order
// per message group, isolates panics, and answers before the invocation
// deadline.
//
// Idempotent is a Middleware that runs a handler at most once to completion
// per idempotency key. The key comes from the message content (KeyFromField,
// KeyFromFields, KeyFromBodyHash, KeyFromAttribute); records live in a Store
// (dynamostore.Store on DynamoDB; lambdakittest.MemoryStore for tests), locked
// with a conditional write whose lease is the invocation deadline, completed
// and released only by the lease's owner. A duplicate skips the handler and
// gets the cached result back; the same key with another payload fails with
// ErrPayloadMismatch. With Stage, a handler's own writes commit atomically
// with the completion (single-phase mode).
//
// NewOnce is the same engine for any function, not only queue
// records: Do and DoTyped take the key and payload explicitly.
// POWERTOOLS_IDEMPOTENCY_DISABLED turns the engine off for local tests, as
// in every Powertools for AWS Lambda runtime (see Once).
//
// A message that can never succeed fails permanently: its error is marked
// with Permanent, or is poison that lambdakit finds itself (IsPoison: a
// body that does not decode, a missing or unreadable key, a key reused with
// another payload). With BatchOptions.DeadLetters set, Batch sends it to
// the dead-letter queue on its first delivery, so that it does not hold its
// FIFO group back; BatchOptions.IsPermanent changes what counts.
//
// Typed and TypedResult decode JSON bodies into a Go type, so a handler is
// just func(ctx, T) error.
package lambdakit
