// Command streamfn is a Lambda bootstrap for the stream mapping's tests: a
// DynamoDB stream function that answers with a partial batch response. Each
// record's new image holds "cmd", what to do with it:
//
//	ok       succeed
//	fail@N   name the record in batchItemFailures on its first N deliveries
//	error@N  fail the invocation with a function error on its first N deliveries
//	badid@N  name an identifier that is not in the batch, on its first N
//	crash@N  exit with status 2 on its first N deliveries
//
// A record's deliveries are counted in files under STREAMFN_DIR, one per
// event ID, so that they survive a crash. It appends one line per record
// it gets to STREAMFN_DIR/log: "SEQUENCE_NUMBER DELIVERY".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

func delivery(dir, eventID string) int {
	path := filepath.Join(dir, "n-"+eventID)
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(string(b))
	n++
	_ = os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644)
	return n
}

func handle(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	dir := os.Getenv("STREAMFN_DIR")
	resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return resp, err
	}
	defer log.Close()
	for _, rec := range ev.Records {
		n := delivery(dir, rec.EventID)
		fmt.Fprintf(log, "%s %d\n", rec.Change.SequenceNumber, n)
		cmd, limit, _ := strings.Cut(rec.Change.NewImage["cmd"].String(), "@")
		if max, err := strconv.Atoi(limit); err == nil && n > max {
			cmd = "ok"
		}
		switch cmd {
		case "fail":
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: rec.Change.SequenceNumber})
			return resp, nil
		case "badid":
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: "no-such-record"})
			return resp, nil
		case "error":
			return resp, errors.New("streamfn: error asked by " + rec.EventID)
		case "crash":
			os.Exit(2)
		}
	}
	return resp, nil
}

func main() { lambda.Start(handle) }
