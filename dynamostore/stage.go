package dynamostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// WriteSize is an upper bound on what w adds to its transaction's
// aggregate size, as far as can be known before it is sent: a Put's item;
// for an Update, a Delete or a ConditionCheck, its key and expression
// values (the stored item it reads or changes is not known here).
func WriteSize(w types.TransactWriteItem) int {
	n := 0
	add := func(attrs map[string]types.AttributeValue) { n += ItemSize(attrs) }
	switch {
	case w.Put != nil:
		add(w.Put.Item)
	case w.Update != nil:
		add(w.Update.Key)
		add(w.Update.ExpressionAttributeValues)
	case w.Delete != nil:
		add(w.Delete.Key)
	case w.ConditionCheck != nil:
		add(w.ConditionCheck.Key)
	}
	return n
}

// stagedSize is what the staged writes (types.TransactWriteItem) add to
// their transaction's size, by WriteSize.
func stagedSize(staged []any) int {
	n := 0
	for _, op := range staged {
		if w, ok := op.(types.TransactWriteItem); ok {
			n += WriteSize(w)
		}
	}
	return n
}

// CheckStaging implements lambdakit.StagingChecker: it refuses, with an
// error wrapping lambdakit.ErrStagedTooLarge, an item and staged writes
// that would make rec's completion break one of DynamoDB's limits: 100
// writes in a transaction (the completion among them; this also wraps
// lambdakit.ErrStagingUnsupported), 4 MB in a transaction's items, 400 KB
// in the record's item with the handler's and the messages staged on it
// (RecordMessage), and 400 KB in the item of a staged put. The record's
// item is counted with the largest effect lambdakit.EffectDone keeps
// (lambdakit.MaxEffectBytes), which the handler may declare after this
// check. The record's result is not known yet and not counted: a result
// too large is dropped, not refused (see Complete).
//
// It also refuses, with an error wrapping lambdakit.ErrInvalidItem, an
// item CheckItem refuses (SetItem leaves that check to this one), and a
// staged write whose values DynamoDB refuses, by the rules of SetItem
// (see CheckItem): the values of a Put's item, an Update's expression
// values, and the keys of each write; a write that does not hold exactly
// one action, or lacks a field the SDK requires of it (a TableName, an
// Update's UpdateExpression, say); a key no table takes (not one or two
// attributes, or a value that is not a string, number or binary of 1 to
// 2048 bytes); and, with one wrapping
// lambdakit.ErrStagingUnsupported, a staged op that is neither a
// types.TransactWriteItem nor a RecordMessage, which the completion
// cannot send.
func (s *Store) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	// What the completion writes (onRecord), without building its item:
	// this runs at each SetItem, Stage and Publish.
	onItem, writes, err := s.stagedOnRecord(rec.Staged) // what the messages add to the record's item
	if err != nil {
		return fmt.Errorf("%w: messages on the record: %w", lambdakit.ErrInvalidItem, err)
	}
	rec.Staged = writes
	for i, op := range rec.Staged {
		w, ok := op.(types.TransactWriteItem)
		if !ok {
			// The completion could not send it, on any run.
			return fmt.Errorf("%w: staged write %d is a %T, not a types.TransactWriteItem (use dynamostore.Stage) or a dynamostore.RecordMessage",
				lambdakit.ErrStagingUnsupported, i, op)
		}
		if err := checkWrite(w); err != nil {
			return fmt.Errorf("%w: staged write %d (%s): %w", lambdakit.ErrInvalidItem, i, describe(w), err)
		}
	}
	// The handler's item is checked as CheckItem checks it, which SetItem
	// leaves to this check (lambdakit.StagingChecker), and counted in the
	// same pass.
	if rec.Item != nil {
		size, err := s.checkedItem(rec.Item)
		if err != nil {
			return err
		}
		rec.Item = nil
		onItem += size
	}
	// EffectDone may add to the record's item after this check, which is
	// the last before the completion: count the largest effect it keeps in
	// place of the one declared so far.
	rec.Effect = ""
	onItem += len(s.o.EffectAttr) + lambdakit.MaxEffectBytes
	return s.checkTransaction(rec, onItem)
}

