package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// API is the part of the DynamoDB client that Store uses.
// *dynamodb.Client satisfies it. An API of your own (a wrapper that
// traces, counts or injects faults) must leave the requests it is given
// as they are, as the SDK does: Store shares the constant parts of its
// requests (the table name, the expressions, the status values) between
// calls, so a change made through one request's pointers would change
// every later request. To send something else, build a new input.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// Options names the attributes of a record item. The defaults are the
// Powertools names; change them to share a table whose Powertools
// configuration renamed them. An empty name means the default.
type Options struct {
	// KeyAttr is the partition key, a string. Default "id". It holds the
	// record's ID, or with SortKeyAttr set, StaticPartitionKey.
	KeyAttr string
	// SortKeyAttr, if set, is the table's sort key, a string, and holds
	// the record's ID: Powertools' composite-key layout (its sort_key_attr,
	// sortKeyAttr), for a table that Go and Powertools functions share,
	// every record of the function under one partition key value,
	// StaticPartitionKey. Default "": a table with a partition key only.
	SortKeyAttr string
	// StaticPartitionKey is the value of KeyAttr on every record when
	// SortKeyAttr is set (Powertools' static_pk_value, staticPkValue).
	// Default, as Powertools': "idempotency#" and the function's name
	// (AWS_LAMBDA_FUNCTION_NAME). Set without SortKeyAttr, it is an
	// ErrInvalidConfig.
	StaticPartitionKey string
	// StatusAttr holds "INPROGRESS" or "COMPLETED". Default "status".
	StatusAttr string
	// ExpirationAttr is the table's TTL attribute, in epoch seconds.
	// Default "expiration".
	ExpirationAttr string
	// InProgressExpirationAttr is when the lease ends, in epoch
	// milliseconds. Default "in_progress_expiration".
	InProgressExpirationAttr string
	// ValidationAttr holds the payload hash. Default "validation".
	ValidationAttr string
	// DataAttr holds the cached result, a string. Default "data".
	DataAttr string
	// LeaseAttr holds the owner's lease token; Powertools does not have
	// it. Default "lease".
	LeaseAttr string
	// FailureAttr holds, on a record whose completion DynamoDB rejected
	// after the work was done, why (lambdakit.IdempotencyRecord.Failure);
	// Powertools does not have it. Default "failure".
	FailureAttr string
	// EffectAttr holds what the handler declared of its external effect
	// (lambdakit.EffectDone, lambdakit.IdempotencyRecord.Effect);
	// Powertools does not have it. Default "effect".
	EffectAttr string
	// MessagesAttr holds, on a completed record, the messages its
	// handler published on the record (RecordMessage,
	// outbox.PublishOnRecord), a list. Default "messages".
	MessagesAttr string
}

// ResolveOptions returns the Options optFns give, with an empty name
// replaced by its default, as New and CreateTable resolve them; it
// returns an error wrapping ErrInvalidConfig when two attributes share
// a name. A reader of the table's stream (the outbox relay) names the
// attributes with it.
func ResolveOptions(optFns ...func(*Options)) (Options, error) {
	return newOptions(optFns)
}

