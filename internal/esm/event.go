package esm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// eventSource is the eventSource of every SQS record.
const eventSource = "aws:sqs"

// Record returns the event record Lambda builds for message m, received from
// the queue whose ARN is queueARN: the message's ID, receipt handle, body and
// digests, every system attribute SQS returned (ApproximateReceiveCount,
// SentTimestamp, SenderId, ApproximateFirstReceiveTimestamp, and on a FIFO
// queue MessageGroupId, MessageDeduplicationId, SequenceNumber), every
// message attribute, the source and the queue's region.
//
// Maps and attribute lists are empty rather than nil, so that they encode as
// {} and [] as in Lambda's events, not as null. A message without attributes
// has an empty Md5OfMessageAttributes, which the event encodes as null, as
// Lambda sends it (aws-lambda-go's type has no null: see encodeRecord).
func Record(m types.Message, queueARN string) events.SQSMessage {
	attrs := make(map[string]string, len(m.Attributes))
	for k, v := range m.Attributes {
		attrs[k] = v
	}
	msgAttrs := make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
	for name, v := range m.MessageAttributes {
		a := events.SQSMessageAttribute{
			StringValue:      v.StringValue,
			BinaryValue:      v.BinaryValue,
			StringListValues: v.StringListValues,
			BinaryListValues: v.BinaryListValues,
			DataType:         aws.ToString(v.DataType),
		}
		if a.StringListValues == nil {
			a.StringListValues = []string{}
		}
		if a.BinaryListValues == nil {
			a.BinaryListValues = [][]byte{}
		}
		msgAttrs[name] = a
	}
	return events.SQSMessage{
		MessageId:              aws.ToString(m.MessageId),
		ReceiptHandle:          aws.ToString(m.ReceiptHandle),
		Body:                   aws.ToString(m.Body),
		Md5OfBody:              aws.ToString(m.MD5OfBody),
		Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
		Attributes:             attrs,
		MessageAttributes:      msgAttrs,
		EventSourceARN:         queueARN,
		EventSource:            eventSource,
		AWSRegion:              regionOf(queueARN),
	}
}

// Event returns the event Lambda sends for messages, in the order given.
func Event(messages []types.Message, queueARN string) events.SQSEvent {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(messages))}
	for i, m := range messages {
		ev.Records[i] = Record(m, queueARN)
	}
	return ev
}

// regionOf returns the region field of an ARN (arn:partition:service:region:
// account:resource), or "" if arn is not one.
func regionOf(arn string) string { return arnField(arn, 3) }

// accountOf returns the account field of an ARN, or "" if arn is not one.
func accountOf(arn string) string { return arnField(arn, 4) }

func arnField(arn string, i int) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" {
		return ""
	}
	return parts[i]
}

// encodeRecord returns rec as JSON, without the HTML escaping encoding/json
// does by default (Lambda's events carry <, > and & as they are).
func encodeRecord(rec events.SQSMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, fmt.Errorf("esm: encode record %s: %w", rec.MessageId, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if rec.Md5OfMessageAttributes == "" {
		// Lambda sends null for a message without attributes. The first
		// occurrence is the field: the body before it is a JSON string,
		// in which every quote is escaped.
		b = bytes.Replace(b, []byte(`"md5OfMessageAttributes":""`), []byte(`"md5OfMessageAttributes":null`), 1)
	}
	return b, nil
}

// Envelope of an event around its records: {"Records":[r1,r2,...]}.
const (
	eventPrefix = `{"Records":[`
	eventSuffix = `]}`
)

// joinEvent builds the event from encoded records.
func joinEvent(encoded [][]byte) []byte {
	n := len(eventPrefix) + len(eventSuffix) + len(encoded)
	for _, e := range encoded {
		n += len(e)
	}
	buf := make([]byte, 0, n)
	buf = append(buf, eventPrefix...)
	for i, e := range encoded {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, e...)
	}
	return append(buf, eventSuffix...)
}

// splitBySize cuts the records, encoded, into consecutive runs whose event
// fits in limit bytes, as Lambda cuts a batch at its 6 MB payload limit. A
// record too large on its own still gets an event of its own.
func splitBySize(encoded [][]byte, limit int) [][2]int {
	var runs [][2]int
	start, size := 0, len(eventPrefix)+len(eventSuffix)
	for i, e := range encoded {
		add := len(e)
		if i > start {
			add++ // the comma
		}
		if i > start && size+add > limit {
			runs = append(runs, [2]int{start, i})
			start, size, add = i, len(eventPrefix)+len(eventSuffix), len(e)
		}
		size += add
	}
	if start < len(encoded) {
		runs = append(runs, [2]int{start, len(encoded)})
	}
	return runs
}