// stagedOnRecord checks the messages staged on the record (RecordMessage)
// as the attribute onRecord makes of them, and returns what that attribute
// adds to the record's item (messagesSize), and the other staged writes,
// without building it: this runs at each SetItem, Stage and Publish.
func (s *Store) stagedOnRecord(staged []any) (onItem int, writes []any, err error) {
	list, n := 3, 0 // valueSize of the list, and its elements
	for _, op := range staged {
		m, ok := op.(RecordMessage)
		if !ok {
			continue
		}
		size, err := checkMap(m, 2) // an element of the list attribute
		if err != nil {
			return 0, nil, fmt.Errorf("attribute %q: element %d: %w", s.o.MessagesAttr, n, err)
		}
		list += 1 + size
		n++
	}
	if n == 0 {
		return 0, staged, nil
	}
	return textSize(s.o.MessagesAttr) + list, otherWrites(staged), nil
}

// checkWrite refuses a write the completion's TransactWriteItems cannot
// carry: one without exactly one action (DynamoDB takes one of Put,
// Update, Delete and ConditionCheck in each), one missing a field the SDK
// requires of its action (it refuses the whole request, client-side), a
// key checkKey refuses, or attributes CheckItem would refuse.
func checkWrite(w types.TransactWriteItem) error {
	var (
		actions int
		table   *string
		key     map[string]types.AttributeValue // none for a Put
		item    map[string]types.AttributeValue // a Put's
		values  map[string]types.AttributeValue // the expression's
		missing string                          // the first field the SDK requires that is not set
	)
	need := func(field string, set bool) {
		if !set && missing == "" {
			missing = field
		}
	}
	if p := w.Put; p != nil {
		actions++
		table, item, values = p.TableName, p.Item, p.ExpressionAttributeValues
		need("Item", p.Item != nil)
	}
	if u := w.Update; u != nil {
		actions++
		table, key, values = u.TableName, u.Key, u.ExpressionAttributeValues
		need("UpdateExpression", u.UpdateExpression != nil)
	}
	if d := w.Delete; d != nil {
		actions++
		table, key, values = d.TableName, d.Key, d.ExpressionAttributeValues
	}
	if c := w.ConditionCheck; c != nil {
		actions++
		table, key, values = c.TableName, c.Key, c.ExpressionAttributeValues
		need("ConditionExpression", c.ConditionExpression != nil)
	}
	if actions != 1 {
		return fmt.Errorf("%d actions; a write holds one Put, Update, Delete or ConditionCheck", actions)
	}
	need("TableName", table != nil)
	need("Key", w.Put != nil || key != nil)
	if missing != "" {
		return fmt.Errorf("no %s, which the SDK requires", missing)
	}
	for _, m := range [...]map[string]types.AttributeValue{item, values, key} {
		for name, v := range m {
			if _, err := checkAttribute(name, v); err != nil {
				return err
			}
		}
	}
	if w.Put == nil {
		return checkWriteKey(key)
	}
	return nil
}

// checkWriteKey refuses a key DynamoDB refuses whatever the table's schema: one
// of no attribute or more than two (a partition key, and a sort key or
// none), a value that is not a string, number or binary (the types of key
// attributes), an empty string or binary, or one longer than a partition
// key's awsrules.MaxPartitionKeyBytes (which attribute is a sort key, of
// at most awsrules.MaxSortKeyBytes, the table alone says). Its values are
// otherwise checked as an item's are.
func checkWriteKey(key map[string]types.AttributeValue) error {
	if len(key) == 0 || len(key) > 2 {
		return fmt.Errorf("a key of %d attributes; a key has one or two", len(key))
	}
	for name, v := range key {
		n := 0
		switch v := v.(type) {
		case *types.AttributeValueMemberN:
			continue
		case *types.AttributeValueMemberS:
			n = len(v.Value)
		case *types.AttributeValueMemberB:
			n = len(v.Value)
		default:
			return fmt.Errorf("key attribute %q is a %T; a key is a string, number or binary", name, v)
		}
		if n == 0 || n > awsrules.MaxPartitionKeyBytes {
			return fmt.Errorf("key attribute %q is %d bytes long; a key value is from 1 to %d", name, n, awsrules.MaxPartitionKeyBytes)
		}
	}
	return nil
}

