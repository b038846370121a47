package lambdakit_test

// POWERTOOLS_IDEMPOTENCY_DISABLED, as in every Powertools runtime: with a
// true value (1, y, yes, t, true, on, in any case) Idempotent and Once run
// the handler directly and never call the store; Batch is unchanged.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

const disabledEnv = "POWERTOOLS_IDEMPOTENCY_DISABLED"

func TestIdempotencyDisabledRunsTheHandlerEveryTime(t *testing.T) {
	t.Setenv(disabledEnv, "true")
	store := &lambdakittest.MemoryStore{}
	charged := &testenv.Counter{}
	batch, _ := newBatch(idempotent(store, charger(charged)))

	first := lambdakittest.Message(paymentBody("pay_1", 100))
	msgs := []events.SQSMessage{
		first,
		lambdakittest.Redelivery(first), // SQS again
		lambdakittest.Message(paymentBody("pay_1", 100)), // the producer's retry
		lambdakittest.Message(paymentBody("pay_1", 999)), // the key with another payload: not validated
		lambdakittest.Message(`{"amount":1}`),            // no key: no key is read
	}
	for _, m := range msgs {
		resp, err := batch(batchCtx(t), lambdakittest.Event(m))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("message %s: %v, %v; want it run", m.Body, resp.BatchItemFailures, err)
		}
	}
	if n := charged.Count("pay_1"); n != 4 {
		t.Errorf("pay_1 charged %d times; want 4: the handler runs for every message", n)
	}
	if n := charged.Count(""); n != 1 {
		t.Errorf("the message without a key ran %d times; want 1", n)
	}
	if c := store.Calls(); c.Total() != 0 {
		t.Errorf("store calls %+v; want none", c)
	}

	// Once, too: no key check, no payload check, no store.
	once := lambdakit.NewOnce(store, quiet)
	runs := 0
	for _, key := range []string{"k", "k", ""} {
		out, err := once.Do(context.Background(), key, []byte(`{"a":1}`), func(context.Context) ([]byte, error) {
			runs++
			return []byte(`"done"`), nil
		})
		if err != nil || string(out) != `"done"` {
			t.Errorf("Do(%q): %q, %v; want the function's result", key, out, err)
		}
	}
	got, err := lambdakit.DoTyped(context.Background(), once, "k", 1, func(_ context.Context, n int) (int, error) {
		runs++
		return n + 1, nil
	})
	if err != nil || got != 2 {
		t.Errorf("DoTyped: %d, %v; want 2", got, err)
	}
	if runs != 4 {
		t.Errorf("the function ran %d times; want 4", runs)
	}
	if c := store.Calls(); c.Total() != 0 {
		t.Errorf("store calls %+v; want none", c)
	}
}

// Which values turn idempotency off: Powertools' true values, in any case
// and with spaces around. Anything else, "false" and "0" among them, leaves
// it on.
func TestIdempotencyDisabledValues(t *testing.T) {
	for value, disabled := range map[string]bool{
		"1": true, "y": true, "yes": true, "t": true, "true": true, "on": true,
		"TRUE": true, "Yes": true, " true ": true,
		"": false, "0": false, "false": false, "no": false, "off": false, "n": false, "f": false,
		"disabled": false, "2": false,
	} {
		t.Run(value, func(t *testing.T) {
			t.Setenv(disabledEnv, value)
			store := &lambdakittest.MemoryStore{}
			h := idempotent(store, noop)
			if _, err := handle(t, h, lambdakittest.Message(paymentBody("pay_v", 1))); err != nil {
				t.Fatal(err)
			}
			if got := store.Calls().Total() == 0; got != disabled {
				t.Errorf("%s=%q: disabled %v; want %v", disabledEnv, value, got, disabled)
			}
		})
	}
}

// Not set, idempotency works as always: the retry is a duplicate.
func TestIdempotencyNotDisabledByDefault(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	charged := &testenv.Counter{}
	batch, _ := newBatch(idempotent(store, charger(charged)))
	for range 2 {
		m := lambdakittest.Message(paymentBody("pay_n", 1))
		if resp, err := batch(batchCtx(t), lambdakittest.Event(m)); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%v, %v", resp.BatchItemFailures, err)
		}
	}
	if n := charged.Count("pay_n"); n != 1 {
		t.Errorf("charged %d times; want 1", n)
	}
	if store.Calls().Acquire != 2 {
		t.Errorf("store calls %+v; want 2 acquires", store.Calls())
	}
}

// Inside Lambda a function with idempotency off charges twice: the engine
// says so, once, at WARN, when it is made. Outside Lambda (tests) it says
// nothing.
func TestIdempotencyDisabledWarnsInsideLambda(t *testing.T) {
	warnings := func(t *testing.T, lambda, disabled bool) int {
		t.Helper()
		if lambda {
			t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "payments")
		} else {
			t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "")
		}
		if disabled {
			t.Setenv(disabledEnv, "1")
		} else {
			t.Setenv(disabledEnv, "")
		}
		var logs lambdakittest.LogBuffer
		h := lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
			o.Logger = logs.Logger()
		})(noop)
		for range 3 {
			if _, err := handle(t, h, lambdakittest.Message(paymentBody("pay_w", 1))); err != nil {
				t.Fatal(err)
			}
		}
		n := 0
		for _, l := range logs.Lines(t) {
			if l["level"] == "WARN" && strings.Contains(l["msg"].(string), disabledEnv) {
				n++
			}
		}
		return n
	}
	t.Run("inside Lambda", func(t *testing.T) {
		if n := warnings(t, true, true); n != 1 {
			t.Errorf("got %d warnings; want 1", n)
		}
	})
	t.Run("outside Lambda", func(t *testing.T) {
		if n := warnings(t, false, true); n != 0 {
			t.Errorf("got %d warnings; want none", n)
		}
	})
	t.Run("not disabled", func(t *testing.T) {
		if n := warnings(t, true, false); n != 0 {
			t.Errorf("got %d warnings; want none", n)
		}
	})
}

// The variable is read once, when the engine is made: changing it later
// changes nothing.
func TestIdempotencyDisabledIsReadAtConstruction(t *testing.T) {
	t.Setenv(disabledEnv, "true")
	offStore := &lambdakittest.MemoryStore{}
	off := idempotent(offStore, noop)
	t.Setenv(disabledEnv, "false")
	onStore := &lambdakittest.MemoryStore{}
	on := idempotent(onStore, noop)
	t.Setenv(disabledEnv, "true")
	for _, h := range []lambdakit.Handler{off, on} {
		if _, err := handle(t, h, lambdakittest.Message(paymentBody("pay_c", 1))); err != nil {
			t.Fatal(err)
		}
	}
	if n := offStore.Calls().Total(); n != 0 {
		t.Errorf("made while disabled: %d store calls; want none", n)
	}
	if n := onStore.Calls().Total(); n == 0 {
		t.Errorf("made while enabled: no store call; want idempotency on")
	}
}

// With idempotency off there is no completion to commit staged writes
// with: Stage fails, rather than let the writes vanish.
func TestIdempotencyDisabledStageFails(t *testing.T) {
	t.Setenv(disabledEnv, "true")
	var stageErr error
	h := idempotent(&lambdakittest.MemoryStore{}, lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		stageErr = lambdakit.Stage(ctx, func() {})
		return nil, stageErr
	}))
	if _, err := handle(t, h, lambdakittest.Message(paymentBody("pay_st", 1))); !errors.Is(err, lambdakit.ErrNotStaging) {
		t.Errorf("Stage with idempotency off: %v; want ErrNotStaging", err)
	}
}
