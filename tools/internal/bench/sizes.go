package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Delivery kinds of the batch-size rows.
const (
	FirstDelivery  = "first delivery"
	ColdRedelivery = "cold redelivery"
)

// SizesConfig is what the batch-size rows run.
type SizesConfig struct {
	// Template is the SAM template whose tables each row gets, fresh.
	Template string
	// First are the batch sizes delivered for the first time: new
	// payments, charged.
	First []int
	// Redelivered are the batch sizes delivered again after every
	// payment of them was completed (records written beforehand, see
	// SeedCompleted): what Lambda re-drives after a timeout, answered by
	// the read ahead.
	Redelivered []int
	// BodyBytes is the size of each message body.
	BodyBytes int
	// MinRecords: a row of a smaller size runs as many invocations of it
	// as it takes to make MinRecords records, one after another on the
	// same container, so that its per-record figures are not one small
	// invocation's noise. Larger sizes run one invocation.
	MinRecords int
	// Timeout is the function's timeout for these rows: enough for the
	// largest batch.
	Timeout time.Duration
	// GatewayDelay, if set, makes the gateway answer each charge of the
	// first deliveries after it (see gateway.Gateway.SetDelay): a slow
	// gateway keeps many records' calls open at once.
	GatewayDelay time.Duration
}

// SizeRow is one batch-size row: Invocations invocations of Size records
// each, on one fresh container, against fresh tables.
type SizeRow struct {
	Row
	Delivery    string // FirstDelivery or ColdRedelivery
	Size        int
	Invocations int
	// EventBytes is the size of one invocation's event, as JSON.
	EventBytes int
}

// InvocationTime is the sum of the row's invocation durations, as the
// Runtime API saw them.
func (r SizeRow) InvocationTime() time.Duration {
	var d time.Duration
	for _, l := range r.Latency {
		d += l
	}
	return d
}

// BatchSizes runs the batch-size rows, for each size every Impl in turn:
// first the first deliveries, each on tables of its own; then the cold
// redeliveries, each size on a table of its own seeded with the payments'
// completed records, which both Impls only read.
func (h *Harness) BatchSizes(ctx context.Context, impls []Impl, cfg SizesConfig) ([]SizeRow, error) {
	hs := *h
	hs.Concurrency = 1
	hs.Timeout = cfg.Timeout
	reps := func(size int) int { return max(1, (cfg.MinRecords+size-1)/size) }
	var rows []SizeRow
	run := func(im Impl, delivery string, size int, batches [][]events.SQSMessage) error {
		h.progress("%s, batches of %d, %s", delivery, size, im.Name)
		event, err := json.Marshal(events.SQSEvent{Records: batches[0]})
		if err != nil {
			return err
		}
		row, c, err := hs.Run(ctx, im, Scenario{Name: fmt.Sprintf("%s, %d", delivery, size), Batches: batches})
		if err != nil {
			return fmt.Errorf("bench: %s of %d, %s: %w", delivery, size, im.Name, err)
		}
		c.Close()
		rows = append(rows, SizeRow{Row: row, Delivery: delivery, Size: size, Invocations: len(batches), EventBytes: len(event)})
		return nil
	}
	h.Stack.Gateway.SetDelay(cfg.GatewayDelay)
	defer h.Stack.Gateway.SetDelay(0)
	for _, size := range cfg.First {
		for i, im := range impls {
			ledger, err := h.Stack.Tables(ctx, cfg.Template, fmt.Sprintf("size-%s-first-%d", im.Name, size))
			if err != nil {
				return nil, err
			}
			im.Env = h.Stack.FunctionEnv(ledger)
			// Prefixes of one length, new to the gateway.
			pay := NewPayments(fmt.Sprintf("F%d-%06d", i, size)).Padded(cfg.BodyBytes)
			if err := run(im, FirstDelivery, size, InBatches(pay.Take(size*reps(size)), size)); err != nil {
				return nil, err
			}
		}
	}
	h.Stack.Gateway.SetDelay(0)
	for _, size := range cfg.Redelivered {
		ledger, err := h.Stack.Tables(ctx, cfg.Template, fmt.Sprintf("size-redrive-%d", size))
		if err != nil {
			return nil, err
		}
		msgs := NewPayments(fmt.Sprintf("R-%06d", size)).Padded(cfg.BodyBytes).Take(size * reps(size))
		h.progress("seeding %d completed payments", len(msgs))
		if err := h.Stack.SeedCompleted(ctx, ledger, msgs); err != nil {
			return nil, err
		}
		batches := Redelivered(InBatches(msgs, size))
		for _, im := range impls {
			im.Env = h.Stack.FunctionEnv(ledger)
			if err := run(im, ColdRedelivery, size, batches); err != nil {
				return nil, err
			}
		}
	}
	return rows, nil
}

// DelayRow is how long batches take when every gateway call waits Delay,
// for one Impl: Reps batches of 1 new payment and Reps of 10, alternating,
// on one container.
type DelayRow struct {
	Impl  string
	Delay time.Duration
	// One and Ten are the invocations' durations, batches of 1 and 10.
	One, Ten []time.Duration
	Failed   int
	Failures []string
}

// GatewayDelay measures, for each Impl, batches of 1 and of 10 new
// payments while the gateway answers each charge after delay: if a batch's
// records run concurrently, 10 take about as long as 1.
func (h *Harness) GatewayDelay(ctx context.Context, impls []Impl, pays []*Payments, delay time.Duration, reps int) ([]DelayRow, error) {
	var rows []DelayRow
	for i, im := range impls {
		h.progress("gateway answering after %v, %s", delay, im.Name)
		c, err := h.Start(ctx, im, 1, nil)
		if err != nil {
			return nil, err
		}
		row := DelayRow{Impl: im.Name, Delay: delay}
		h.Stack.Gateway.SetDelay(delay)
		for range reps {
			for _, n := range []int{1, 10} {
				o, ierr := invoke(ctx, c.runners[0], pays[i].Take(n))
				if ierr != nil {
					err = errors.Join(err, ierr)
					continue
				}
				if n == 1 {
					row.One = append(row.One, o.duration)
				} else {
					row.Ten = append(row.Ten, o.duration)
				}
				row.Failed += o.failed
				if o.reason != "" && len(row.Failures) < 3 {
					row.Failures = append(row.Failures, o.reason)
				}
			}
		}
		h.Stack.Gateway.SetDelay(0)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: gateway delay, %s: %w", im.Name, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}
