package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// IdempotencyStatus is the state of an idempotency record.
type IdempotencyStatus string

// The two states a live idempotency record can be in. The names match the
// Powertools idempotency tables, so one table can serve several runtimes.
const (
	StatusInProgress IdempotencyStatus = "INPROGRESS"
	StatusCompleted  IdempotencyStatus = "COMPLETED"
)

// Known reports whether s is one of the two record statuses. An item
// under a record's ID with any other status (or none) is no record the
// engine can read: another runtime's, an operator's edit, or, with
// Options.ReadableIDs, a business item ("CANCELLED"). No store takes it
// over, expired or not, and the engine fails the call with a
// *NotARecordError rather than run the work.
func (s IdempotencyStatus) Known() bool { return s == StatusInProgress || s == StatusCompleted }

// NotARecordError is the error of a call whose record ID holds an item
// that is no idempotency record: its status is not Known, or it has
// neither a lease nor an expiration (see Options.ReadableIDs). The
// handler does not run, the item is left as it is, and the message fails;
// it comes back until the item is mended or removed, or the queue's
// redrive policy moves it. errors.Is(err, ErrNotARecord) reports true for
// it.
type NotARecordError struct {
	ID     string            // the record ID, as stored
	Status IdempotencyStatus // the item's status, as stored ("" for none)
}

// Error implements error. The engine returns it in a *StoreError, whose
// text names the record without its key when its ID holds one
// (ReadableIDs).
func (e *NotARecordError) Error() string {
	return fmt.Sprintf("lambdakit: the item under record ID %s is no idempotency record (status %q): something else wrote it; it is left as it is", e.ID, e.Status)
}

// Is makes errors.Is(err, ErrNotARecord) true.
func (e *NotARecordError) Is(target error) bool { return target == ErrNotARecord }

// IdempotencyRecord is one stored idempotency record: the lock while a
// handler runs, and the cached outcome after it completed. (Not an SQS
// record: those are events.SQSMessage.)
type IdempotencyRecord struct {
	// ID is the store key: "<prefix>#<sha256 hex of the idempotency
	// key>", or with Options.ReadableIDs "<prefix>#<key>".
	ID string
	// Status is StatusInProgress while the owner runs the handler, then
	// StatusCompleted.
	Status IdempotencyStatus
	// Expiration is when the record stops counting, whatever its status.
	// Stores keep it rounded up to the whole second (the DynamoDB TTL
	// attribute is in seconds); see Rounded. Zero on a completed record
	// means it never expires (Options.TTL NeverExpire): stores keep no
	// expiration for it.
	Expiration time.Time
	// InProgressExpiration is when an in-progress record's lease ends: the
	// owner's invocation deadline. After it another owner may take over.
	// Stores keep it rounded up to the millisecond; see Rounded.
	InProgressExpiration time.Time
	// Validation is a hash of the payload, empty when validation is off.
	Validation string
	// Data is the handler's cached result, nil when there is none.
	Data []byte
	// Lease is the random token of the current owner. Complete and Release
	// succeed only while it still matches (fencing).
	Lease string
	// Failure, on a completed record, says why the work ran but its
	// completion could not be committed as asked (see
	// ErrCompletionRejected): the record then holds no result, and every
	// message with its key fails permanently without running the work
	// again, and, with an Effect, why the work failed after its effect
	// (ErrFailedAfterEffect). Empty on a record completed normally.
	Failure string
	// Effect is what the handler declared of its external effect with
	// EffectDone ("charge ch_123"): not empty means the effect happened.
	// With a Failure, it tells whoever reconciles what was done. Stores
	// keep it as given.
	Effect string
	// Staged are writes the store must commit atomically with the
	// completion (single-phase mode); see Stage. Stores that cannot commit
	// them return ErrStagingUnsupported from Complete and commit nothing.
	Staged []any
	// Item, when not nil, holds the attributes of the handler's own item,
	// which the store writes onto the record's item with the completion
	// (see SetItem). Its type is the store's (ItemStore.CheckItem has
	// accepted it). Stores return records without it.
	Item any
	// Checked is set by the engine on the record it completes when the
	// store's StagingChecker passed Staged and Item at staging, with room
	// for an Effect of MaxEffectBytes: Complete may count on their size
	// then and add only the result's. (A handler that changes its item
	// after SetItem makes that count stale: a store that then refuses
	// the completion still reports a result that no longer fits as
	// ErrResultNotStorable, so that it is dropped, and an item it cannot
	// write as refused, so that the engine records the failure.) Anyone
	// else leaves it false. Stores neither keep nor return it.
	Checked bool
}

