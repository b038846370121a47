package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

var (
	_ lambdakit.ItemStore = (*Store)(nil)
	_ lambdakit.Committer = (*Store)(nil)
)

// SetItem declares the attributes of the item the handler produces, to be
// written onto its idempotency record's own item, in the Store's table, by
// the completion: one UpdateItem with the record (one TransactWriteItems
// with staged writes besides), or with lambdakit.Options.StagedOnly the
// PutItem that creates the record. It is lambdakit.SetItem with the type
// Store writes; see there for when it fails.
//
// The record's own attributes (its key, status, expiration,
// in-progress expiration, validation, data, lease, failure and effect, as
// Options names them) are refused with lambdakit.ErrInvalidItem, and so
// is an item too large for the record's item, whose 400 KB hold the
// record's own attributes, the messages on the record, and room for the
// largest effect lambdakit.EffectDone keeps (lambdakit.MaxEffectBytes),
// which the handler may declare after SetItem. Under
// 1 KB with the record's attributes (about 150 bytes, plus the result),
// each write of the item costs one write unit.
func SetItem(ctx context.Context, attrs map[string]types.AttributeValue) error {
	return lambdakit.SetItem(ctx, attrs)
}

// CheckItem implements lambdakit.ItemStore: item must be a non-empty
// map[string]types.AttributeValue (see SetItem) whose names (and nested
// map keys) are UTF-8, neither empty nor those of the record's
// attributes, and whose values are set.
func (s *Store) CheckItem(item any) error {
	_, err := s.checkedItem(item)
	return err
}

// checkedItem is CheckItem's check of item, which also returns the item's
// size (ItemSize): CheckStaging needs both, and takes them from one pass
// over the item.
func (s *Store) checkedItem(item any) (size int, err error) {
	attrs, ok := item.(map[string]types.AttributeValue)
	if !ok {
		return 0, fmt.Errorf("%w: dynamostore writes an item of type map[string]types.AttributeValue (dynamostore.SetItem), got %T", lambdakit.ErrInvalidItem, item)
	}
	if len(attrs) == 0 {
		return 0, fmt.Errorf("%w: the item has no attributes", lambdakit.ErrInvalidItem)
	}
	for name, v := range attrs {
		if slices.Contains(s.own, name) {
			return 0, fmt.Errorf("%w: attribute %q is the idempotency record's own; name it otherwise (or rename the record's with dynamostore.Options)", lambdakit.ErrInvalidItem, name)
		}
		n, err := checkAttribute(name, v)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", lambdakit.ErrInvalidItem, err)
		}
		size += n
	}
	// The completion names every attribute in its UpdateExpression, which
	// DynamoDB caps at 4 KB: a wider item would be refused after the work.
	if n := completionExprLen(len(attrs)); n > awsrules.MaxExpressionBytes {
		return 0, fmt.Errorf("%w: %d attributes make the completion's update expression about %d bytes, over DynamoDB's %d; nest some in a map",
			lambdakit.ErrInvalidItem, len(attrs), n, awsrules.MaxExpressionBytes)
	}
	return size, nil
}

// completionExprLen bounds the length of the completion's UpdateExpression
// (Store.completion) for an item of n attributes: the record's own clauses
// at their longest, then ", #iK = :iK" for each attribute.
func completionExprLen(n int) int {
	size := len("SET #status = :completed, #exp = :exp, #failure = :failure, #effect = :effect, #data = :data, #messages = :messages REMOVE #exp, #data")
	for i := range n {
		digits := len(strconv.Itoa(i))
		size += len(", #i = :i") + 2*digits
	}
	return size
}

// checkAttribute refuses an attribute DynamoDB refuses: an empty name, one
// of 64 KB or more, one that is not UTF-8, a value checkValue refuses. It
// returns the attribute's size, its name's and its value's (ItemSize).
func checkAttribute(name string, v types.AttributeValue) (size int, err error) {
	switch {
	case name == "":
		return 0, errors.New("an attribute with an empty name")
	case len(name) > awsrules.MaxAttributeNameBytes:
		return 0, fmt.Errorf("an attribute name of %d bytes, over DynamoDB's %d", len(name), awsrules.MaxAttributeNameBytes)
	case !utf8.ValidString(name):
		return 0, fmt.Errorf("attribute %q: %w", name, errNameNotUTF8)
	}
	n, err := checkValue(v, 1)
	if err != nil {
		return 0, fmt.Errorf("attribute %q: %w", name, err)
	}
	return len(name) + n, nil // a UTF-8 name's textSize is its length
}

