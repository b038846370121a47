package lambdakit

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Idempotent returns a Middleware that runs the handler at most once to
// completion per idempotency key, using store for the records and key to
// derive the key of each message:
//
//   - a new key is locked (conditional write), the handler runs, and the
//     record is completed with the handler's result;
//   - a key completed before skips the handler and returns the cached
//     result;
//   - a key in progress in another invocation fails with ErrInProgress, so
//     the message is redelivered later; the lock ends at the owner's
//     invocation deadline, so a crashed owner blocks no longer than that;
//   - a handler error releases the lock, so a retry can run at once;
//   - messages with one key in this container wait for each other instead
//     of failing with ErrInProgress: they replay the first one's result, or
//     run on their own if it failed or outlived its lease;
//   - under Batch, a re-driven batch's completed records are read ahead in
//     one request (see PrefetchPolicy).
//
// It is the Once engine (see NewOnce) with the key and
// payload taken from each message. With POWERTOOLS_IDEMPOTENCY_DISABLED set
// to a true value when Idempotent is called, it runs the handler directly
// for every message, reading no key and checking no payload, and never
// calls the store (see Once); Batch works as usual.
func Idempotent(store Store, key KeyFunc, optFns ...func(*Options)) Middleware {
	// One engine per middleware: its cache and flights live as long as
	// the warm container.
	e := NewOnce(store, optFns...)
	return func(next Handler) Handler {
		return &idempotent{Once: e, next: next, key: key}
	}
}

type idempotent struct {
	*Once
	next Handler
	key  KeyFunc
}

// Handle implements Handler.
func (m *idempotent) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	if m.disabled {
		return m.next.Handle(ctx, msg)
	}
	key, err := m.key(msg)
	if err != nil {
		// Only a message that truly has no key may run without
		// idempotency; ErrInvalidKey never does.
		if m.opts.ProcessWithoutKey && errors.Is(err, ErrNoKey) && !errors.Is(err, ErrInvalidKey) {
			return m.next.Handle(ctx, msg)
		}
		if errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidKey) {
			err = poison(msg, err) // the message has no key a redelivery could mend
		}
		return nil, err
	}
	id, err := m.recordID(key)
	if err != nil {
		return nil, poison(msg, err) // its key can never be a record's ID
	}
	var validation string
	if m.opts.Payload != nil {
		p, err := m.opts.Payload(msg)
		if err != nil {
			if errors.Is(err, ErrDecode) || errors.Is(err, ErrInvalidKey) {
				// The body cannot be read (PayloadBody, PayloadFields);
				// any other error of a PayloadFunc of yours may pass.
				err = poison(msg, err)
			}
			return nil, err
		}
		validation = KeyHash(p)
	}
	handlerMismatch := false
	out, err := m.do(ctx, id, validation,
		func(now time.Time) (IdempotencyRecord, bool) { return m.prefetched(ctx, msg, id, now) },
		func(ctx context.Context) ([]byte, error) {
			out, err := m.next.Handle(ctx, msg)
			handlerMismatch = errors.Is(err, ErrPayloadMismatch)
			return out, err
		})
	var hookErr *hookError
	if !handlerMismatch && !errors.As(err, &hookErr) && errors.Is(err, ErrPayloadMismatch) {
		// This message's key was used with another payload: found
		// before the handler ran, or after it under StagedOnly. A
		// mismatch the handler or the response hook returned is one
		// its own code met (a nested Once, say), which a retry may get
		// past.
		err = poison(msg, err)
	}
	return out, err
}
