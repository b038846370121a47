package lambdakit

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
)

// Handler processes one SQS message. The result is optional; when the
// handler runs behind Idempotent, a non-nil result is cached (it should be
// JSON) and handed back again for duplicates of the message.
//
// Handlers must not modify msg: it is shared with the batch adapter.
type Handler interface {
	Handle(ctx context.Context, msg *events.SQSMessage) (result []byte, err error)
}

// HandlerFunc adapts an ordinary function to Handler.
type HandlerFunc func(ctx context.Context, msg *events.SQSMessage) ([]byte, error)

// Handle calls f(ctx, msg).
func (f HandlerFunc) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	return f(ctx, msg)
}

// Middleware decorates a Handler.
type Middleware func(Handler) Handler

// Chain wraps h in mws so that mws[0] is the outermost: Chain(h, a, b)
// is a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}
