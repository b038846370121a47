package dynamostore

import (
	"bytes"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/internal/storedtime"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// itemSlack is room for what checkStorable cannot see: the validation hash
// that Acquire stored when Complete does not restate it, and attributes
// that other writers of a shared table may have added.
const itemSlack = 1024

// maxNumberSize is the most a number attribute's value counts towards the
// item size: DynamoDB counts about one byte per two significant digits
// plus one, and numbers have at most 38 digits.
const maxNumberSize = 21

// checkStorable tells, before anything is sent, whether rec's result can
// be kept: DynamoDB strings must be UTF-8, and an item, or a transaction
// with staged writes, that is too large would fail the whole completion
// rather than just its cached result.
func (s *Store) checkStorable(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL) error {
	if len(rec.Data) == 0 {
		// An item too large fails the completion all the same, as one
		// no retry changes (ValidationException): only a result can be
		// dropped to make it fit.
		return nil
	}
	if !utf8.Valid(rec.Data) {
		return fmt.Errorf("result is not UTF-8 text: %w", lambdakit.ErrResultNotStorable)
	}
	if rec.Checked && rec.Failure == "" && len(rec.Data)+len(rec.Effect) <= lambdakit.MaxEffectBytes {
		// CheckStaging passed this item and these writes with room for
		// an effect of MaxEffectBytes beside them (the data attribute's
		// name counted): the effect and a result that fit in that room
		// fit the item and the transaction too, without counting again
		// (unless the completion is refused: see recount).
		return nil
	}
	item := s.itemSize(rec) + s.messagesSize(msgs)
	if item > awsrules.MaxItemBytes {
		return fmt.Errorf("result of %d bytes makes the record about %d bytes, over DynamoDB's %d-byte item limit: %w",
			len(rec.Data), item, awsrules.MaxItemBytes, lambdakit.ErrResultNotStorable)
	}
	// CheckStaging kept the staged writes and the record, without its
	// result, within a transaction's 4 MB: past it, the result is to blame.
	if size := item + stagedSize(rec.Staged); size > awsrules.MaxTransactionBytes {
		return fmt.Errorf("result of %d bytes makes the record and %d staged writes about %d bytes, over the %d of a DynamoDB transaction: %w",
			len(rec.Data), len(rec.Staged), size, awsrules.MaxTransactionBytes, lambdakit.ErrResultNotStorable)
	}
	return nil
}

// itemSize is an upper bound on the size DynamoDB counts for rec's item
// once completed: for each attribute, the UTF-8 length of its name plus
// that of a string value, or maxNumberSize for a number.
func (s *Store) itemSize(rec lambdakit.IdempotencyRecord) int {
	status := max(len(lambdakit.StatusCompleted), len(lambdakit.StatusInProgress))
	n := textSize(s.o.KeyAttr) + len(rec.ID) +
		textSize(s.o.SortKeyAttr) + textSize(s.o.StaticPartitionKey) +
		len(s.o.StatusAttr) + status +
		len(s.o.ExpirationAttr) + maxNumberSize +
		len(s.o.InProgressExpirationAttr) + maxNumberSize +
		len(s.o.LeaseAttr) + len(rec.Lease) +
		len(s.o.DataAttr) + len(rec.Data) +
		itemSlack
	if rec.Validation != "" {
		n += len(s.o.ValidationAttr) + len(rec.Validation)
	}
	if rec.Failure != "" {
		n += len(s.o.FailureAttr) + len(rec.Failure)
	}
	if rec.Effect != "" {
		n += len(s.o.EffectAttr) + len(rec.Effect)
	}
	if attrs, ok := rec.Item.(map[string]types.AttributeValue); ok {
		n += ItemSize(attrs)
	}
	return n
}

// mapSize is valueSize of a map value.
func mapSize(m map[string]types.AttributeValue) int {
	n := 3
	for name, e := range m {
		n += 1 + textSize(name) + valueSize(e)
	}
	return n
}

// ItemSize is an upper bound on the size DynamoDB counts for item, the
// size that bills its writes (one write unit per 1 KB started, of the
// larger of the item before and after a write) and that may not pass
// 400 KB: each attribute's name and value, strings and binaries by their
// bytes, a number as 21 bytes (its most), a list or map as 3 bytes plus 1
// per element.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += textSize(name) + valueSize(v)
	}
	return n
}

