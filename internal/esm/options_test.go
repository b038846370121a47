package esm_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

func TestNewChecksOptions(t *testing.T) {
	// Neither the client nor the runner is used: New makes no request and
	// starts nothing.
	client := sqs.NewFromConfig(aws.Config{Region: "us-east-1"})
	runner, err := runtimeapi.NewRunner(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	const (
		standard = "http://127.0.0.1:1/123456789012/orders"
		fifo     = "http://127.0.0.1:1/123456789012/orders.fifo"
	)
	tests := []struct {
		name string
		url  string
		opt  func(*esm.Options)
		bad  string // the option New names; "" when it accepts them
	}{
		{"defaults on a standard queue are fine", standard, func(*esm.Options) {}, ""},
		{"defaults on a FIFO queue are fine", fifo, func(*esm.Options) {}, ""},
		{"a big batch with a window is fine", standard, func(o *esm.Options) { o.BatchSize, o.Window = 10000, time.Second }, ""},
		{"a big batch without a window is refused", standard, func(o *esm.Options) { o.BatchSize = 11 }, "BatchSize"},
		{"a batch above 10,000 is refused", standard, func(o *esm.Options) { o.BatchSize, o.Window = 10001, time.Minute }, "BatchSize"},
		{"a negative batch size is refused", standard, func(o *esm.Options) { o.BatchSize = -1 }, "BatchSize"},
		{"a FIFO batch above 10 is refused", fifo, func(o *esm.Options) { o.BatchSize, o.Window = 11, time.Second }, "BatchSize"},
		{"a window on a FIFO queue is refused", fifo, func(o *esm.Options) { o.Window = time.Second }, "Window"},
		{"a window above 5 minutes is refused", standard, func(o *esm.Options) { o.Window = 301 * time.Second }, "Window"},
		{"a negative window is refused", standard, func(o *esm.Options) { o.Window = -time.Second }, "Window"},
		{"concurrency above 1000 is refused", standard, func(o *esm.Options) { o.Concurrency = 1001 }, "Concurrency"},
		{"negative concurrency is refused", standard, func(o *esm.Options) { o.Concurrency = -2 }, "Concurrency"},
		{"concurrency 1 is refused, as MaximumConcurrency starts at 2", standard, func(o *esm.Options) { o.Concurrency = 1 }, "Concurrency"},
		{"concurrency 2 is fine", standard, func(o *esm.Options) { o.Concurrency = 2 }, ""},
		{"a window of 1.5s is refused: whole seconds only", standard, func(o *esm.Options) { o.Window = 1500 * time.Millisecond }, "Window"},
		{"a window of 300s is fine", standard, func(o *esm.Options) { o.Window = 300 * time.Second }, ""},
		{"a poll wait above 20s is refused", standard, func(o *esm.Options) { o.PollWait = 21 * time.Second }, "PollWait"},
		{"a relative queue URL is refused", "orders", func(*esm.Options) {}, "queueURL"},
		{"a queue URL without a path is refused", "http://127.0.0.1:1", func(*esm.Options) {}, "queueURL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := esm.New(client, tt.url, runner, tt.opt)
			if tt.bad == "" {
				if err != nil || m == nil {
					t.Errorf("New = %v, %v; want a Mapping", m, err)
				}
				return
			}
			var oe *esm.OptionError
			if !errors.Is(err, esm.ErrInvalidOptions) || !errors.As(err, &oe) || oe.Option != tt.bad {
				t.Errorf("New error = %v; want an OptionError about %s, which is ErrInvalidOptions", err, tt.bad)
			}
		})
	}
	if _, err := esm.New(nil, standard, runner); !errors.Is(err, esm.ErrInvalidOptions) {
		t.Errorf("New without a client: error %v; want ErrInvalidOptions", err)
	}
	if _, err := esm.New(client, standard, nil); !errors.Is(err, esm.ErrInvalidOptions) {
		t.Errorf("New without an invoker: error %v; want ErrInvalidOptions", err)
	}
}
