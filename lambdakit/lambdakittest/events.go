package lambdakittest

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/events"
)

// Queue ARNs the builders use. A FIFO queue's name ends in ".fifo", which is
// how lambdakit.Batch tells the two kinds apart.
const (
	StandardQueueARN = "arn:aws:sqs:us-east-1:123456789012:lambdakit-test"
	FIFOQueueARN     = "arn:aws:sqs:us-east-1:123456789012:lambdakit-test.fifo"
)

var messageSeq atomic.Uint64

// Message returns an SQS message as Lambda delivers it from a standard
// queue, with a unique message ID, then applies opts.
func Message(body string, opts ...func(*events.SQSMessage)) events.SQSMessage {
	n := messageSeq.Add(1)
	sum := md5.Sum([]byte(body))
	m := events.SQSMessage{
		MessageId:     fmt.Sprintf("00000000-0000-4000-8000-%012d", n),
		ReceiptHandle: "rh-" + strconv.FormatUint(n, 10),
		Body:          body,
		Md5OfBody:     hex.EncodeToString(sum[:]),
		Attributes: map[string]string{
			"ApproximateReceiveCount":          "1",
			"SentTimestamp":                    "1700000000000",
			"SenderId":                         "AIDAEXAMPLE",
			"ApproximateFirstReceiveTimestamp": "1700000000001",
		},
		MessageAttributes: map[string]events.SQSMessageAttribute{},
		EventSource:       "aws:sqs",
		EventSourceARN:    StandardQueueARN,
		AWSRegion:         "us-east-1",
	}
	for _, o := range opts {
		o(&m)
	}
	return m
}

// InGroup makes a message come from a FIFO queue, in message group g.
func InGroup(g string) func(*events.SQSMessage) {
	return func(m *events.SQSMessage) {
		m.EventSourceARN = FIFOQueueARN
		m.Attributes["MessageGroupId"] = g
		m.Attributes["SequenceNumber"] = strconv.FormatUint(messageSeq.Add(1), 10)
	}
}

// WithAttribute sets a string message attribute.
func WithAttribute(name, value string) func(*events.SQSMessage) {
	return func(m *events.SQSMessage) {
		m.MessageAttributes[name] = events.SQSMessageAttribute{StringValue: &value, DataType: "String"}
	}
}

// Redelivery returns msg as SQS delivers it again: same message ID and
// body, a new receipt handle, the receive count one higher.
func Redelivery(msg events.SQSMessage) events.SQSMessage {
	attrs := make(map[string]string, len(msg.Attributes))
	for k, v := range msg.Attributes {
		attrs[k] = v
	}
	count, _ := strconv.Atoi(attrs["ApproximateReceiveCount"])
	attrs["ApproximateReceiveCount"] = strconv.Itoa(count + 1)
	msg.Attributes = attrs
	msg.ReceiptHandle = "rh-" + strconv.FormatUint(messageSeq.Add(1), 10)
	return msg
}

// Event wraps messages in the event Lambda hands a batch handler.
func Event(msgs ...events.SQSMessage) events.SQSEvent {
	return events.SQSEvent{Records: msgs}
}
