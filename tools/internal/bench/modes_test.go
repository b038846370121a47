package bench

import (
	"strings"
	"testing"
)

// A row's figures are per message, and its cost per million messages is
// its units at list price.
func TestPrintModesPerMessageAndCost(t *testing.T) {
	var b strings.Builder
	PrintModes(&b, "moto", 10, []ModeRow{{
		Mode: "m", Handler: "h", Messages: 4,
		New:         Usage{Requests: map[string]int{"PutItem": 4, "UpdateItem": 4}, WriteUnits: 8},
		Redelivered: Usage{Requests: map[string]int{"BatchGetItem": 1}, ReadUnits: 4},
		Cold:        Usage{Requests: map[string]int{"PutItem": 4}, WriteUnits: 4},
		LargestItem: 1000,
	}})
	want := "| m | h | 2.00 (PutItem, UpdateItem), 2.00 | $1.250 | 1,000 (24) | 0.00 | 0.25, 1.00, 0.00 | 1.00 (PutItem), 1.00 |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant the row\n%s", b.String(), want)
	}
	// By service: DynamoDB $1.25; Lambda 100,000 invocations ($0.02) of
	// 300 ms at 0.25 GB ($0.100); SQS 1.2 requests a message ($0.60);
	// logs 60 MB ($0.03).
	want = "| m | $1.250 | $0.020 | $0.100 | $0.600 | $0.030 | $2.000 |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant the row\n%s", b.String(), want)
	}
}
