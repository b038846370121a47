package dynamostore

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// TestCheckStagingAgreesWithTheCompletion checks that CheckStaging, which
// counts the messages on the record without building the record's item,
// refuses exactly what the completion's own check refuses once onRecord
// has put them on the item: a record that passes at Publish must not be
// refused after the work, and one refused at completion must be refused
// at Publish. The completion's record carries the largest effect
// EffectDone keeps, which the handler may declare after the last check.
// Each case is tried at DynamoDB's limit and one byte past it.
func TestCheckStagingAgreesWithTheCompletion(t *testing.T) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "records")
	if err != nil {
		t.Fatal(err)
	}
	message := func(body string) RecordMessage {
		return RecordMessage{"queueUrl": str("http://127.0.0.1/1/q"), "name": str("m"), "body": str(body)}
	}
	put := func(body string) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: aws.String("other"),
			Item: map[string]types.AttributeValue{"id": str("w"), "body": str(body)}}}
	}
	// Each case is a record whose padding (a string of the handler's
	// item, or of the last message when there is no item) is chosen so
	// that the completion's count is exactly at the limit it names.
	// The record's item with the messages on it, as the completion counts it.
	itemSize := func(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL) int {
		return s.itemSize(rec) + s.messagesSize(msgs)
	}
	cases := []struct {
		name   string
		item   bool
		staged func(pad string) []any
		limit  int
		size   func(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL) int // what the completion counts against limit
	}{
		{"item and messages", true, func(string) []any { return []any{message("a"), message("b")} }, awsrules.MaxItemBytes, itemSize},
		{"messages and no item", false, func(pad string) []any { return []any{message("a"), message(pad)} }, awsrules.MaxItemBytes, itemSize},
		{"item, writes and messages", true, func(string) []any { return []any{put("w0"), message("a"), put("w1")} }, awsrules.MaxItemBytes, itemSize},
		// A put writes its item whole, within the same 400 KB as the
		// record's: at the limit it is staged, a byte past it refused.
		{"a staged put at the item's size", false, func(pad string) []any { return []any{put(pad)} }, awsrules.MaxItemBytes,
			func(rec lambdakit.IdempotencyRecord, _ *types.AttributeValueMemberL) int {
				return ItemSize(rec.Staged[0].(types.TransactWriteItem).Put.Item)
			}},
		{"messages and writes at the transaction's size", false, func(pad string) []any {
			var ops []any
			for range 10 {
				ops = append(ops, put(strings.Repeat("w", 390<<10)))
			}
			return append(ops, message("a"), message(pad))
		}, awsrules.MaxTransactionBytes, func(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL) int {
			n := itemSize(rec, msgs)
			for _, op := range rec.Staged {
				n += WriteSize(op.(types.TransactWriteItem))
			}
			return n
		}},
	}
	for _, c := range cases {
		build := func(pad int) lambdakit.IdempotencyRecord {
			rec := lambdakit.IdempotencyRecord{ID: "payment#1", Lease: "lease", Validation: "v", Effect: strings.Repeat("e", lambdakit.MaxEffectBytes)}
			padding := strings.Repeat("p", pad)
			if c.item {
				rec.Item = map[string]types.AttributeValue{"status_text": str(padding)}
			}
			rec.Staged = c.staged(padding)
			return rec
		}
		// The padding that puts the completion's count at the limit.
		pad := c.limit - c.size(s.onRecord(build(0)))
		if pad < 0 {
			t.Fatalf("%s: the record is %d bytes over its limit without padding", c.name, -pad)
		}
		for _, over := range []int{0, 1} {
			rec := build(pad + over)
			completed, msgs := s.onRecord(rec)
			if got := c.size(completed, msgs); got != c.limit+over {
				t.Fatalf("%s: the completion counts %d bytes; want %d", c.name, got, c.limit+over)
			}
			declared := rec
			declared.Effect = "charge ch_1" // so far
			atPublish := s.CheckStaging(declared)
			atCompletion := s.checkTransaction(completed, s.messagesSize(msgs))
			if (atPublish == nil) != (atCompletion == nil) || (over == 1) != errors.Is(atPublish, lambdakit.ErrStagedTooLarge) {
				t.Errorf("%s, %d byte(s) past the limit: CheckStaging says %v; the completion's check %v", c.name, over, atPublish, atCompletion)
			}
		}
	}
}

// The staging check counts the item and the messages on the record in
// the pass that checks them (checkedItem, checkMap): its count must be
// ItemSize's and mapSize's, which the completion's own check uses, for
// every kind of value, nested or not, and for names and strings that are
// not ASCII.
func TestCheckedSizesAreTheSizesTheCompletionCounts(t *testing.T) {
	s, err := New(dynamodb.New(dynamodb.Options{}), "records")
	if err != nil {
		t.Fatal(err)
	}
	leaves := map[string]types.AttributeValue{
		"s":     str("héllo"),
		"empty": str(""),
		"n":     &types.AttributeValueMemberN{Value: "-12.5e3"},
		"b":     &types.AttributeValueMemberB{Value: []byte{0, 1, 2}},
		"ss":    &types.AttributeValueMemberSS{Value: []string{"a", "bé", "ccc"}},
		"ns":    &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":    &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2, 3}}},
		"bool":  &types.AttributeValueMemberBOOL{Value: true},
		"null":  &types.AttributeValueMemberNULL{Value: true},
		"ünï":   str("x"),
	}
	nested := map[string]types.AttributeValue{
		"list": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			str("a"), &types.AttributeValueMemberM{Value: leaves}, &types.AttributeValueMemberL{},
		}},
		"map":      &types.AttributeValueMemberM{Value: leaves},
		"emptyMap": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}},
	}
	for name, item := range map[string]map[string]types.AttributeValue{"leaves": leaves, "nested": nested} {
		got, err := s.checkedItem(item)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := ItemSize(item); got != want {
			t.Errorf("%s: checkedItem counts %d bytes; ItemSize %d", name, got, want)
		}
		got, err = checkMap(item, 2)
		if err != nil {
			t.Fatalf("%s: checkMap: %v", name, err)
		}
		if want := mapSize(item); got != want {
			t.Errorf("%s: checkMap counts %d bytes; mapSize %d", name, got, want)
		}
	}
}
