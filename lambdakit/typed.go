package lambdakit

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
)

// Typed returns a Handler that decodes each JSON body into a T and calls fn.
// A body that does not decode fails its record with an error wrapping
// ErrDecode; fn is not called.
func Typed[T any](fn func(ctx context.Context, v T) error) Handler {
	return HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		v, err := decode[T](msg)
		if err != nil {
			return nil, poison(msg, err)
		}
		return nil, fn(ctx, v)
	})
}

// TypedResult is Typed for functions with a result. The result is encoded
// as JSON; behind Idempotent it is cached and duplicates get it back. A
// result json.Marshal refuses (NaN, an infinity, a failing MarshalJSON) is
// an error wrapping ErrResultNotStorable: behind Idempotent the record is
// then completed without a result, since fn's work is done, and
// duplicates replay none.
func TypedResult[T, R any](fn func(ctx context.Context, v T) (R, error)) Handler {
	return HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		v, err := decode[T](msg)
		if err != nil {
			return nil, poison(msg, err)
		}
		r, err := fn(ctx, v)
		if err != nil {
			return nil, err
		}
		return encodeResult(r)
	})
}

func decode[T any](msg *events.SQSMessage) (T, error) {
	var v T
	if err := json.Unmarshal([]byte(msg.Body), &v); err != nil {
		return v, fmt.Errorf("%w as %T: %w", ErrDecode, v, err)
	}
	return v, nil
}

// encodeResult is a handler's result as JSON. It fails with an error
// wrapping ErrResultNotStorable, which the idempotency engine reads as
// "done, but no result to keep", not as a failure of the work.
func encodeResult(r any) ([]byte, error) {
	out, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("lambdakit: encode result: %w: %w", ErrResultNotStorable, err)
	}
	return out, nil
}
