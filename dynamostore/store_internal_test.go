package dynamostore

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// BenchmarkRecordRequests is the store's own work for a new record on its
// item (the sample's payment), without the network: the lock's put, the
// item's check (SetItem's, then the completion's) and the completion's
// update, as Acquire and Complete build them before the SDK sends them.
// It is what the store adds per record to the floor's two requests.
func BenchmarkRecordRequests(b *testing.B) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "payments")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	item := map[string]types.AttributeValue{
		"payment_status": str("CHARGED"),
		"amount":         &types.AttributeValueMemberN{Value: "1299"},
		"currency":       str("EUR"),
		"order_id":       str("ord_1"),
		"customer_id":    str("cus_1"),
		"recorded_at":    str("2026-01-01T00:00:00.123456789Z"),
		"charge_id":      str("ch_pay_1"),
	}
	b.ReportAllocs()
	for i := range b.N {
		rec := lambdakit.IdempotencyRecord{ID: "payment#pay_" + strconv.Itoa(i), Lease: "lease", Validation: "v",
			InProgressExpiration: now.Add(time.Minute)}
		lock := rec
		lock.Status = lambdakit.StatusInProgress
		_ = s.creation(lock.Rounded(), now)
		if err := s.CheckItem(item); err != nil {
			b.Fatal(err)
		}
		rec.Item, rec.Data = item, []byte(`{"status":"CHARGED","charge_id":"ch_pay_1"}`)
		if err := s.checkItem(rec); err != nil {
			b.Fatal(err)
		}
		rec = s.onRecord(rec)
		if err := s.checkStorable(rec); err != nil {
			b.Fatal(err)
		}
		_ = s.completion(rec.Rounded())
	}
}
