// Command streamfn is a Lambda bootstrap for the stream mapping's tests: a
// function for a DynamoDB stream or a Kinesis data stream that answers with
// a partial batch response. Each record says what to do with it, in its new
// image's "cmd" (DynamoDB) or as its data (Kinesis):
//
//	ok       succeed
//	fail@N   name the record in batchItemFailures on its first N deliveries
//	error@N  fail the invocation with a function error on its first N deliveries
//	badid@N  name an identifier that is not in the batch, on its first N
//	badkey@N name the record under "ItemIdentifier" (a key in other case),
//	         on its first N deliveries
//	badlist@N name the record in "BatchItemFailures" (a list in other case),
//	         on its first N deliveries
//	crash@N  exit with status 2 on its first N deliveries
//
// A record's deliveries are counted in files under STREAMFN_DIR, one per
// event ID, so that they survive a crash. It appends one line per record
// it gets to STREAMFN_DIR/log: "SEQUENCE_NUMBER DELIVERY", and each event
// it gets, as one line of JSON, to STREAMFN_DIR/events.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// record is what streamfn reads of a record of either kind.
type record struct {
	EventID  string `json:"eventID"`
	DynamoDB *struct {
		SequenceNumber string                                   `json:"SequenceNumber"`
		NewImage       map[string]events.DynamoDBAttributeValue `json:"NewImage"`
	} `json:"dynamodb"`
	Kinesis *struct {
		SequenceNumber string `json:"sequenceNumber"`
		Data           []byte `json:"data"`
	} `json:"kinesis"`
}

func (r record) seqAndCmd() (string, string) {
	if r.Kinesis != nil {
		return r.Kinesis.SequenceNumber, string(r.Kinesis.Data)
	}
	return r.DynamoDB.SequenceNumber, r.DynamoDB.NewImage["cmd"].String()
}

func delivery(dir, eventID string) int {
	path := filepath.Join(dir, "n-"+strings.ReplaceAll(eventID, ":", "-"))
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(string(b))
	n++
	_ = os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644)
	return n
}

// response is the partial batch response, the same for both kinds.
type response struct {
	BatchItemFailures []events.KinesisBatchItemFailure `json:"batchItemFailures"`
}

func appendLine(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(line, '\n'))
	return err
}

// handle answers a response, or raw JSON for the answers a response
// cannot spell.
func handle(ctx context.Context, raw json.RawMessage) (any, error) {
	dir := os.Getenv("STREAMFN_DIR")
	resp := response{BatchItemFailures: []events.KinesisBatchItemFailure{}}
	if err := appendLine(filepath.Join(dir, "events"), raw); err != nil {
		return resp, err
	}
	var ev struct{ Records []record }
	if err := json.Unmarshal(raw, &ev); err != nil {
		return resp, err
	}
	for _, rec := range ev.Records {
		n := delivery(dir, rec.EventID)
		seq, c := rec.seqAndCmd()
		if err := appendLine(filepath.Join(dir, "log"), fmt.Appendf(nil, "%s %d", seq, n)); err != nil {
			return resp, err
		}
		cmd, limit, _ := strings.Cut(c, "@")
		if max, err := strconv.Atoi(limit); err == nil && n > max {
			cmd = "ok"
		}
		switch cmd {
		case "fail":
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.KinesisBatchItemFailure{ItemIdentifier: seq})
			return resp, nil
		case "badid":
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.KinesisBatchItemFailure{ItemIdentifier: "no-such-record"})
			return resp, nil
		case "badkey":
			return json.RawMessage(fmt.Sprintf(`{"batchItemFailures":[{"ItemIdentifier":%q}]}`, seq)), nil
		case "badlist":
			return json.RawMessage(fmt.Sprintf(`{"BatchItemFailures":[{"itemIdentifier":%q}]}`, seq)), nil
		case "error":
			return resp, errors.New("streamfn: error asked by " + rec.EventID)
		case "crash":
			os.Exit(2)
		}
	}
	return resp, nil
}

func main() { lambda.Start(handle) }