// checkTransaction is CheckStaging, and the check of the completion
// itself, with its result: DynamoDB's transaction and item limits. onItem
// is what rec's item holds besides rec.Item: the messages on the record
// (messagesSize), which rec.Item never holds; for CheckStaging, also the
// item it counted itself (rec.Item then nil) and the room for an effect.
func (s *Store) checkTransaction(rec lambdakit.IdempotencyRecord, onItem int) error {
	if n := 1 + len(rec.Staged); n > awsrules.MaxTransactionItems {
		return fmt.Errorf("%w: %w: %d staged writes and the record exceed the %d writes of a DynamoDB transaction",
			lambdakit.ErrStagedTooLarge, lambdakit.ErrStagingUnsupported, len(rec.Staged), awsrules.MaxTransactionItems)
	}
	staged := 0 // what the staged writes add to the transaction (stagedSize)
	for i, op := range rec.Staged {
		w, ok := op.(types.TransactWriteItem)
		if !ok {
			continue
		}
		n := WriteSize(w) // for a put, its item's size
		// A put writes its item whole: one over DynamoDB's item limit
		// fails the transaction on every try, so it is refused here,
		// before the work, rather than by DynamoDB after it. (What an
		// update makes of an item depends on what the table holds:
		// DynamoDB alone can tell.)
		if w.Put != nil && n > awsrules.MaxItemBytes {
			return fmt.Errorf("%w: staged write %d (%s) puts an item of about %d bytes, over DynamoDB's %d-byte item limit",
				lambdakit.ErrStagedTooLarge, i, describe(w), n, awsrules.MaxItemBytes)
		}
		staged += n
	}
	item := s.itemSize(rec) + onItem
	if (rec.Item != nil || onItem > 0) && item > awsrules.MaxItemBytes {
		return fmt.Errorf("%w: the record's item with the handler's is about %d bytes, over DynamoDB's %d-byte item limit",
			lambdakit.ErrStagedTooLarge, item, awsrules.MaxItemBytes)
	}
	if size := item + staged; size > awsrules.MaxTransactionBytes {
		return fmt.Errorf("%w: the record and %d staged writes make about %d bytes, over the %d of a DynamoDB transaction",
			lambdakit.ErrStagedTooLarge, len(rec.Staged), size, awsrules.MaxTransactionBytes)
	}
	return nil
}

// Stage stages DynamoDB writes to be committed in one transaction with the
// completion of the current idempotency record (single-phase mode): either
// the record is completed and every write is applied, or nothing is. It is
// lambdakit.Stage with the type that Store accepts; it returns
// lambdakit.ErrNotStaging outside a handler run by lambdakit's idempotency
// middleware.
//
// A transaction holds at most 100 writes, the completion among them, and
// 4 MB, and may not touch the same item twice: Stage refuses writes past
// the first two limits, and writes the SDK or DynamoDB refuses for their
// shape, keys or values (see Store.CheckStaging), marked
// lambdakit.Permanent.
func Stage(ctx context.Context, items ...types.TransactWriteItem) error {
	ops := make([]any, len(items))
	for i, it := range items {
		ops[i] = it
	}
	return lambdakit.Stage(ctx, ops...)
}

// StagedWriteError is the error of a completion whose transaction DynamoDB
// cancelled because of a staged write (its own condition failed, say).
// Nothing was committed. When the reason is one no retry changes
// (ValidationError, ItemCollectionSizeLimitExceeded: the write itself is
// wrong) it also wraps lambdakit.ErrCompletionRejected: the engine then
// completes the record with the failure rather than run the work again.
// A staged condition that fails (ConditionalCheckFailed) is not one of
// them: it tests items other messages change (a version, a balance), and
// the handler, run again on the retry, may pass it. After an external
// effect, stage no write whose condition can fail.
type StagedWriteError struct {
	// ID is the record's ID.
	ID string
	// Index is the write's position among the staged writes.
	Index int
	// Write is the rejected write.
	Write types.TransactWriteItem
	// Code and Message are DynamoDB's reason, e.g. "ConditionalCheckFailed".
	Code, Message string
	// Err is the SDK's *types.TransactionCanceledException.
	Err error
}