func newOptions(optFns []func(*Options)) (Options, error) {
	var o Options
	for _, fn := range optFns {
		if fn != nil {
			fn(&o)
		}
	}
	// Defaults are applied after the caller's functions, so that an empty
	// name means the default whoever set it.
	for _, f := range []struct {
		name *string
		def  string
	}{
		{&o.KeyAttr, "id"},
		{&o.StatusAttr, "status"},
		{&o.ExpirationAttr, "expiration"},
		{&o.InProgressExpirationAttr, "in_progress_expiration"},
		{&o.ValidationAttr, "validation"},
		{&o.DataAttr, "data"},
		{&o.LeaseAttr, "lease"},
		{&o.FailureAttr, "failure"},
		{&o.EffectAttr, "effect"},
		{&o.MessagesAttr, "messages"},
	} {
		if *f.name == "" {
			*f.name = f.def
		}
	}
	switch {
	case o.SortKeyAttr == "" && o.StaticPartitionKey != "":
		return o, fmt.Errorf("%w: Options: StaticPartitionKey %q without a SortKeyAttr to hold the record IDs", ErrInvalidConfig, o.StaticPartitionKey)
	case o.SortKeyAttr != "" && o.StaticPartitionKey == "":
		o.StaticPartitionKey = "idempotency#" + os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	seen := make(map[string]bool)
	for _, name := range o.names() {
		if seen[name] {
			return o, fmt.Errorf("%w: Options: attribute name %q used twice", ErrInvalidConfig, name)
		}
		seen[name] = true
	}
	return o, nil
}

func (o Options) names() []string {
	names := []string{o.KeyAttr, o.StatusAttr, o.ExpirationAttr, o.InProgressExpirationAttr, o.ValidationAttr, o.DataAttr, o.LeaseAttr, o.FailureAttr, o.EffectAttr, o.MessagesAttr}
	if o.SortKeyAttr != "" {
		names = append(names, o.SortKeyAttr)
	}
	return names
}

// IDAttr is the attribute that holds a record's ID: SortKeyAttr if set,
// else KeyAttr.
func (o Options) IDAttr() string {
	if o.SortKeyAttr != "" {
		return o.SortKeyAttr
	}
	return o.KeyAttr
}

// putKey sets the key attributes of the record id on item, their values
// from v.
func (o Options) putKey(item map[string]types.AttributeValue, v *scalars, id string) {
	if o.SortKeyAttr == "" {
		item[o.KeyAttr] = v.str(id)
		return
	}
	item[o.KeyAttr], item[o.SortKeyAttr] = v.str(o.StaticPartitionKey), v.str(id)
}

// key is the primary key of the item of record id.

func (o Options) key(id string) map[string]types.AttributeValue {
	if o.SortKeyAttr == "" {
		return map[string]types.AttributeValue{o.KeyAttr: str(id)}
	}
	return map[string]types.AttributeValue{o.KeyAttr: str(o.StaticPartitionKey), o.SortKeyAttr: str(id)}
}

// Placeholders for the attribute names in expressions. Going through
// ExpressionAttributeNames lets configured names work, and is required
// anyway for names that are reserved words ("status", "data").
const (
	nKey        = "#id"
	nSortKey    = "#sk"
	nStatus     = "#status"
	nExpiration = "#exp"
	nInProgress = "#inprogress_exp"
	nValidation = "#validation"
	nData       = "#data"
	nLease      = "#lease"
	nFailure    = "#failure"
	nEffect     = "#effect"
	nMessages   = "#messages"
)

// ErrInvalidConfig is what New and CreateTable return, wrapped with the
// reason, for a configuration that could never work: no client, no table
// name, or Options that give two attributes the same name.
var ErrInvalidConfig = errors.New("dynamostore: invalid configuration")

// Store is a lambdakit.Store on one DynamoDB table. It is safe for
// concurrent use if its client is, as *dynamodb.Client is.
type Store struct {
	client API
	table  string
	o      Options
	// names maps each placeholder (nKey, ...) to the attribute it stands
	// for, and own lists the record's own attributes (Options.names):
	// both fixed by o, built once rather than for every request.
	names map[string]string
	own   []string
	// creationNames are the names of creation's condition, the same for
	// every put: one map, which no request writes to.
	creationNames map[string]string
	// tableName is table, as every request names it: one string, which no
	// request writes to.
	tableName *string
	// lastForm is the form of the last completion made (completionForm).
	lastForm atomic.Pointer[completionForm]
}

// The values and expressions every lock and completion sends, made once:
// the SDK only reads a request, and nothing here writes to them.
var (
	inProgressValue     = str(string(lambdakit.StatusInProgress))
	completedValue      = str(string(lambdakit.StatusCompleted))
	acquireConditionExp = aws.String(acquireCondition)
	leaseConditionExp   = aws.String(nLease + " = :lease")
)

// statusValue is status as an attribute value: a shared one for the two
// statuses every record takes.
func statusValue(status lambdakit.IdempotencyStatus) types.AttributeValue {
	switch status {
	case lambdakit.StatusInProgress:
		return inProgressValue
	case lambdakit.StatusCompleted:
		return completedValue
	}
	return str(string(status))
}

// newStore is the Store of table through client with options o.
func newStore(client API, table string, o Options) *Store {
	s := &Store{client: client, table: table, o: o, own: o.names(), names: map[string]string{
		nKey:        o.KeyAttr,
		nSortKey:    o.SortKeyAttr,
		nStatus:     o.StatusAttr,
		nExpiration: o.ExpirationAttr,
		nInProgress: o.InProgressExpirationAttr,
		nValidation: o.ValidationAttr,
		nData:       o.DataAttr,
		nLease:      o.LeaseAttr,
		nFailure:    o.FailureAttr,
		nEffect:     o.EffectAttr,
	}}
	s.creationNames = s.attrNames(nKey, nExpiration, nStatus, nInProgress, nEffect)
	s.tableName = aws.String(table)
	return s
}

var (
	_ lambdakit.Store     = (*Store)(nil)
	_ lambdakit.IDLimiter = (*Store)(nil)
)

// MaxIDBytes implements lambdakit.IDLimiter: the longest record ID its
// attribute takes, DynamoDB's limit on a sort key value (1,024 bytes) with
// Options.SortKeyAttr, on a partition key value (2,048) without.
func (s *Store) MaxIDBytes() int {
	if s.o.SortKeyAttr != "" {
		return awsrules.MaxSortKeyBytes
	}
	return awsrules.MaxPartitionKeyBytes
}

// New returns a Store that keeps its records in table through client. It
// returns an error wrapping ErrInvalidConfig when client is nil, table is
// empty or the Options give two attributes the same name, so that a
// misconfigured function fails when it starts rather than on its first
// message.
//
// A call that DynamoDB throttles, once the client's retries are spent,
// returns an error wrapping lambdakit.ErrThrottled (and the SDK's error).
// Give the client bounded retries and timeouts with WithLambdaDefaults.
func New(client API, table string, optFns ...func(*Options)) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no client", ErrInvalidConfig)
	}
	if table == "" {
		return nil, fmt.Errorf("%w: no table name", ErrInvalidConfig)
	}
	o, err := newOptions(optFns)
	if err != nil {
		return nil, err
	}
	// Through boundary, a throttled call fails with lambdakit.ErrThrottled.
	return newStore(boundary{client}, table, o), nil
}