// Rounded returns r with its times at the precision stores keep:
// Expiration rounded up to the whole second, InProgressExpiration up to the
// whole millisecond. Up, never down: a store must not let a record stop
// counting before the instant it was asked to keep it, and every store
// must agree on that instant, to the millisecond. Stores apply Rounded to
// what they are given; IdempotencyRecord.Live on a rounded record then says what every
// store says.
func (r IdempotencyRecord) Rounded() IdempotencyRecord {
	r.Expiration = roundUp(r.Expiration, time.Second)
	r.InProgressExpiration = roundUp(r.InProgressExpiration, time.Millisecond)
	return r
}

func roundUp(t time.Time, unit time.Duration) time.Time {
	if t.IsZero() {
		return t
	}
	down := t.Truncate(unit)
	if down.Equal(t) {
		return down
	}
	return down.Add(unit)
}

// foreign reports whether r, read from a store, is no idempotency record
// at all: every record lambdakit writes has a lease, and every record
// Powertools writes an expiration. Under ReadableIDs the record's key is
// a business key, and other code may have written an item there, even
// one with a status of COMPLETED.
func (r IdempotencyRecord) foreign() bool { return r.Lease == "" && r.Expiration.IsZero() }

// Live reports whether r still counts at now: it has not expired, and if it
// is in progress its lease has not ended, or its effect was kept
// (EffectMarker): the work must not run again then.
// A zero Expiration never ends: a record kept forever (NeverExpire) still
// stops counting, while in progress, when its lease ends.
func (r IdempotencyRecord) Live(now time.Time) bool {
	if !r.Expiration.IsZero() && !now.Before(r.Expiration) {
		return false
	}
	return r.Status == StatusCompleted || r.Effect != "" || now.Before(r.InProgressExpiration)
}

// Store keeps idempotency records. Implementations must make Acquire an
// atomic check-and-set, and fence Complete and Release on the lease.
// Implementations: dynamostore.Store, lambdakittest.MemoryStore.
type Store interface {
	// Acquire creates rec (status in progress) unless a live record (see
	// IdempotencyRecord.Live at now) holds rec.ID, or an item whose status
	// is not Known does, live or not: that item is never replaced, and is
	// returned as the record that holds the ID. A live record carrying rec.Lease
	// is the caller's own, from an earlier attempt of the same call whose
	// answer was lost; callers treat it as acquired. It reports acquired=true, and a zero
	// existing IdempotencyRecord, when it created rec; otherwise it returns the live
	// record that holds the ID.
	Acquire(ctx context.Context, rec IdempotencyRecord, now time.Time) (existing IdempotencyRecord, acquired bool, err error)
	// Complete sets the record's status to StatusCompleted, its expiration
	// to rec.Expiration, its result to rec.Data (none when empty: an
	// empty result reads back as nil), its Failure to rec.Failure and its
	// Effect to rec.Effect, and
	// commits rec.Staged with it, if and only if the stored record still
	// carries rec.Lease. Otherwise it returns ErrLeaseLost and changes
	// nothing. A record already completed under rec.Lease is this
	// owner's earlier completion, sent again after its answer was lost:
	// rec.Staged must not be committed a second time (it returns nil).
	// When the completion can never succeed as asked, whatever
	// the retries (staged writes it cannot commit, an item over the
	// backend's size limit, a staged write the backend finds invalid; not
	// a staged condition that fails, which the handler may pass when it
	// runs again), it returns an
	// error wrapping ErrCompletionRejected or ErrStagingUnsupported and
	// changes nothing: the engine then completes the record with its
	// Failure and no staged writes.
	Complete(ctx context.Context, rec IdempotencyRecord) error
	// Release deletes the record if it is still in progress under lease,
	// so that a retry can run at once. A record that no longer exists
	// counts as released (nil), so that a Release retried after a lost
	// answer succeeds. Otherwise it returns ErrLeaseLost.
	Release(ctx context.Context, id, lease string) error
}

// ItemStore is a Store that can write a handler's own item onto the
// record's item (see SetItem): the record then lives on the business item,
// and its completion writes both in one request.
// Implementations: dynamostore.Store, lambdakittest.MemoryStore.
type ItemStore interface {
	Store
	// CheckItem returns an error wrapping ErrInvalidItem, before anything
	// is sent, when item cannot be written onto a record's item: it is
	// not of the store's type, it is empty, or it names an attribute of
	// the record itself (its key, status, expiration, lease, result...),
	// which it would overwrite.
	CheckItem(item any) error
}

