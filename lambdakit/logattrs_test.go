package lambdakit_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// A handler's own fields stand on the record's one line, whatever became of
// the record, and never take the place of the batch's fields.
func TestAddLogAttrsStandOnTheRecordLine(t *testing.T) {
	var log lambdakittest.LogBuffer
	h := lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		if !lambdakit.AddLogAttrs(ctx, slog.String("payment_id", msg.Body), slog.String("outcome", "mine")) {
			t.Errorf("AddLogAttrs under Batch = false; want true")
		}
		if msg.Body == "p-fail" {
			return nil, errors.New("gateway down")
		}
		return nil, nil
	})
	ok, failed := lambdakittest.Message("p-ok"), lambdakittest.Message("p-fail")
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = log.Logger() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := batch(ctx, lambdakittest.Event(ok, failed)); err != nil {
		t.Fatal(err)
	}

	lines := map[string][]map[string]any{}
	for _, l := range log.Lines(t) {
		id, _ := l["messageId"].(string)
		lines[id] = append(lines[id], l)
	}
	for _, c := range []struct {
		msg               events.SQSMessage
		wantMsg, wantOutc string
	}{
		{ok, "message done", "processed"},
		{failed, "message failed", "failed"},
	} {
		got := lines[c.msg.MessageId]
		if len(got) != 1 {
			t.Fatalf("%s: got %d lines %v; want 1", c.msg.Body, len(got), got)
		}
		l := got[0]
		if l["msg"] != c.wantMsg || l["payment_id"] != c.msg.Body || l["outcome"] != c.wantOutc || l["handler.outcome"] != "mine" {
			t.Errorf("%s: got line %v; want %q with payment_id %q, outcome %q and handler.outcome \"mine\"",
				c.msg.Body, l, c.wantMsg, c.msg.Body, c.wantOutc)
		}
	}
	if l := lines[failed.MessageId][0]; l["reason"] != "gateway down" {
		t.Errorf("failed record: got reason %v; want the batch's, \"gateway down\"", l["reason"])
	}

	t.Run("outside Batch nothing is added", func(t *testing.T) {
		if lambdakit.AddLogAttrs(context.Background(), slog.String("payment_id", "p")) {
			t.Error("AddLogAttrs outside Batch = true; want false")
		}
	})
}