// attrNames maps placeholders to the record's attribute names.
func (s *Store) attrNames(placeholders ...string) map[string]string {
	// DynamoDB rejects names that the expressions do not use.
	m := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		m[p] = s.names[p]
	}
	return m
}

func (s *Store) key(id string) map[string]types.AttributeValue {
	return s.o.key(id)
}

// acquireCondition admits the put when no live record holds the key. It
// says <= where Powertools says <, so that a record stops counting at the
// same instant as lambdakit.IdempotencyRecord.Live says: at its expiration, not a
// second or a millisecond after.
const acquireCondition = "attribute_not_exists(" + nKey + ")" +
	// An expired record, not any item with an expiration of its own: under
	// lambdakit.Options.ReadableIDs the key may hold a business item, with
	// a status of its own ("CANCELLED"), which must never be replaced.
	" OR (" + nExpiration + " <= :now AND " + nStatus + " IN (:inprogress, :completed))" +
	" OR (" + nStatus + " = :inprogress AND " + nInProgress + " <= :now_ms AND attribute_not_exists(" + nEffect + "))"

// Acquire puts rec as an in-progress record unless a live record holds
// rec.ID, in one conditional PutItem. An item whose status attribute
// (Options.StatusAttr) is neither INPROGRESS nor COMPLETED, or absent,
// holds it too, expired or not: it is no record, and is never replaced.
// When the ID is held, DynamoDB returns the item with the failed
// condition, so Acquire returns it without reading the table. The returned record is the zero Record when acquired is true.
//
// Times are stored rounded up (lambdakit.IdempotencyRecord.Rounded): Expiration to the
// whole second, InProgressExpiration to the millisecond. The condition
// compares them with now in the same units, rounded down, so a record
// stops counting exactly when Record.Live says it does, never earlier.
func (s *Store) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	rec = rec.Rounded()
	rec.Status = lambdakit.StatusInProgress
	rec.Data, rec.Failure, rec.Effect, rec.Item = nil, "", "", nil
	put := s.creation(rec, now, nil)
	_, err := s.client.PutItem(ctx, putInput(&put))
	if err == nil {
		return lambdakit.IdempotencyRecord{}, true, nil
	}
	var failed *types.ConditionalCheckFailedException
	if !errors.As(err, &failed) {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: acquire %s: %w", rec.ID, err)
	}
	existing, err := s.holder(rec.ID, failed.Item)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("dynamostore: acquire %s: %w", rec.ID, err)
	}
	return existing, false, nil
}

