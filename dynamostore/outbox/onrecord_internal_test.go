package outbox

import (
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

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

// TestMessageAttributesFollowTheCallersMap checks the attributes value a
// message shares with the one before it (attributesValue): the same
// attributes give the same value, and attributes changed in the caller's
// own map after a call, or different ones, give their own, while a
// message made before keeps what it was given.
func TestMessageAttributesFollowTheCallersMap(t *testing.T) {
	attrsOf := func(item map[string]types.AttributeValue) map[string]string {
		out := map[string]string{}
		for k, v := range item["attributes"].(*types.AttributeValueMemberM).Value {
			out[k] = v.(*types.AttributeValueMemberS).Value
		}
		return out
	}
	attrs := map[string]string{"type": "payment.charged"}
	first := message("a", Message{QueueURL: "q", Body: "b", Attributes: attrs}, 0)
	second := message("a", Message{QueueURL: "q", Body: "b", Attributes: map[string]string{"type": "payment.charged"}}, 0)
	if first["attributes"] != second["attributes"] {
		t.Errorf("two messages with the same attributes got two values; want one shared")
	}
	attrs["type"] = "payment.refunded" // the caller's map, changed after the call
	third := message("a", Message{QueueURL: "q", Body: "b", Attributes: attrs}, 0)
	fourth := message("a", Message{QueueURL: "q", Body: "b", Attributes: map[string]string{"type": "payment.charged", "v": "2"}}, 0)
	for _, c := range []struct {
		item map[string]types.AttributeValue
		want map[string]string
	}{
		{first, map[string]string{"type": "payment.charged"}},
		{second, map[string]string{"type": "payment.charged"}},
		{third, map[string]string{"type": "payment.refunded"}},
		{fourth, map[string]string{"type": "payment.charged", "v": "2"}},
	} {
		if got := attrsOf(c.item); !maps.Equal(got, c.want) {
			t.Errorf("attributes %v; want %v", got, c.want)
		}
	}
	if got := message("a", Message{QueueURL: "q", Body: "b"}, 0); got["attributes"] != nil {
		t.Errorf("a message without attributes got %v", got["attributes"])
	}
}

// TestMessageAttributesAreTheirOwnMadeAtOnce checks the shared attributes
// value (attributesValue) when goroutines make messages with different
// attributes at once (run with -race): each message carries its own
// attributes, never those of a message made beside it.
func TestMessageAttributesAreTheirOwnMadeAtOnce(t *testing.T) {
	sets := []map[string]string{{"type": "payment.charged"}, {"type": "payment.refunded"}, {"type": "payment.charged", "v": "2"}}
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for g := range 4 {
		wg.Go(func() {
			for k := range 300 {
				want := sets[(g+k)%len(sets)]
				am := message("a", Message{QueueURL: "q", Body: "b", Attributes: want}, 0)["attributes"].(*types.AttributeValueMemberM).Value
				if len(am) != len(want) {
					wrong.Add(1)
					continue
				}
				for name, v := range want {
					if s, ok := am[name].(*types.AttributeValueMemberS); !ok || s.Value != v {
						wrong.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d messages made at once carried attributes not their own", n)
	}
}
