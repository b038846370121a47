package dynamostore

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// RecordMessage is a message staged (lambdakit.Stage) to ride on the
// record's own write: the completion writes the messages staged this way,
// in the order staged, as the list attribute Options.MessagesAttr of the
// record's item, in the one request that completes the record (the
// UpdateItem, or under lambdakit.Options.StagedOnly the PutItem). They
// are no write of their own: they count toward the record's item, whose
// 400 KB CheckStaging checks, not toward a transaction. What a message
// holds is its publisher's (outbox.PublishOnRecord stages them, and the
// outbox relay sends them from the table's stream).
type RecordMessage map[string]types.AttributeValue

// onRecord returns rec with the messages it stages (RecordMessage) taken
// out of its staged writes, and those messages, as the list attribute
// MessagesAttr that the completion writes on the record's item (nil when
// there are none). They are kept apart from rec.Item, the handler's map,
// rather than added to a copy of it: this runs for every record. A
// completion never appends to messages already on the item: the record it
// completes was written whole by the lock (Acquire's PutItem), without
// messages, or is written whole by Commit's PutItem; so a record kept
// forever holds the messages of its last completion only.
func (s *Store) onRecord(rec lambdakit.IdempotencyRecord) (lambdakit.IdempotencyRecord, *types.AttributeValueMemberL) {
	msgs, writes := splitStaged(rec.Staged)
	rec.Staged = writes
	return rec, msgs
}

// messagesSize is what msgs, the messages on the record (nil for none),
// add to the record's item.
func (s *Store) messagesSize(msgs *types.AttributeValueMemberL) int {
	if msgs == nil {
		return 0
	}
	return textSize(s.o.MessagesAttr) + valueSize(msgs)
}

// splitStaged parts staged into the messages staged on the record
// (RecordMessage), as the list attribute the completion writes (nil when
// there are none), and the other writes, in order.
func splitStaged(staged []any) (msgs *types.AttributeValueMemberL, writes []any) {
	n := 0
	for _, op := range staged {
		if _, ok := op.(RecordMessage); ok {
			n++
		}
	}
	if n == 0 {
		return nil, staged
	}
	if n == 1 {
		// Most records carry one message: its list in one allocation.
		one := new(oneMessage)
		for _, op := range staged {
			if m, ok := op.(RecordMessage); ok {
				one.msg.Value = m
			}
		}
		one.elems[0] = &one.msg
		one.list.Value = one.elems[:]
		return &one.list, otherWrites(staged)
	}
	list := make([]types.AttributeValue, 0, n)
	for _, op := range staged {
		if m, ok := op.(RecordMessage); ok {
			list = append(list, &types.AttributeValueMemberM{Value: m})
		}
	}
	return &types.AttributeValueMemberL{Value: list}, otherWrites(staged)
}

// oneMessage is the list attribute of a record's one message, made whole.
type oneMessage struct {
	list  types.AttributeValueMemberL
	msg   types.AttributeValueMemberM
	elems [1]types.AttributeValue
}

// otherWrites is staged without the messages staged on the record, in
// order: the writes of the completion's transaction.
func otherWrites(staged []any) (writes []any) {
	for _, op := range staged {
		if _, ok := op.(RecordMessage); !ok {
			writes = append(writes, op)
		}
	}
	return writes
}