// creation is the conditional put that creates rec, with its item's
// attributes and msgs (the messages on the record, nil for none), unless a
// live record holds its key: Acquire's lock, and Commit's completed
// record.
func (s *Store) creation(rec lambdakit.IdempotencyRecord, now time.Time, msgs *types.AttributeValueMemberL) types.Put {
	// Sized for what it will hold: no growing, on every record.
	attrs, _ := rec.Item.(map[string]types.AttributeValue)
	n := len(attrs) + 3 // the key, status, lease
	for _, set := range [...]bool{s.o.SortKeyAttr != "", msgs != nil, !rec.Expiration.IsZero(), !rec.InProgressExpiration.IsZero(), rec.Validation != "", len(rec.Data) > 0, rec.Failure != "", rec.Effect != ""} {
		if set {
			n++
		}
	}
	item := make(map[string]types.AttributeValue, n)
	// The handler's attributes first, so that the record's own, which
	// CheckItem keeps them from naming, could never be overwritten.
	maps.Copy(item, attrs)
	if msgs != nil {
		item[s.o.MessagesAttr] = msgs
	}
	v := new(scalars)
	s.o.putKey(item, v, rec.ID)
	item[s.o.StatusAttr] = statusValue(rec.Status)
	item[s.o.LeaseAttr] = v.str(rec.Lease)
	if !rec.Expiration.IsZero() { // none: kept forever
		item[s.o.ExpirationAttr] = v.num(rec.Expiration.Unix())
	}
	if !rec.InProgressExpiration.IsZero() {
		item[s.o.InProgressExpirationAttr] = v.num(rec.InProgressExpiration.UnixMilli())
	}
	if rec.Validation != "" {
		item[s.o.ValidationAttr] = v.str(rec.Validation)
	}
	if len(rec.Data) > 0 {
		item[s.o.DataAttr] = v.str(string(rec.Data))
	}
	if rec.Failure != "" {
		item[s.o.FailureAttr] = v.str(rec.Failure)
	}
	if rec.Effect != "" {
		item[s.o.EffectAttr] = v.str(rec.Effect)
	}
	values := map[string]types.AttributeValue{
		":now":        v.num(now.Unix()),
		":now_ms":     v.num(now.UnixMilli()),
		":inprogress": inProgressValue,
		":completed":  completedValue,
	}
	v.numbers()
	return types.Put{
		TableName:                 s.tableName,
		Item:                      item,
		ConditionExpression:       acquireConditionExp,
		ExpressionAttributeNames:  s.creationNames,
		ExpressionAttributeValues: values,
		// The live record comes back with the failed condition: no
		// read needed to tell a duplicate from work in progress.
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// putInput is put as a request of its own.
func putInput(put *types.Put) *dynamodb.PutItemInput {
	return &dynamodb.PutItemInput{
		TableName:                           put.TableName,
		Item:                                put.Item,
		ConditionExpression:                 put.ConditionExpression,
		ExpressionAttributeNames:            put.ExpressionAttributeNames,
		ExpressionAttributeValues:           put.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailure(put.ReturnValuesOnConditionCheckFailure),
	}
}

// holder reads the live record that failed the creation of record id,
// as DynamoDB returned it with the failed condition.
func (s *Store) holder(id string, item map[string]types.AttributeValue) (lambdakit.IdempotencyRecord, error) {
	if len(item) == 0 {
		return lambdakit.IdempotencyRecord{}, errors.New("a live record holds the key, but DynamoDB did not return it (ReturnValuesOnConditionCheckFailure ignored?)")
	}
	existing, err := s.decode(item)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, fmt.Errorf("reading the live record: %w", err)
	}
	return existing, nil
}

// Complete marks the record completed with rec.Expiration, rec.Data,
// rec.Failure and rec.Effect, provided it still carries rec.Lease. It
// leaves the payload hash as the lock wrote it: the lock put the whole
// item under this lease, with rec.Validation, so writing it again would
// only make every completion larger. A nil
// rec.Data removes any cached result. It sends one UpdateItem, or, when rec
// has staged writes (see Stage), one TransactWriteItems with the completion
// first and the staged writes after it.
//
// Complete sends nothing and returns an error wrapping
// lambdakit.ErrResultNotStorable when rec.Data is not valid UTF-8 or would
// not fit in an item, or in a transaction with the staged writes, and one
// wrapping lambdakit.ErrStagingUnsupported when a staged write is not a
// types.TransactWriteItem or there are more than a transaction holds. On
// a record marked Checked (lambdakit.IdempotencyRecord.Checked) it counts
// on the staging check for the size of the item and writes, and counts
// them again only after a refusal, which it then reports the same way. A
// staged write that DynamoDB rejects makes the whole transaction fail
// with a *StagedWriteError.
func (s *Store) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if err := s.checkItem(rec); err != nil {
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, err)
	}
	rec, msgs := s.onRecord(rec)
	if err := s.checkStorable(rec, msgs); err != nil {
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, err)
	}
	rec = rec.Rounded()
	update := s.completion(rec, msgs)
	if len(rec.Staged) > 0 {
		return s.recount(rec, msgs, s.completeStaged(ctx, rec, msgs, update))
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 update.TableName,
		Key:                       update.Key,
		UpdateExpression:          update.UpdateExpression,
		ConditionExpression:       update.ConditionExpression,
		ExpressionAttributeNames:  update.ExpressionAttributeNames,
		ExpressionAttributeValues: update.ExpressionAttributeValues,
	})
	if err == nil {
		return nil
	}
	var failed *types.ConditionalCheckFailedException // on the heap (errors.As): only for a failure
	switch {
	case errors.As(err, &failed):
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	case invalid(err):
		return s.recount(rec, msgs, rejectedErr(rec.ID, err))
	default:
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, err)
	}
}

