// Command esmfn is a Lambda bootstrap for the esm tests: an SQS function
// whose records say what it should do with them, and which logs every event
// it gets, so that a test sees exactly what the event source mapping sent.
//
// A record's body is a label followed by commands, separated by spaces:
//
//	fail       name the record in batchItemFailures
//	error      fail the invocation with a function error
//	crash      exit with status 2 during the invocation
//	sleep=MS   sleep MS milliseconds before answering
//	badid      answer with an itemIdentifier that is not in the batch
//	emptyid    answer with an empty itemIdentifier
//	noid       answer with a batchItemFailures entry without itemIdentifier
//	invalid    answer with bytes that are not JSON
//	string     answer with the JSON string "ok"
//	extra      answer with {"statusCode": 200}, no batchItemFailures
//	delay=S    set the record's visibility timeout to S seconds, as a
//	           function that backs off does (ChangeMessageVisibility at
//	           AWS_ENDPOINT_URL_SQS, the queue named by the event source ARN)
//
// A command ending in @N applies only while the record's
// ApproximateReceiveCount is at most N ("fail@1": fail the first delivery
// only). As lambdakit does on a FIFO queue, a record after a failed one of
// the same message group is reported failed without being processed.
//
// ESMFN_LOG names a file that gets one JSON line when an invocation starts
// ({"kind":"start", "event": the raw event, ...}) and one when it answers
// ({"kind":"end", "failed": [...]}); each line has the process's PID and
// its AWS_LAMBDA_MAX_CONCURRENCY, if set.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

type logLine struct {
	Kind      string          `json:"kind"`
	PID       int             `json:"pid"`
	MaxConc   string          `json:"maxConcurrency,omitempty"`
	RequestID string          `json:"requestId"`
	Time      int64           `json:"time"` // Unix nanoseconds
	Event     json.RawMessage `json:"event,omitempty"`
	Failed    []string        `json:"failed,omitempty"`
}

func writeLog(l logLine) {
	path := os.Getenv("ESMFN_LOG")
	if path == "" {
		return
	}
	l.PID, l.MaxConc = os.Getpid(), os.Getenv("AWS_LAMBDA_MAX_CONCURRENCY")
	b, _ := json.Marshal(l)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "esmfn:", err)
		os.Exit(1)
	}
	defer f.Close()
	// One write per line: with O_APPEND, lines of concurrent processes do not
	// interleave.
	if _, err := f.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "esmfn:", err)
		os.Exit(1)
	}
}

// commands returns the commands of rec that apply to this delivery.
func commands(rec events.SQSMessage) map[string]string {
	count, _ := strconv.Atoi(rec.Attributes["ApproximateReceiveCount"])
	cmds := map[string]string{}
	fields := strings.Fields(rec.Body)
	for _, f := range fields[min(1, len(fields)):] {
		if c, limit, ok := strings.Cut(f, "@"); ok {
			n, err := strconv.Atoi(limit)
			if err != nil || count > n {
				continue
			}
			f = c
		}
		name, arg, _ := strings.Cut(f, "=")
		cmds[name] = arg
	}
	return cmds
}

type rawReader struct{ *strings.Reader }

func handle(ctx context.Context, raw json.RawMessage) (any, error) {
	lc, _ := lambdacontext.FromContext(ctx)
	writeLog(logLine{Kind: "start", RequestID: lc.AwsRequestID, Time: time.Now().UnixNano(), Event: raw})
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, err
	}
	var resp events.SQSEventResponse
	var answer any
	failedGroups := map[string]bool{}
	for _, rec := range ev.Records {
		group := rec.Attributes["MessageGroupId"]
		if group != "" && failedGroups[group] {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
			continue
		}
		cmds := commands(rec)
		if ms, ok := cmds["sleep"]; ok {
			n, _ := strconv.Atoi(ms)
			time.Sleep(time.Duration(n) * time.Millisecond)
		}
		if secs, ok := cmds["delay"]; ok {
			if err := delay(ctx, rec, secs); err != nil {
				return nil, err
			}
		}
		if _, ok := cmds["crash"]; ok {
			os.Exit(2)
		}
		if _, ok := cmds["error"]; ok {
			return nil, errors.New("esmfn: error asked by " + rec.MessageId)
		}
		if _, ok := cmds["fail"]; ok {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
			if group != "" {
				failedGroups[group] = true
			}
		}
		for name, bad := range map[string]any{
			"badid":   map[string]any{"batchItemFailures": []any{map[string]string{"itemIdentifier": "no-such-message"}}},
			"emptyid": map[string]any{"batchItemFailures": []any{map[string]string{"itemIdentifier": ""}}},
			"noid":    map[string]any{"batchItemFailures": []any{map[string]string{"messageId": rec.MessageId}}},
			"invalid": rawReader{strings.NewReader("this is not JSON")},
			"string":  "ok",
			"extra":   map[string]any{"statusCode": 200},
		} {
			if _, ok := cmds[name]; ok {
				answer = bad
			}
		}
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	writeLog(logLine{Kind: "end", RequestID: lc.AwsRequestID, Time: time.Now().UnixNano(), Failed: failed})
	if answer != nil {
		return answer, nil
	}
	return resp, nil
}

// delay sets rec's visibility timeout to secs seconds. The queue's URL is
// moto's shape: the endpoint, the account, the name.
func delay(ctx context.Context, rec events.SQSMessage, secs string) error {
	n, err := strconv.Atoi(secs)
	if err != nil {
		return fmt.Errorf("esmfn: delay=%s: %w", secs, err)
	}
	arn := strings.Split(rec.EventSourceARN, ":")
	if len(arn) != 6 {
		return fmt.Errorf("esmfn: event source ARN %q", rec.EventSourceARN)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	_, err = sqs.NewFromConfig(cfg).ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(strings.TrimSuffix(os.Getenv("AWS_ENDPOINT_URL_SQS"), "/") + "/" + arn[4] + "/" + arn[5]),
		ReceiptHandle:     aws.String(rec.ReceiptHandle),
		VisibilityTimeout: int32(n),
	})
	return err
}

func main() {
	lambda.Start(handle)
}
