package storetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// RunIdempotencyChecks checks lambdakit.Once.Do on a store: a
// duplicate gets the first result without running; a payload re-encoded is
// a duplicate, another payload a mismatch; an error releases the key; ten
// concurrent calls with one key run once; Do and the SQS middleware share
// records. newStore may return the same store every time: each check uses
// keys of its own.
func RunIdempotencyChecks(t *testing.T, newStore func(t *testing.T) lambdakit.Store) {
	quiet := func(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) }
	key := func(t *testing.T, k string) string { return t.Name() + "/" + k }
	engineCtx := func(t *testing.T) context.Context {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	t.Run("a duplicate gets the first result without running", func(t *testing.T) {
		e := lambdakit.NewOnce(newStore(t), quiet)
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) {
			return []byte(fmt.Sprintf(`{"run":%d}`, runs.Add(1))), nil
		}
		for i := range 3 {
			got, err := e.Do(engineCtx(t), key(t, "order-1"), []byte(`{"total":30}`), fn)
			if err != nil || string(got) != `{"run":1}` {
				t.Fatalf("call %d: got %s, %v; want the first result", i+1, got, err)
			}
		}
		if runs.Load() != 1 {
			t.Errorf("ran %d times; want 1", runs.Load())
		}
	})
	t.Run("the same payload from another encoder is a duplicate, another payload a mismatch", func(t *testing.T) {
		e := lambdakit.NewOnce(newStore(t), quiet)
		fn := func(context.Context) ([]byte, error) { return []byte(`"ok"`), nil }
		if _, err := e.Do(engineCtx(t), key(t, "order-2"), []byte(`{"a":1,"b":"x"}`), fn); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Do(engineCtx(t), key(t, "order-2"), []byte(`{ "b": "\u0078", "a": 1.0 }`), fn); err != nil {
			t.Errorf("re-encoded payload: got %v; want a duplicate", err)
		}
		if _, err := e.Do(engineCtx(t), key(t, "order-2"), []byte(`{"a":2,"b":"x"}`), fn); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
			t.Errorf("other payload: got %v; want ErrPayloadMismatch", err)
		}
		if _, err := e.Do(engineCtx(t), key(t, "order-2"), nil, fn); err != nil {
			t.Errorf("nil payload: got %v; want a duplicate, unchecked", err)
		}
	})
	t.Run("an error releases the key for the retry", func(t *testing.T) {
		e := lambdakit.NewOnce(newStore(t), quiet)
		fail := errors.New("gateway down")
		if _, err := e.Do(engineCtx(t), key(t, "order-3"), nil, func(context.Context) ([]byte, error) { return nil, fail }); !errors.Is(err, fail) {
			t.Fatalf("got %v; want the function's error", err)
		}
		got, err := e.Do(engineCtx(t), key(t, "order-3"), nil, func(context.Context) ([]byte, error) { return []byte(`"second"`), nil })
		if err != nil || string(got) != `"second"` {
			t.Errorf("retry: got %s, %v; want it run", got, err)
		}
	})
	t.Run("ten concurrent calls with one key run once", func(t *testing.T) {
		e := lambdakit.NewOnce(newStore(t), quiet)
		var runs atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.Do(engineCtx(t), key(t, "order-4"), []byte(`{}`), func(context.Context) ([]byte, error) {
					runs.Add(1)
					time.Sleep(20 * time.Millisecond)
					return []byte(`"ok"`), nil
				})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if runs.Load() != 1 {
			t.Errorf("ran %d times; want 1", runs.Load())
		}
	})
	t.Run("an empty key is ErrNoKey", func(t *testing.T) {
		e := lambdakit.NewOnce(newStore(t), quiet)
		if _, err := e.Do(engineCtx(t), "", nil, func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, lambdakit.ErrNoKey) {
			t.Errorf("got %v; want ErrNoKey", err)
		}
	})
	t.Run("Do and the SQS middleware share records", func(t *testing.T) {
		store := newStore(t)
		opts := func(o *lambdakit.Options) { o.Prefix = "shared"; o.Logger = slog.New(slog.DiscardHandler) }
		ran := 0
		h := lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), opts)(lambdakit.HandlerFunc(
			func(context.Context, *events.SQSMessage) ([]byte, error) { ran++; return []byte(`"from sqs"`), nil }))
		k := key(t, "order-5")
		msg := lambdakittest.Message(fmt.Sprintf(`{"id":%q}`, k))
		if _, err := h.Handle(engineCtx(t), &msg); err != nil {
			t.Fatal(err)
		}
		got, err := lambdakit.NewOnce(store, opts).Do(engineCtx(t), k, []byte(msg.Body),
			func(context.Context) ([]byte, error) { ran++; return nil, nil })
		if err != nil || string(got) != `"from sqs"` || ran != 1 {
			t.Errorf("got %s, %v after %d runs; want the SQS record's result and 1 run", got, err, ran)
		}
	})
}