// recount answers a completion refused for good (err) that did not count
// its size before the request (rec.Checked): an item the handler changed
// after SetItem makes the staging check's count stale, and a result that
// no longer fits beside it is then dropped (ErrResultNotStorable), as the
// count would have found before the request, rather than the work failed.
func (s *Store) recount(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL, err error) error {
	if !rec.Checked || !errors.Is(err, lambdakit.ErrCompletionRejected) {
		return err
	}
	rec.Checked = false
	if serr := s.checkStorable(rec, msgs); serr != nil {
		return fmt.Errorf("dynamostore: complete %s: %w", rec.ID, serr)
	}
	return err
}

// rejectedErr is the error of a completion of record id that DynamoDB
// refused for good (err): lambdakit.ErrCompletionRejected, which the engine
// does not answer by releasing the key.
func rejectedErr(id string, err error) error {
	return fmt.Errorf("dynamostore: complete %s: %w: %w", id, lambdakit.ErrCompletionRejected, err)
}

// invalid reports whether DynamoDB refused a request as invalid
// (ValidationException: an item over 400 KB, say), which no retry changes.
func invalid(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException"
}

// completion is the fenced update that completes rec, with msgs on its
// item (the messages on the record, nil for none), in the form a
// transaction takes; UpdateItem takes the same fields.
func (s *Store) completion(rec lambdakit.IdempotencyRecord, msgs *types.AttributeValueMemberL) types.Update {
	attrs, _ := rec.Item.(map[string]types.AttributeValue)
	f := s.completionForm(rec, attrs, msgs)
	v := new(scalars)
	key := make(map[string]types.AttributeValue, 2)
	s.o.putKey(key, v, rec.ID)
	values := make(map[string]types.AttributeValue, f.values)
	values[":completed"] = completedValue
	values[":lease"] = v.str(rec.Lease)
	if f.expires {
		values[":exp"] = v.num(rec.Expiration.Unix())
		v.numbers()
	}
	if f.failure {
		values[":failure"] = v.str(rec.Failure)
	}
	if f.effect {
		values[":effect"] = v.str(rec.Effect)
	}
	if f.data {
		values[":data"] = v.str(string(rec.Data))
	}
	for i, name := range f.attrs {
		_, v := itemPlaceholders(i)
		values[v] = attrs[name]
	}
	if f.msgs {
		values[":messages"] = msgs
	}
	return types.Update{
		TableName:                 s.tableName,
		Key:                       key,
		UpdateExpression:          f.expr,
		ConditionExpression:       leaseConditionExp,
		ExpressionAttributeNames:  f.names,
		ExpressionAttributeValues: values,
	}
}