// maxNesting is how deep DynamoDB nests values: 32 levels, the item's
// attribute the first ("Nested attribute depth", DynamoDB's quotas). So
// a list or map may stand at level 31 at most, with its elements at the
// 32nd: 31 maps one inside the other around a string are taken, 32 are
// refused ("Nesting Levels have exceeded supported limits").
const maxNesting = 32

// errTooDeep refuses a list or map at the 32nd level or below it.
var errTooDeep = fmt.Errorf("a list or map nested past DynamoDB's %d levels (the attribute is the first)", maxNesting)

// errNilBinary refuses a binary that is nil, the zero
// AttributeValueMemberB or a nil member of a binary set: the SDK sends it
// as a JSON null, which DynamoDB reads as no value at all ("Supplied
// AttributeValue is empty"), or as a null in a set, which holds none. An
// empty binary that is not nil ([]byte{}) is sent as "" and taken.
var errNilBinary = errors.New("a binary whose Value is nil (an empty one is []byte{})")

// errNameNotUTF8 refuses a name that is not UTF-8: the SDK sends each
// byte that is not as U+FFFD, so that two such names are one in DynamoDB,
// and none is the name the handler gave.
var errNameNotUTF8 = errors.New("the name is not UTF-8")

// checkValue refuses what DynamoDB refuses in an item, so that SetItem
// says so before the work rather than the completion after it: no value
// (here or nested), a NULL that is not true, a nil binary (errNilBinary),
// an empty or repeating set, a number DynamoDB cannot hold
// (awsrules.CheckNumber), a list or map nested too deep (v stands at
// level, the item's attribute being 1). It returns v's size (valueSize),
// counted on the way.
// A string that is not UTF-8 is not refused: the SDK's JSON encoder sends
// each invalid byte as U+FFFD, which DynamoDB takes.
func checkValue(v types.AttributeValue, level int) (size int, err error) {
	if rv := reflect.ValueOf(v); v == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		// A nil member (a *types.AttributeValueMemberS that is nil,
		// say) would panic in the SDK's encoder, after the work.
		return 0, errors.New("no value")
	}
	switch v := v.(type) {
	case *types.AttributeValueMemberS, *types.AttributeValueMemberBOOL:
	case *types.AttributeValueMemberB:
		if v.Value == nil {
			return 0, errNilBinary
		}
	case *types.AttributeValueMemberN:
		err = awsrules.CheckNumber(v.Value)
	case *types.AttributeValueMemberNULL:
		if !v.Value {
			// The zero AttributeValueMemberNULL: DynamoDB takes a null
			// only as NULL: true.
			return 0, errors.New("a NULL whose Value is false (a null is NULL: true)")
		}
	case *types.AttributeValueMemberSS:
		err = checkSet(v.Value)
	case *types.AttributeValueMemberNS:
		err = awsrules.CheckNumberSet(v.Value)
	case *types.AttributeValueMemberBS:
		seen := map[string]bool{}
		for _, e := range v.Value {
			if e == nil {
				return 0, fmt.Errorf("a binary set member: %w", errNilBinary)
			}
			seen[string(e)] = true
		}
		if len(v.Value) == 0 || len(seen) != len(v.Value) {
			return 0, errors.New("a binary set that is empty or repeats a member")
		}
	case *types.AttributeValueMemberL:
		if level >= maxNesting {
			return 0, errTooDeep
		}
		size = 3 // as valueSize counts a list
		for i, e := range v.Value {
			n, err := checkValue(e, level+1)
			if err != nil {
				return 0, fmt.Errorf("element %d: %w", i, err)
			}
			size += 1 + n
		}
		return size, nil
	case *types.AttributeValueMemberM:
		return checkMap(v.Value, level)
	default:
		// types.UnknownUnionMember, or a type of the caller's: nothing
		// the SDK can send.
		return 0, fmt.Errorf("a %T, which is no DynamoDB value", v)
	}
	if err != nil {
		return 0, err
	}
	return valueSize(v), nil
}