// valueSize is an upper bound on the size DynamoDB counts for one
// attribute value: strings by textSize, binaries by length, numbers at most
// maxNumberSize, lists and maps 3 bytes plus 1 per element plus the
// elements, sets the sum of their elements.
func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return textSize(v.Value)
	case *types.AttributeValueMemberN:
		return maxNumberSize
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += textSize(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		return maxNumberSize * len(v.Value)
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		return mapSize(v.Value)
	default: // BOOL, NULL
		return 1
	}
}

// decode reads a record item. Attributes that are absent leave their field
// zero; attributes of the wrong type are an error, because guessing could
// hand a duplicate someone else's result.
func (s *Store) decode(item map[string]types.AttributeValue) (lambdakit.IdempotencyRecord, error) {
	d := decoder{item: item}
	rec := lambdakit.IdempotencyRecord{
		ID:         d.str(s.o.IDAttr()),
		Status:     lambdakit.IdempotencyStatus(d.str(s.o.StatusAttr)),
		Validation: d.str(s.o.ValidationAttr),
		Lease:      d.str(s.o.LeaseAttr),
		Failure:    d.str(s.o.FailureAttr),
		Effect:     d.str(s.o.EffectAttr),
	}
	if sec, ok := d.num(s.o.ExpirationAttr); ok {
		rec.Expiration = storedtime.Unix(sec)
	}
	if ms, ok := d.num(s.o.InProgressExpirationAttr); ok {
		rec.InProgressExpiration = time.UnixMilli(ms)
	}
	switch v := item[s.o.DataAttr].(type) {
	case nil:
	case *types.AttributeValueMemberS:
		if v.Value != "" { // empty is no result, as in the memory store
			rec.Data = []byte(v.Value)
		}
	case *types.AttributeValueMemberB:
		// Not what this package writes, but a port that stores bytes
		// means the same thing by it.
		if len(v.Value) > 0 {
			rec.Data = bytes.Clone(v.Value)
		}
	default:
		d.fail(s.o.DataAttr, v, "a string")
	}
	return rec, d.err
}

// decoder reads attributes of one item and keeps the first error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(name string, v types.AttributeValue, want string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %q is a %T; want %s", name, v, want)
	}
}

func (d *decoder) str(name string) string {
	switch v := d.item[name].(type) {
	case nil:
		return ""
	case *types.AttributeValueMemberS:
		return v.Value
	default:
		d.fail(name, v, "a string")
		return ""
	}
}

func (d *decoder) num(name string) (int64, bool) {
	switch v := d.item[name].(type) {
	case nil:
		return 0, false
	case *types.AttributeValueMemberN:
		// Other runtimes might write a fraction, or a number past any
		// date for "never": read as DynamoDB's condition compares them
		// with a whole :now.
		if n, ok := storedtime.Decimal(v.Value); ok {
			return n, true
		}
		d.fail(name, v, "an integer")
		return 0, false
	default:
		d.fail(name, v, "a number")
		return 0, false
	}
}

// textSize is the size of s in DynamoDB, which counts strings in UTF-8:
// s as the SDK sends it, with each byte that is not UTF-8 turned into
// U+FFFD, three bytes.
func textSize(s string) int {
	if utf8.ValidString(s) {
		return len(s)
	}
	n := 0
	for off := 0; off < len(s); {
		r, w := utf8.DecodeRuneInString(s[off:])
		off += w
		if r == utf8.RuneError && w == 1 {
			w = utf8.RuneLen(utf8.RuneError)
		}
		n += w
	}
	return n
}
