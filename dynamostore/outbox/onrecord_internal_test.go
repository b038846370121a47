package outbox

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/dynamostore"
)

// No stream record makes the relay's reading of it panic: what it would
// send of a record's completion or of an outbox item, and its dead letter.
// A panic there would fail the record on every retry and hold up its
// shard, whatever another writer put in the table.
func FuzzRelayReadsAnyStreamRecord(f *testing.F) {
	f.Add(`{"eventID":"1","eventName":"MODIFY","dynamodb":{"NewImage":{"id":{"S":"payment#p1"},"status":{"S":"COMPLETED"},"lease":{"S":"l2"},` +
		`"messages":{"L":[{"M":{"name":{"S":"payment.charged"},"queueUrl":{"S":"http://127.0.0.1:1/000000000000/e.fifo"},"body":{"S":"{}"},"groupId":{"S":"c"},"attributes":{"M":{"type":{"S":"x"}}}}}]}},` +
		`"OldImage":{"id":{"S":"payment#p1"},"status":{"S":"INPROGRESS"},"lease":{"S":"l2"}}}}`)
	f.Add(`{"eventID":"2","eventName":"INSERT","dynamodb":{"NewImage":{"pk":{"S":"group#c"},"id":{"S":"outbox#ab"},"queueUrl":{"S":"q"},"body":{"S":"b"},"dedupId":{"S":"d"},"attributes":{"M":{"a":{"N":"1"}}}}}}`)
	f.Add(`{"eventID":"3","eventName":"MODIFY","dynamodb":{"NewImage":{"status":{"S":"COMPLETED"},"lease":{"S":"l"},"messages":{"L":[{"S":"x"},{"M":{}}]}},"OldImage":{}}}`)
	f.Add(`{"eventID":"4","eventName":"REMOVE","dynamodb":{"OldImage":{"status":{"N":"1"}}}}`)
	names, err := dynamostore.ResolveOptions(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var rec events.DynamoDBEventRecord
		if json.Unmarshal([]byte(raw), &rec) != nil {
			return
		}
		_, _ = completionSends(&rec, names)
		_, _ = sendInput(rec.Change.NewImage)
		_, _ = deadLetterBody(&rec, errors.New("refused"))
	})
}