// StagingChecker is a Store that can tell, while a handler stages, whether
// the completion would still fit in the one request that commits it (a
// DynamoDB transaction holds 100 writes and 4 MB, an item 400 KB):
// SetItem, Stage and StageFunc hand it the record as it would then be
// staged, and stage nothing when it refuses, so that the handler learns
// of it before its work, not from a completion refused after it.
// Implementation: dynamostore.Store.
type StagingChecker interface {
	// CheckStaging returns an error wrapping ErrStagedTooLarge when
	// rec's item (rec.Item) and staged writes (rec.Staged), with the
	// record's own attributes (rec holds its ID, lease and validation
	// hash as locked), room for the largest effect EffectDone keeps
	// (MaxEffectBytes: it may be declared after the last check) and no
	// result, would make a completion the store cannot commit; one
	// wrapping ErrStagingUnsupported when it cannot write a staged op;
	// and, when the store is an ItemStore, one wrapping ErrInvalidItem
	// for an item (rec.Item) CheckItem refuses: SetItem leaves that check
	// to CheckStaging, which can count the item in the same pass, when
	// the StagingChecker it finds is the ItemStore it finds (not a store
	// further down a wrapper's chain) and the item is not nil.
	CheckStaging(rec IdempotencyRecord) error
}

// IDLimiter is a Store that holds record IDs of a bounded length (a
// DynamoDB key attribute): with Options.ReadableIDs, a key whose record ID
// would be longer fails with ErrInvalidKey before the handler runs, not
// in the store after it. Implementation: dynamostore.Store.
type IDLimiter interface {
	// MaxIDBytes is the longest record ID, in bytes, the store holds.
	MaxIDBytes() int
}

// EffectMarker is a Store that can keep the recovery point on an
// in-progress record, for Options.StoreEffect: an owner that stops after
// its effect (a crash, a timeout) then leaves a record that is never taken
// over. Implementations: dynamostore.Store, valkeystore.Store,
// lambdakittest.MemoryStore.
type EffectMarker interface {
	// MarkEffect sets the Effect of the record id to effect if the
	// record is in progress under lease; otherwise it returns
	// ErrLeaseLost and changes nothing. From then on the record is live
	// until it expires, whatever its lease (see IdempotencyRecord.Live):
	// Acquire and Commit never replace it.
	MarkEffect(ctx context.Context, id, lease, effect string) error
}

// Committer is a Store that can create a completed record, with its
// staged writes and item, in one request, for Options.StagedOnly: the
// handler has run before, and only the record's condition decides whether
// its writes land. Implementations: dynamostore.Store,
// lambdakittest.MemoryStore.
type Committer interface {
	// Commit creates rec (status completed, with rec.Data, rec.Item and
	// rec.Staged, atomically) unless a live record (see
	// IdempotencyRecord.Live at now), or an item whose status is not
	// Known, holds rec.ID (as in Acquire); then it writes nothing
	// and returns that record, with created=false. A live record carrying
	// rec.Lease is the caller's own, from an earlier attempt whose answer
	// was lost. A staged write that cannot be committed fails the call
	// as in Complete (ErrStagingUnsupported, ErrCompletionRejected, or
	// the store's own error for a staged condition that fails), and
	// nothing is written.
	Commit(ctx context.Context, rec IdempotencyRecord, now time.Time) (existing IdempotencyRecord, created bool, err error)
}

// StoreWrapper is a Store that wraps another one: to trace it, count its
// requests or inject faults. NewOnce looks through Unwrap for each optional
// capability (BatchGetter, ItemStore, StagingChecker, Committer,
// EffectMarker, IDLimiter) the wrapper does not implement itself, so a
// wrapper keeps every capability of the store it wraps without knowing of
// it.
//
// To write one, implement Store's three methods and Unwrap, returning the
// wrapped store. Implement an optional interface only to intercept it, and
// then only when the wrapped store has it (find it with StoreAs): the
// engine takes a method the wrapper has as the capability being there, and
// would, say, run StagedOnly on a store that cannot commit. A capability
// found below the wrapper is called on the wrapped store directly: a
// wrapper that changes what it passes on (a record ID with a tenant's
// prefix, say) must implement each capability the wrapped store has, or
// hide it, rather than implement Unwrap.
type StoreWrapper interface {
	Store
	// Unwrap returns the wrapped store.
	Unwrap() Store
}

// StoreAs returns the first store that implements T in the chain from s
// down through StoreWrapper.Unwrap, as NewOnce finds each optional
// capability, and false when none does. A chain of more than
// maxStoreChain wrappers is taken for one that never ends (a wrapper
// whose Unwrap returns itself, or one above it): StoreAs panics, as
// NewOnce does for other configurations that cannot work, rather than
// follow it for ever.
func StoreAs[T any](s Store) (T, bool) {
	c, _, ok := storeAt[T](s)
	return c, ok
}

