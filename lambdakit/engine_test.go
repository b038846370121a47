package lambdakit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

func engineCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestIdempotencyDo(t *testing.T) {
	storetest.RunIdempotencyChecks(t, func(t *testing.T) lambdakit.Store { return &lambdakittest.MemoryStore{} })
}

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

type receipt struct {
	Number int `json:"number"`
}

func TestRunTyped(t *testing.T) {
	e := lambdakit.NewOnce(&lambdakittest.MemoryStore{}, quiet)
	n := 0
	ship := func(ctx context.Context, o order) (receipt, error) {
		n++
		return receipt{Number: 100 + n}, nil
	}
	for i := range 2 {
		got, err := lambdakit.DoTyped(engineCtx(t), e, "o-1", order{ID: "o-1", Total: 30}, ship)
		if err != nil || got.Number != 101 {
			t.Fatalf("call %d: got %+v, %v; want receipt 101", i+1, got, err)
		}
	}
	if _, err := lambdakit.DoTyped(engineCtx(t), e, "o-1", order{ID: "o-1", Total: 31}, ship); !errors.Is(err, lambdakit.ErrPayloadMismatch) {
		t.Errorf("other order under the key: got %v; want ErrPayloadMismatch", err)
	}
	if n != 1 {
		t.Errorf("ran %d times; want 1", n)
	}
}

// Single-phase staging works through Do as through the middleware.
func TestIdempotencyDoStages(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	e := lambdakit.NewOnce(store, quiet)
	written := 0
	_, err := e.Do(engineCtx(t), "o-stage", nil, func(ctx context.Context) ([]byte, error) {
		return nil, lambdakit.Stage(ctx, func() { written++ })
	})
	if err != nil || written != 1 {
		t.Errorf("got %v, %d writes; want the staged write committed with the completion", err, written)
	}
}