// Error names the record, the write and DynamoDB's reason.
func (e *StagedWriteError) Error() string {
	msg := fmt.Sprintf("dynamostore: complete %s: staged write %d (%s) rejected: %s", e.ID, e.Index, describe(e.Write), e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Unwrap returns Err, and lambdakit.ErrCompletionRejected when the reason
// is one no retry changes.
func (e *StagedWriteError) Unwrap() []error {
	if permanentReason(e.Code) {
		return []error{lambdakit.ErrCompletionRejected, e.Err}
	}
	return []error{e.Err}
}

// permanentReason reports whether a transaction's cancellation reason for
// one write would come back on every retry. TransactionConflict, the
// throttling reasons and ConditionalCheckFailed (see StagedWriteError) may
// pass.
func permanentReason(code string) bool {
	switch code {
	case "ValidationError", "ItemCollectionSizeLimitExceeded":
		return true
	}
	return false
}

func (s *Store) completeStaged(ctx context.Context, rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL, update types.Update) error {
	// Fenced on the record being in progress too: a completion sent
	// again after one that landed but whose answer was lost is a new
	// transaction (a new ClientRequestToken), and must not commit the
	// staged writes a second time. The update is this call's own; only
	// its values map is written to, which completion made for it.
	fencedUpdate := update
	fencedUpdate.ConditionExpression = stagedConditionExp
	fencedUpdate.ExpressionAttributeValues[":inprogress"] = inProgressValue
	fencedUpdate.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	failed, err := s.transact(ctx, rec, msgs, types.TransactWriteItem{Update: &fencedUpdate})
	if failed != nil {
		if held, derr := s.decode(failed.Item); derr == nil && held.Status == lambdakit.StatusCompleted && held.Lease == rec.Lease {
			return nil // this completion landed earlier; its writes are committed
		}
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	}
	return err
}

// stagedConditionExp fences a completion with staged writes on the lease
// and on the record still being in progress.
var stagedConditionExp = aws.String(nLease + " = :lease AND " + nStatus + " = :inprogress")

// transact writes record, the write of rec's own item with msgs on it (the
// messages on the record, nil for none), and rec's staged writes, in one
// TransactWriteItems. When DynamoDB cancels it for
// record's condition, it returns that reason (with the item, when
// record asked for it), and no error: what that means is the caller's
// to say.
func (s *Store) transact(ctx context.Context, rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL, record types.TransactWriteItem) (failed *types.CancellationReason, err error) {
	// Over DynamoDB's limits, the transaction would be refused as it is
	// on every attempt: say so before sending it. The messages are on
	// the record's item, though not in rec.Item.
	if err := s.checkTransaction(rec, s.messagesSize(msgs)); err != nil {
		return nil, fmt.Errorf("dynamostore: complete %s: %w: %w", rec.ID, lambdakit.ErrCompletionRejected, err)
	}
	// The record goes first, so that its cancellation reason is always
	// the first one.
	items := make([]types.TransactWriteItem, 1, 1+len(rec.Staged))
	items[0] = record
	for i, op := range rec.Staged {
		w, ok := op.(types.TransactWriteItem)
		if !ok {
			return nil, fmt.Errorf("dynamostore: complete %s: staged write %d is a %T, not a types.TransactWriteItem (use dynamostore.Stage): %w",
				rec.ID, i, op, lambdakit.ErrStagingUnsupported)
		}
		items = append(items, w)
	}
	_, err = s.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil, nil
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		reasons := canceled.CancellationReasons
		if len(reasons) > 0 && aws.ToString(reasons[0].Code) == "ConditionalCheckFailed" {
			return &reasons[0], nil
		}
		if len(reasons) > 0 && permanentReason(aws.ToString(reasons[0].Code)) {
			return nil, rejectedErr(rec.ID, err)
		}
		// The write to report: one whose reason no retry changes, if
		// any (so that a conflict on another write cannot hide it),
		// else the first that was refused.
		pick := -1
		for i, r := range reasons {
			code := aws.ToString(r.Code)
			if i == 0 || i >= len(items) || code == "" || code == "None" {
				continue
			}
			if pick < 0 || permanentReason(code) && !permanentReason(aws.ToString(reasons[pick].Code)) {
				pick = i
			}
		}
		if pick > 0 {
			return nil, &StagedWriteError{
				ID:      rec.ID,
				Index:   pick - 1,
				Write:   items[pick],
				Code:    aws.ToString(reasons[pick].Code),
				Message: aws.ToString(reasons[pick].Message),
				Err:     err,
			}
		}
	}
	if invalid(err) {
		return nil, rejectedErr(rec.ID, err)
	}
	return nil, fmt.Errorf("dynamostore: complete %s: %w", rec.ID, err)
}

// describe names a write for an error message: its kind and table.
func describe(w types.TransactWriteItem) string {
	switch {
	case w.Put != nil:
		return "Put on " + aws.ToString(w.Put.TableName)
	case w.Update != nil:
		return "Update on " + aws.ToString(w.Update.TableName)
	case w.Delete != nil:
		return "Delete on " + aws.ToString(w.Delete.TableName)
	case w.ConditionCheck != nil:
		return "ConditionCheck on " + aws.ToString(w.ConditionCheck.TableName)
	default:
		return "empty write"
	}
}
