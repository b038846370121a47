package lambdakit

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// The batch adapter writes one line per invocation in CloudWatch's Embedded
// Metric Format: a JSON object whose "_aws" member tells CloudWatch Logs
// which of its other members are metrics, under which namespace and
// dimensions. CloudWatch extracts them from the function's log without any
// API call or agent. One line per invocation, not per record, keeps the
// log and the cost small whatever the batch size.
//
// No EMF library for Go is served by the module proxy this project builds
// with, and the format is small: the writer below follows the
// specification's required members (_aws.Timestamp in epoch milliseconds;
// _aws.CloudWatchMetrics, each with Namespace, Dimensions as arrays of
// member names, and Metrics as {Name, Unit}; every named dimension and
// metric a top-level member), which the tests check.

// invocationMetrics are the counts of one invocation.
type invocationMetrics struct {
	records, succeeded, failed int
	failedBy                   map[Reason]int
	dupStore, dupCache         int
	replayed                   int
	store                      []time.Duration // only for detailed metrics
	duration                   time.Duration
	detailed                   bool // BatchOptions.DetailedMetrics
	backoff                    bool // BatchOptions.Backoff is on
	delayed                    int  // failed records whose visibility Backoff set
	delayTotal, delayMax       time.Duration
}

func (m *invocationMetrics) add(note *recordNote, err error) {
	m.records++
	note.mu.Lock()
	defer note.mu.Unlock()
	if m.detailed {
		m.store = append(m.store, note.store...)
	}
	if note.retryIn > 0 && note.retryErr == nil {
		m.delayed++
		m.delayTotal += note.retryIn
		m.delayMax = max(m.delayMax, note.retryIn)
	}
	if err != nil || note.deadLettered != nil {
		reason := deadLetteredReason(note.deadLettered)
		if err != nil {
			reason = ReasonOf(err)
		}
		// Otherwise reported done to SQS, but a failure: a permanent one,
		// as its log line says, whatever made it so (Permanent, or poison).
		m.failed++
		if m.failedBy == nil {
			m.failedBy = map[Reason]int{}
		}
		m.failedBy[reason]++
		return
	}
	m.succeeded++
	switch note.duplicate {
	case dupStore:
		m.dupStore++
	case dupCache:
		m.dupCache++
	}
	if note.replayed {
		m.replayed++
	}
}

// metric is one metric of the line, in the order it is written.
type metric struct {
	name, unit string
	value      float64
}

// alarmMetrics are the metrics the line declares by default: what an
// alarm on a consumer needs, and no more, since CloudWatch bills each
// custom metric (each name, for each set of dimension values) by the
// month. Failed counts every failure, permanent ones included; the sample
// alarms on it and on FailedLeaseLost; FailedPermanent tells messages that
// can never succeed (and went to the dead-letter queue when a sender is
// set) from the rest; FailedAfterEffect counts the work that failed after
// its external effect (EffectDone), each a record someone must reconcile.
// The others come with BatchOptions.DetailedMetrics.
func (m *invocationMetrics) alarmMetrics() []metric {
	return m.withDelays([]metric{
		{"Failed", "Count", float64(m.failed)},
		{"Failed" + string(ReasonPermanent), "Count", float64(m.failedBy[ReasonPermanent])},
		{"Failed" + string(ReasonLeaseLost), "Count", float64(m.failedBy[ReasonLeaseLost])},
		{"Failed" + string(ReasonAfterEffect), "Count", float64(m.failedBy[ReasonAfterEffect])},
	})
}

// withDelays adds, when Backoff is on, how many failed records it delayed
// and by how long in all and at most.
func (m *invocationMetrics) withDelays(out []metric) []metric {
	if !m.backoff {
		return out
	}
	return append(out,
		metric{"Delayed", "Count", float64(m.delayed)},
		metric{"DelayTotal", "Seconds", m.delayTotal.Seconds()},
		metric{"DelayMax", "Seconds", m.delayMax.Seconds()},
	)
}

// deadLetteredReason is the reason of a record Batch sent to the
// dead-letter queue with the failure dead: Permanent, whatever made it so
// (Permanent, or poison), unless the work failed after its effect.
func deadLetteredReason(dead error) Reason {
	if errors.Is(dead, ErrFailedAfterEffect) {
		return ReasonAfterEffect
	}
	return ReasonPermanent
}

// metrics are every metric the batch counts, for
// BatchOptions.DetailedMetrics.
func (m *invocationMetrics) metrics() []metric {
	out := []metric{
		{"Records", "Count", float64(m.records)},
		{"Succeeded", "Count", float64(m.succeeded)},
		{"Failed", "Count", float64(m.failed)},
	}
	for _, r := range Reasons() {
		out = append(out, metric{"Failed" + string(r), "Count", float64(m.failedBy[r])})
	}
	out = append(out,
		metric{"DuplicatesFromStore", "Count", float64(m.dupStore)},
		metric{"DuplicatesFromCache", "Count", float64(m.dupCache)},
		metric{"Replayed", "Count", float64(m.replayed)},
	)
	if len(m.store) > 0 {
		lat := slices.Clone(m.store)
		slices.Sort(lat)
		out = append(out,
			metric{"StoreLatencyP50", "Milliseconds", ms(lat[(len(lat)-1)/2])},
			metric{"StoreLatencyMax", "Milliseconds", ms(lat[len(lat)-1])},
		)
	}
	return m.withDelays(append(out, metric{"BatchDuration", "Milliseconds", ms(m.duration)}))
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// writeEMF writes the metrics as one EMF line, with the dimensions
// FunctionName and QueueName: the alarm metrics, or all of them when
// m.detailed. The line also carries the invocation's request ID (requestId,
// when there is one), a property and not a dimension: with several
// invocations at once in one process, it says which invocation each line
// counts. The line is built by hand in one buffer, written in one call: it
// is written on every invocation, and its names are fixed.
func writeEMF(w io.Writer, namespace, function, queue, requestID string, at time.Time, m *invocationMetrics) error {
	metrics, size := m.alarmMetrics(), 512
	if m.detailed {
		metrics, size = m.metrics(), 1536
	}
	b := make([]byte, 0, size)
	b = append(b, `{"_aws":{"Timestamp":`...)
	b = strconv.AppendInt(b, at.UnixMilli(), 10)
	b = append(b, `,"CloudWatchMetrics":[{"Namespace":`...)
	b = appendJSONString(b, namespace)
	b = append(b, `,"Dimensions":[["FunctionName","QueueName"]],"Metrics":[`...)
	for i, mt := range metrics {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Name":"`...)
		b = append(b, mt.name...)
		b = append(b, `","Unit":"`...)
		b = append(b, mt.unit...)
		b = append(b, `"}`...)
	}
	b = append(b, `]}]},"FunctionName":`...)
	b = appendJSONString(b, function)
	b = append(b, `,"QueueName":`...)
	b = appendJSONString(b, queue)
	if requestID != "" {
		b = append(b, `,"requestId":`...)
		b = appendJSONString(b, requestID)
	}
	for _, mt := range metrics {
		b = append(b, `,"`...)
		b = append(b, mt.name...)
		b = append(b, `":`...)
		b = strconv.AppendFloat(b, mt.value, 'f', -1, 64)
	}
	b = append(b, "}\n"...)
	_, err := w.Write(b)
	return err
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// queueName is the queue's name from the batch's event source ARN
// ("arn:aws:sqs:region:account:name").
func queueName(recs []events.SQSMessage) string {
	if len(recs) == 0 {
		return ""
	}
	arn := recs[0].EventSourceARN
	return arn[strings.LastIndexByte(arn, ':')+1:]
}
