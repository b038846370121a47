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
		ok   bool
	}{
		{"defaults on a standard queue are fine", standard, func(*esm.Options) {}, true},
		{"defaults on a FIFO queue are fine", fifo, func(*esm.Options) {}, true},
		{"a big batch with a window is fine", standard, func(o *esm.Options) { o.BatchSize, o.Window = 10000, time.Second }, true},
		{"a big batch without a window is refused", standard, func(o *esm.Options) { o.BatchSize = 11 }, false},
		{"a batch above 10,000 is refused", standard, func(o *esm.Options) { o.BatchSize, o.Window = 10001, time.Minute }, false},
		{"a negative batch size is refused", standard, func(o *esm.Options) { o.BatchSize = -1 }, false},
		{"a FIFO batch above 10 is refused", fifo, func(o *esm.Options) { o.BatchSize, o.Window = 11, time.Second }, false},
		{"a window on a FIFO queue is refused", fifo, func(o *esm.Options) { o.Window = time.Second }, false},
		{"a window above 5 minutes is refused", standard, func(o *esm.Options) { o.Window = 301 * time.Second }, false},
		{"a negative window is refused", standard, func(o *esm.Options) { o.Window = -time.Second }, false},
		{"concurrency above 1000 is refused", standard, func(o *esm.Options) { o.Concurrency = 1001 }, false},
		{"negative concurrency is refused", standard, func(o *esm.Options) { o.Concurrency = -2 }, false},
		{"a poll wait above 20s is refused", standard, func(o *esm.Options) { o.PollWait = 21 * time.Second }, false},
		{"a relative queue URL is refused", "orders", func(*esm.Options) {}, false},
		{"a queue URL without a path is refused", "http://127.0.0.1:1", func(*esm.Options) {}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := esm.New(client, tt.url, runner, tt.opt)
			if tt.ok && (err != nil || m == nil) {
				t.Errorf("New = %v, %v; want a Mapping", m, err)
			}
			if !tt.ok && !errors.Is(err, esm.ErrInvalidOptions) {
				t.Errorf("New error = %v; want ErrInvalidOptions", err)
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