// storeAt is StoreAs, and how many wrappers down it found the T: two
// capabilities found at the same depth are one store's.
func storeAt[T any](s Store) (c T, depth int, ok bool) {
	// maxStoreChain wrappers, and the store below the last of them.
	for depth = range maxStoreChain + 1 {
		if s == nil {
			break
		}
		if c, ok := s.(T); ok {
			return c, depth, true
		}
		w, ok := s.(StoreWrapper)
		if !ok {
			return c, 0, false
		}
		s = w.Unwrap()
	}
	if s != nil {
		panic(fmt.Sprintf("lambdakit: the store wrappers' chain does not end: more than %d wrappers down, it is still at a %T (does its Unwrap return itself?)", maxStoreChain, s))
	}
	return c, 0, false
}

// maxStoreChain bounds the wrappers StoreAs looks through: far more than
// any real stack of tracing, counting and fault-injecting wrappers.
const maxStoreChain = 64

// Errors that callers branch on with errors.Is.
var (
	// ErrNoKey means no idempotency key could be derived from a message.
	ErrNoKey = errors.New("lambdakit: no idempotency key in message")
	// ErrInvalidKey means a message has a key that cannot be read safely:
	// the body is not one valid JSON document, the key field is named again
	// in other case, or its value is an object or an array. Such a message
	// always fails, even with ProcessWithoutKey: running it without
	// idempotency could repeat work that was done under its real key.
	ErrInvalidKey = errors.New("lambdakit: idempotency key cannot be read safely")
	// ErrPayloadMismatch means a key was reused with a different payload.
	ErrPayloadMismatch = errors.New("lambdakit: idempotency key reused with a different payload")
	// ErrInProgress means another owner holds the key's lease right now.
	ErrInProgress = errors.New("lambdakit: idempotency key is in progress elsewhere")
	// ErrLeaseLost means the record was taken over or removed since it was
	// acquired: someone else now owns the work.
	ErrLeaseLost = errors.New("lambdakit: idempotency lease lost")
	// ErrResultNotStorable means a handler's result cannot be kept: the
	// store cannot hold it (too large for an item, or not text), or it
	// could not be encoded (TypedResult and DoTyped return an error wrapping
	// it for a result json.Marshal refuses, such as NaN). Either way the
	// work is done: the record is completed without a cached result, and
	// duplicates replay none. A handler of your own whose work is done but
	// whose result cannot be encoded should return an error wrapping it,
	// not a plain error, which would release the key and run the work
	// again on the retry.
	ErrResultNotStorable = errors.New("lambdakit: result cannot be stored")
	// ErrCompletionRejected means the store refused a completion for a
	// reason no retry can change (an item over the size limit, a staged
	// write that is invalid or whose condition fails) after the handler's
	// work was done. The engine does not release the key, which would run
	// the work again: it completes the record with the failure and no
	// staged writes, and the message, and every later one with its key,
	// fails permanently (see Permanent), so that it reaches the
	// dead-letter queue without the work running again.
	ErrCompletionRejected = errors.New("lambdakit: completion rejected after the work was done")
	// ErrFailedAfterEffect means the work failed after the handler
	// declared its external effect done (EffectDone): its own error, a
	// panic, a refused Stage, SetItem or Publish, or a completion the
	// store refused for good. The engine does not release the key, which
	// would repeat the effect: it completes the record with the failure
	// and the effect, without result and staged writes, and the message,
	// and every later one with its key, fails permanently, unrun. Someone
	// must reconcile: the effect happened, what should have followed it
	// did not.
	ErrFailedAfterEffect = errors.New("lambdakit: failed after its effect: reconcile")
	// ErrStagingUnsupported means a store was handed staged writes it
	// cannot commit atomically with the completion.
	ErrStagingUnsupported = errors.New("lambdakit: store cannot commit these staged writes")
	// ErrStagedTooLarge means the writes and item a handler staged
	// would make a completion larger than the store commits in one
	// request (see StagingChecker).
	ErrStagedTooLarge = errors.New("lambdakit: staged writes and item too large for one completion")
	// ErrInvalidItem means a handler's item (SetItem) cannot be written
	// onto its record's item: it is empty, of a type the store does not
	// write, or names an attribute of the record itself.
	ErrInvalidItem = errors.New("lambdakit: item cannot be written on its record")
	// ErrNotARecord is what a *NotARecordError matches: the item under a
	// record's ID is no idempotency record.
	ErrNotARecord = errors.New("lambdakit: the item under the record ID is no idempotency record")
	// ErrThrottled means the store's backend refused a request for lack of
	// capacity, and the store's own retries did not get it through. The
	// record fails, and comes back with its message.
	ErrThrottled = errors.New("lambdakit: store request throttled")
)
