package lambdakit_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// failing fails every record whose body has "fail": true, idempotent on
// "id", like testdata/batchfn.
func failing() lambdakit.BatchFunc {
	h := lambdakit.Typed(func(ctx context.Context, r struct {
		ID   string `json:"id"`
		Fail bool   `json:"fail"`
	}) error {
		if r.Fail {
			return errors.New("asked to fail")
		}
		return nil
	})
	idem := lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField("id"), quiet)
	return lambdakit.Batch(idem(h), func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
}

func TestBatchErrorsCarryTheRecordFailures(t *testing.T) {
	t.Run("every record failed: an *AllFailedError that is ErrAllFailed", func(t *testing.T) {
		a := lambdakittest.Message(`{"id":"a","fail":true}`)
		b := lambdakittest.Message(`{"no_id":1}`)
		_, err := failing()(t.Context(), lambdakittest.Event(a, b))
		all := (*lambdakit.AllFailedError)(nil)
		if !errors.As(err, &all) || !errors.Is(err, lambdakit.ErrAllFailed) {
			t.Fatalf("got %#v; want an *AllFailedError that is ErrAllFailed", err)
		}
		if len(all.Failures) != 2 || all.Failures[0].MessageID != a.MessageId || all.Failures[1].MessageID != b.MessageId ||
			!errors.Is(all.Failures[1].Err, lambdakit.ErrNoKey) || all.Failures[0].Err == nil {
			t.Errorf("got failures %+v; want a's handler error, then b's ErrNoKey", all.Failures)
		}
		if want := "lambdakit: every record in the batch failed (batch of 2)"; err.Error() != want {
			t.Errorf("got message %q; want %q", err, want)
		}
	})
	t.Run("a failed record without messageId: a *MissingMessageIDError", func(t *testing.T) {
		noID := lambdakittest.Message(`{"id":"n","fail":true}`)
		noID.MessageId = ""
		failed := lambdakittest.Message(`{"id":"f","fail":true}`)
		ok := lambdakittest.Message(`{"id":"o"}`)
		_, err := failing()(t.Context(), lambdakittest.Event(noID, failed, ok))
		missing := (*lambdakit.MissingMessageIDError)(nil)
		if !errors.As(err, &missing) || !errors.Is(err, lambdakit.ErrMissingMessageID) || errors.Is(err, lambdakit.ErrAllFailed) {
			t.Fatalf("got %#v; want a *MissingMessageIDError that is ErrMissingMessageID only", err)
		}
		if missing.Missing != 1 || len(missing.Failures) != 2 || missing.Failures[0].MessageID != "" || missing.Failures[1].MessageID != failed.MessageId {
			t.Errorf("got %+v; want 1 missing of 2 failures, in batch order", missing)
		}
	})
	t.Run("some failed: no error", func(t *testing.T) {
		bad := lambdakittest.Message(`{"id":"x","fail":true}`)
		resp, err := failing()(t.Context(), lambdakittest.Event(bad, lambdakittest.Message(`{"id":"y"}`)))
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Errorf("got %+v, %v; want one failure and no error", resp, err)
		}
	})
}

// Lambda reports the type name of the error a Go handler returns as
// errorType (aws-lambda-go takes reflect's name, pointer stripped). A real
// bootstrap under the local Runtime API shows what a caller would see.
func TestBatchErrorTypesAsLambdaReportsThem(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a bootstrap")
	}
	bin := testenv.Build(t, "./testdata/batchfn")
	r, err := runtimeapi.NewRunner(bin, func(o *runtimeapi.RunnerOptions) { o.Timeout = 10 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })

	noID := lambdakittest.Message(`{"id":"n","fail":true}`)
	noID.MessageId = ""
	cases := []struct {
		name              string
		event             events.SQSEvent
		wantType, wantMsg string
	}{
		{"every record failed", lambdakittest.Event(lambdakittest.Message(`{"id":"a","fail":true}`), lambdakittest.Message(`{}`)),
			"AllFailedError", "lambdakit: every record in the batch failed (batch of 2)"},
		{"a failed record has no messageId", lambdakittest.Event(noID, lambdakittest.Message(`{"id":"b"}`)),
			"MissingMessageIDError", "lambdakit: a failed record has no messageId, so the whole batch fails (1 of 1 failed records)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			payload, err := json.Marshal(c.event)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := r.Invoke(ctx, payload)
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != runtimeapi.OutcomeFunctionError || res.Error == nil {
				t.Fatalf("got outcome %v, payload %s; want a function error", res.Outcome, res.Payload)
			}
			if res.Error.Type != c.wantType || res.Error.Message != c.wantMsg {
				t.Errorf("got errorType %q, errorMessage %q; want %q, %q", res.Error.Type, res.Error.Message, c.wantType, c.wantMsg)
			}
			if strings.Contains(string(res.Payload), "wrapError") || strings.Contains(string(res.Payload), "errorString") {
				t.Errorf("got %s; want no standard library type names", res.Payload)
			}
		})
	}
}