// completionForm is what a completion's request takes from the shape of
// its record, not from its values: which optional attributes it sets, the
// names of the handler's item, and so its expression and name
// placeholders. The records of one function mostly share one shape, so the
// Store keeps the last form it made and builds a new one only when the
// shape changes: the expression and the names map are then made once, not
// for every record. A form is never changed once made; requests share its
// expression and names map (see API).
type completionForm struct {
	expires, failure, effect, data, msgs bool
	// attrs are the names of the handler's item, sorted: the i-th is set
	// through the placeholders itemPlaceholders(i).
	attrs  []string
	expr   *string
	names  map[string]string
	values int // how many values the expression takes
}

// fits reports whether f is the form of a record with these optional
// attributes and item.
func (f *completionForm) fits(expires, failure, effect, data, msgs bool, attrs map[string]types.AttributeValue) bool {
	if f.expires != expires || f.failure != failure || f.effect != effect || f.data != data || f.msgs != msgs || len(f.attrs) != len(attrs) {
		return false
	}
	// As many names, all of f's among them: the same names.
	for _, name := range f.attrs {
		if _, ok := attrs[name]; !ok {
			return false
		}
	}
	return true
}

// completionForm returns the form of rec's completion: the last one made,
// when rec has its shape, or a new one, kept as the last.
func (s *Store) completionForm(rec lambdakit.IdempotencyRecord, attrs map[string]types.AttributeValue, msgs *types.AttributeValueMemberL) *completionForm {
	expires, failure, effect, data, hasMsgs := !rec.Expiration.IsZero(), rec.Failure != "", rec.Effect != "", len(rec.Data) > 0, msgs != nil
	if f := s.lastForm.Load(); f != nil && f.fits(expires, failure, effect, data, hasMsgs, attrs) {
		return f
	}
	f := &completionForm{expires: expires, failure: failure, effect: effect, data: data, msgs: hasMsgs,
		attrs: slices.Sorted(maps.Keys(attrs))}
	var set strings.Builder
	set.Grow(160 + 16*len(attrs))
	set.WriteString("SET " + nStatus + " = :completed")
	clause := func(name, value string) {
		set.WriteString(", ")
		set.WriteString(name)
		set.WriteString(" = ")
		set.WriteString(value)
	}
	var remove []string
	// The record's optional attributes: their names only when used
	// (DynamoDB rejects a name the expressions do not use). Not the
	// payload hash: the lock wrote it (see Complete).
	optional := [...]struct {
		name, placeholder string
		set               bool
	}{{nFailure, ":failure", failure}, {nEffect, ":effect", effect}}
	names := s.attrNames(nStatus, nExpiration, nLease, nData)
	f.values = 2 // :completed, :lease
	if expires {
		clause(nExpiration, ":exp")
		f.values++
	} else {
		// Kept forever: without its TTL attribute, DynamoDB never
		// deletes the item, and the acquire condition never finds it
		// expired.
		remove = append(remove, nExpiration)
	}
	for _, a := range optional {
		if a.set {
			clause(a.name, a.placeholder)
			names[a.name] = s.names[a.name]
			f.values++
		}
	}
	if data {
		clause(nData, ":data")
		f.values++
	} else {
		// A record completed again without a result must not keep
		// replaying the previous one. An empty result is no result, as
		// in lambdakit.Store's contract.
		remove = append(remove, nData)
	}
	// The handler's item, onto the record's: placeholders for every name,
	// in a fixed order so that a retried request is the same request.
	for i, name := range f.attrs {
		n, v := itemPlaceholders(i)
		clause(n, v)
		names[n] = name
	}
	f.values += len(f.attrs)
	if hasMsgs {
		clause(nMessages, ":messages")
		names[nMessages] = s.o.MessagesAttr
		f.values++
	}
	if len(remove) > 0 {
		set.WriteString(" REMOVE " + strings.Join(remove, ", "))
	}
	f.expr, f.names = aws.String(set.String()), names
	s.lastForm.Store(f)
	return f
}

