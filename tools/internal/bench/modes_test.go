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
	}})
	want := "| m | h | 2.00 (PutItem, UpdateItem), 2.00 | $1.250 | 0.00 | 0.25, 1.00, 0.00 | 1.00 (PutItem), 1.00 |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant the row\n%s", b.String(), want)
	}
}