// checkMap is checkValue of a map value at level.
func checkMap(m map[string]types.AttributeValue, level int) (size int, err error) {
	if level >= maxNesting {
		return 0, errTooDeep
	}
	size = 3 // as mapSize counts a map
	for k, e := range m {
		if !utf8.ValidString(k) {
			return 0, fmt.Errorf("key %q: %w", k, errNameNotUTF8)
		}
		n, err := checkValue(e, level+1)
		if err != nil {
			return 0, fmt.Errorf("key %q: %w", k, err)
		}
		size += 1 + len(k) + n // a UTF-8 key's textSize is its length
	}
	return size, nil
}

func checkSet(members []string) error {
	if len(members) == 0 {
		return errors.New("an empty set")
	}
	seen := make(map[string]bool, len(members))
	for _, m := range members {
		if seen[m] {
			return fmt.Errorf("a set that repeats %q", m)
		}
		seen[m] = true
	}
	return nil
}

// Commit implements lambdakit.Committer, for lambdakit.Options.StagedOnly:
// it creates rec, completed, with its item (SetItem), in one conditional
// PutItem, or with staged writes in one TransactWriteItems that holds the
// record's put first and the staged writes after it. The condition is
// Acquire's: no live record holds rec.ID. When one does, DynamoDB returns
// it with the failed condition (in the transaction's first cancellation
// reason), nothing is written, and Commit returns it.
//
// It sends nothing, and returns an error wrapping
// lambdakit.ErrResultNotStorable, when rec.Data cannot be kept (see
// Complete); a staged write DynamoDB refuses fails the whole transaction
// with a *StagedWriteError, as in Complete.
func (s *Store) Commit(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if err := s.checkItem(rec); err != nil {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: commit %s: %w", rec.ID, err)
	}
	rec, msgs := s.onRecord(rec)
	if err := s.checkStorable(rec, msgs); err != nil {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: commit %s: %w", rec.ID, err)
	}
	rec = rec.Rounded()
	rec.Status = lambdakit.StatusCompleted
	put := s.creation(rec, now, msgs)
	if len(rec.Staged) > 0 {
		failed, err := s.transact(ctx, rec, msgs, types.TransactWriteItem{Put: &put})
		if err != nil {
			return lambdakit.IdempotencyRecord{}, false, err
		}
		if failed == nil {
			return lambdakit.IdempotencyRecord{}, true, nil
		}
		return s.committed(rec.ID, failed.Item)
	}
	_, err := s.client.PutItem(ctx, putInput(&put))
	if err == nil {
		return lambdakit.IdempotencyRecord{}, true, nil
	}
	var failed *types.ConditionalCheckFailedException // on the heap (errors.As): only for a failure
	switch {
	case errors.As(err, &failed):
		return s.committed(rec.ID, failed.Item)
	case invalid(err):
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: commit %s: %w: %w", rec.ID, lambdakit.ErrCompletionRejected, err)
	default:
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: commit %s: %w", rec.ID, err)
	}
}

// committed is Commit's answer when a live record, item, held the key.
func (s *Store) committed(id string, item map[string]types.AttributeValue) (lambdakit.IdempotencyRecord, bool, error) {
	existing, err := s.holder(id, item)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: commit %s: %w", id, err)
	}
	return existing, false, nil
}

// checkItem checks rec's item, if any, as SetItem did: a completion
// handed one that SetItem did not check fails without writing anything,
// as a completion no retry can change (lambdakit.ErrStagingUnsupported).
func (s *Store) checkItem(rec lambdakit.IdempotencyRecord) error {
	if rec.Item == nil {
		return nil
	}
	if err := s.CheckItem(rec.Item); err != nil {
		return fmt.Errorf("%w: %w", lambdakit.ErrStagingUnsupported, err)
	}
	return nil
}