// itemPlaceholders are the name and value placeholders of the i-th
// attribute of a handler's item: "#i<i>" and ":i<i>", made once for the
// first ones, which are most items' all.
func itemPlaceholders(i int) (name, value string) {
	if i < len(itemNames) {
		return itemNames[i], itemValues[i]
	}
	return "#i" + strconv.Itoa(i), ":i" + strconv.Itoa(i)
}

var itemNames, itemValues = func() (names, values [32]string) {
	for i := range names {
		names[i], values[i] = "#i"+strconv.Itoa(i), ":i"+strconv.Itoa(i)
	}
	return
}()

// Release deletes the record, so that a retry can run at once, provided it
// is still in progress under lease. A record that is already gone counts as
// released: a Release retried after a lost answer must not report a lost
// lease. Otherwise it returns an error wrapping lambdakit.ErrLeaseLost, and
// the record stays.
func (s *Store) Release(ctx context.Context, id, lease string) error {
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.key(id),
		ConditionExpression:      aws.String("attribute_not_exists(" + nKey + ") OR (" + nLease + " = :lease AND " + nStatus + " = :inprogress)"),
		ExpressionAttributeNames: s.attrNames(nKey, nLease, nStatus),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":lease":      str(lease),
			":inprogress": str(string(lambdakit.StatusInProgress)),
		},
	})
	return fenced("release", id, err)
}

// fenced is the error of a write fenced on the lease: nil, a failed
// condition as lambdakit.ErrLeaseLost, or the SDK's error, naming op.
func fenced(op, id string, err error) error {
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &failed):
		return fmt.Errorf("dynamostore: %s %s: %w", op, id, lambdakit.ErrLeaseLost)
	default:
		return fmt.Errorf("dynamostore: %s %s: %w", op, id, err)
	}
}

var _ lambdakit.EffectMarker = (*Store)(nil)

// MarkEffect implements lambdakit.EffectMarker: one UpdateItem that sets
// the effect attribute (Options.EffectAttr) if the record is in progress
// under lease; then Acquire's condition never admits a put over it until
// it expires. One write unit for a record under 1 KB.
func (s *Store) MarkEffect(ctx context.Context, id, lease, effect string) error {
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      s.key(id),
		UpdateExpression:         aws.String("SET " + nEffect + " = :effect"),
		ConditionExpression:      aws.String(nLease + " = :lease AND " + nStatus + " = :inprogress"),
		ExpressionAttributeNames: s.attrNames(nEffect, nLease, nStatus),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":effect":     str(effect),
			":lease":      str(lease),
			":inprogress": str(string(lambdakit.StatusInProgress)),
		},
	})
	return fenced("mark effect", id, err)
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// scalars are the string and number values of one request (a lock's put,
// a completion's update), made in one allocation rather than one each:
// two requests per record build them. Each request has its own, shared
// with no other request. Room for the strings most records have (a key,
// lease, validation or result); more are made one by one. A request sets
// at most len(n) numbers (the expiration, the lease's end, :now, :now_ms).
type scalars struct {
	s    [4]types.AttributeValueMemberS
	n    [4]types.AttributeValueMemberN
	ints [4]int64 // the numbers, until numbers writes their digits
	ns   uint8
	nn   uint8
}

// str is s as an attribute value.
func (v *scalars) str(s string) types.AttributeValue {
	if int(v.ns) == len(v.s) {
		return str(s)
	}
	m := &v.s[v.ns]
	v.ns++
	m.Value = s
	return m
}

// num is n as an attribute value, whose digits numbers sets: call it
// before the request is sent.
func (v *scalars) num(n int64) types.AttributeValue {
	v.ints[v.nn] = n
	m := &v.n[v.nn]
	v.nn++
	return m
}

// numbers sets the values num returned, their digits in one string.
func (v *scalars) numbers() {
	var buf [len(v.ints) * 20]byte // 20: a sign and 19 digits, an int64's most
	var ends [len(v.ints)]int
	digits := buf[:0]
	for i, n := range v.ints[:v.nn] {
		digits = strconv.AppendInt(digits, n, 10)
		ends[i] = len(digits)
	}
	all, start := string(digits), 0
	for i := range v.nn {
		v.n[i].Value = all[start:ends[i]]
		start = ends[i]
	}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
