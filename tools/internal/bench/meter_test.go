package bench_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

// str is a string attribute value on the wire.
func str(v string) map[string]string { return map[string]string{"S": v} }

func body(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// newMeter returns a meter that knows table "t", keyed on "id".
func newMeter(t *testing.T) *bench.Meter {
	t.Helper()
	m := bench.NewMeter()
	m.Observe("CreateTable", body(map[string]any{
		"TableName": "t", "KeySchema": []map[string]string{{"AttributeName": "id", "KeyType": "HASH"}},
	}), 200, []byte(`{}`))
	m.Take()
	return m
}

// put is a PutItem of an item "id"=id plus attribute "pad" holding a string
// of padLen bytes: 2 + len(id) + 3 + padLen bytes in all.
func put(id string, padLen int) []byte {
	return body(map[string]any{"TableName": "t", "Item": map[string]any{"id": str(id), "pad": str(strings.Repeat("x", padLen))}})
}

func wantUnits(t *testing.T, m *bench.Meter, read, write float64) {
	t.Helper()
	u := m.Take()
	if u.ReadUnits != read || u.WriteUnits != write {
		t.Fatalf("got %v read and %v write units; want %v and %v", u.ReadUnits, u.WriteUnits, read, write)
	}
}

func TestMeterComputesWriteUnits(t *testing.T) {
	t.Run("an item up to 1 KB costs 1 unit, a byte more 2", func(t *testing.T) {
		m := newMeter(t)
		m.Observe("PutItem", put("a", 1024-2-1-3), 200, []byte(`{}`))
		wantUnits(t, m, 0, 1)
		m.Observe("PutItem", put("b", 1024-2-1-3+1), 200, []byte(`{}`))
		wantUnits(t, m, 0, 2)
	})

	t.Run("a number is sized by its significant digits", func(t *testing.T) {
		m := newMeter(t)
		// 2+1 (id) + 1+3 ("0012300": 3 digits, 3 bytes) + 3+pad = 1024.
		item := func(n string, pad int) []byte {
			return body(map[string]any{"TableName": "t", "Item": map[string]any{
				"id": str("a"), "n": map[string]string{"N": n}, "pad": str(strings.Repeat("x", pad)),
			}})
		}
		m.Observe("PutItem", item("0012300", 1024-3-4-3), 200, []byte(`{}`))
		wantUnits(t, m, 0, 1)
		// 11 digits: 7 bytes, 4 more than 3.
		m.Observe("PutItem", item("12345678901", 1024-3-4-3), 200, []byte(`{}`))
		wantUnits(t, m, 0, 2)
	})

	t.Run("an update costs the larger of the item before and after", func(t *testing.T) {
		m := newMeter(t)
		m.Observe("PutItem", put("a", 900), 200, []byte(`{}`))
		m.Take()
		update := func(expr string, values map[string]any) []byte {
			in := map[string]any{"TableName": "t", "Key": map[string]any{"id": str("a")}, "UpdateExpression": expr,
				"ExpressionAttributeNames": map[string]string{"#b": "big"}}
			if values != nil {
				in["ExpressionAttributeValues"] = values
			}
			return body(in)
		}
		m.Observe("UpdateItem", update("SET #b = :v", map[string]any{":v": str(strings.Repeat("y", 200))}), 200, []byte(`{}`))
		wantUnits(t, m, 0, 2) // after: 909 + 203
		m.Observe("UpdateItem", update("REMOVE #b", nil), 200, []byte(`{}`))
		wantUnits(t, m, 0, 2) // before: 1112
		m.Observe("UpdateItem", update("SET #b = :v", map[string]any{":v": str("z")}), 200, []byte(`{}`))
		wantUnits(t, m, 0, 1) // 909 before, 913 after
	})

	t.Run("a delete costs the size of the item deleted", func(t *testing.T) {
		m := newMeter(t)
		m.Observe("PutItem", put("a", 1500), 200, []byte(`{}`))
		m.Take()
		m.Observe("DeleteItem", body(map[string]any{"TableName": "t", "Key": map[string]any{"id": str("a")}}), 200, []byte(`{}`))
		wantUnits(t, m, 0, 2)
		m.Observe("DeleteItem", body(map[string]any{"TableName": "t", "Key": map[string]any{"id": str("a")}}), 200, []byte(`{}`))
		wantUnits(t, m, 0, 1) // gone: the minimum
	})

	t.Run("a put whose condition fails costs the larger item and changes nothing", func(t *testing.T) {
		m := newMeter(t)
		m.Observe("PutItem", put("a", 1500), 200, []byte(`{}`))
		m.Take()
		m.Observe("PutItem", put("a", 10), 400, []byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}`))
		wantUnits(t, m, 0, 2)
		m.Observe("PutItem", put("a", 10), 400, []byte(`{}`))
		wantUnits(t, m, 0, 2) // the big item is still there
	})

	t.Run("a transaction costs each write twice", func(t *testing.T) {
		m := newMeter(t)
		m.Observe("PutItem", put("b", 10), 200, []byte(`{}`))
		m.Take()
		tx := body(map[string]any{"TransactItems": []any{
			map[string]any{"Put": map[string]any{"TableName": "t", "Item": map[string]any{"id": str("a"), "pad": str(strings.Repeat("x", 1500))}}},
			map[string]any{"Update": map[string]any{"TableName": "t", "Key": map[string]any{"id": str("b")}, "UpdateExpression": "SET pad = :v",
				"ExpressionAttributeValues": map[string]any{":v": str("y")}}},
		}})
		m.Observe("TransactWriteItems", tx, 200, []byte(`{}`))
		wantUnits(t, m, 0, 2*2+2*1)
	})
}

func TestMeterComputesReadUnits(t *testing.T) {
	t.Run("a strongly consistent read costs 1 unit per 4 KB, an eventual one half", func(t *testing.T) {
		m := newMeter(t)
		got := body(map[string]any{"Item": map[string]any{"id": str("a"), "pad": str(strings.Repeat("x", 5000))}})
		m.Observe("GetItem", body(map[string]any{"TableName": "t", "ConsistentRead": true}), 200, got)
		wantUnits(t, m, 2, 0)
		m.Observe("GetItem", body(map[string]any{"TableName": "t"}), 200, got)
		wantUnits(t, m, 1, 0)
		m.Observe("GetItem", body(map[string]any{"TableName": "t", "ConsistentRead": true}), 200, []byte(`{}`))
		wantUnits(t, m, 1, 0) // absent: still a read
	})

	t.Run("BatchGetItem counts each key, absent ones too, unprocessed ones not", func(t *testing.T) {
		m := newMeter(t)
		key := func(id string) map[string]any { return map[string]any{"id": str(id)} }
		req := body(map[string]any{"RequestItems": map[string]any{"t": map[string]any{
			"Keys": []any{key("a"), key("b"), key("c"), key("d")}, "ConsistentRead": true,
		}}})
		resp := body(map[string]any{
			"Responses":       map[string]any{"t": []any{map[string]any{"id": str("a"), "pad": str(strings.Repeat("x", 5000))}}},
			"UnprocessedKeys": map[string]any{"t": map[string]any{"Keys": []any{key("d")}}},
		})
		m.Observe("BatchGetItem", req, 200, resp)
		wantUnits(t, m, 2+1+1, 0)
	})
}

func TestMeterCountsRequestsByOperation(t *testing.T) {
	m := newMeter(t)
	for i := range 3 {
		m.Observe("PutItem", put(fmt.Sprint(i), 1), 200, []byte(`{}`))
	}
	m.Observe("DescribeTable", []byte(`{}`), 200, []byte(`{}`))
	u := m.Take()
	if u.Requests["PutItem"] != 3 || u.Requests["DescribeTable"] != 1 || u.Total() != 4 {
		t.Fatalf("got %v; want PutItem 3, DescribeTable 1", u.Requests)
	}
	if u := m.Take(); u.Total() != 0 {
		t.Fatalf("second Take got %v; want nothing", u.Requests)
	}
}

// LargestItem is the largest item written to a table and still there, by
// its billed size; a failed write changes nothing.
func TestMeterLargestItemOfItsTableOnly(t *testing.T) {
	m := newMeter(t)
	m.Observe("PutItem", put("a", 100), 200, []byte(`{}`))  // 2+1 + 3+100
	m.Observe("PutItem", put("b", 1000), 200, []byte(`{}`)) // 2+1 + 3+1000
	m.Observe("PutItem", put("c", 5000), 400, []byte(`{}`)) // its condition failed
	m.Observe("PutItem", body(map[string]any{"TableName": "t2", "Item": map[string]any{"id": str("d"), "pad": str(strings.Repeat("x", 2000))}}), 200, []byte(`{}`))
	if got := m.LargestItem("t"); got != 1006 {
		t.Errorf("LargestItem(t) = %d; want 1006", got)
	}
	if got := m.LargestItem("none"); got != 0 {
		t.Errorf("LargestItem of an unknown table = %d; want 0", got)
	}
}
