package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrNotStaging means Stage was called outside a handler run by Idempotent,
// or after that handler returned, where there is no completion to commit
// the writes with.
var ErrNotStaging = errors.New("lambdakit: Stage called outside an idempotent handler")

type stageKey struct{}

// stage collects the writes one handler run stages. Handlers may stage from
// several goroutines, hence the mutex. Once the handler has returned, the
// stage is closed: its writes are committed or dropped, and a later one
// must fail, not vanish.
type stage struct {
	// lock is the record whose completion commits the writes, as locked:
	// its ID, and the lease and payload hash the completion writes
	// again, which the checker counts.
	lock IdempotencyRecord
	// keyAt is where the key starts in lock.ID when it holds it
	// (Once.keyAt): an error text names the record without it.
	keyAt   int
	items   ItemStore      // nil when the store cannot write an item
	checker StagingChecker // nil when the store has no limit to check
	// checksItems: checker is the ItemStore items, and its CheckStaging
	// makes CheckItem's check of an item (see StagingChecker).
	checksItems bool
	mu          sync.Mutex
	ops         []any
	item        any
	itemSet     bool
	closed      bool
	// checked is set once the checker has passed ops and item as they
	// now stand (see IdempotencyRecord.Checked).
	checked bool
	// effect is what EffectDone declared; noEffect is set under
	// Options.StagedOnly, where EffectDone records nothing.
	effect   string
	noEffect bool
	// mark, when set (Options.StoreEffect), keeps the effect in the store.
	// markMu orders the marks, each sending the effect as it is then:
	// sent at once, an older mark could land last and drop a detail.
	mark   func(ctx context.Context, effect string)
	markMu sync.Mutex
}

// StagingRecord returns the ID of the idempotency record whose completion
// the writes staged with ctx commit with, and false outside a handler run
// by Idempotent or Once. A write that must be the same item every time
// the handler runs for that record (an outbox message, whose retry must
// not make a second one) derives its key from it.
func StagingRecord(ctx context.Context) (id string, ok bool) {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return "", false
	}
	return s.lock.ID, true
}

// StagingLease returns the lease of the run StagingRecord names, which
// its completion is written under, and false outside a handler run by
// Idempotent or Once. The record ID and the lease name one completion: a
// write that must be the same item for every retry of that completion,
// yet another item for a new completion of the record (once it expired),
// such as an outbox message, derives its key from both.
func StagingLease(ctx context.Context) (lease string, ok bool) {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return "", false
	}
	return s.lock.Lease, true
}

// StageFunc stages, in one step, the writes build returns when given the
// writes the handler has staged so far (read-only; build must not call
// Stage): writes staged from several goroutines see each other, so that a
// write may take its place (len(staged)) as part of its key, or refuse to
// repeat one. An error from build stages nothing and is returned. It fails
// with ErrNotStaging where Stage does.
func StageFunc(ctx context.Context, build func(staged []any) ([]any, error)) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNotStaging
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%w: the handler has returned, and its writes were committed or dropped without these", ErrNotStaging)
	}
	ops, err := build(s.ops[:len(s.ops):len(s.ops)])
	if err != nil {
		return err
	}
	return s.add(ops, s.item)
}

// add stages ops, with item as the handler's item, unless the store's
// checker refuses what would then be staged. The caller holds s.mu.
func (s *stage) add(ops []any, item any) error {
	all := append(s.ops[:len(s.ops):len(s.ops)], ops...)
	if s.checker != nil {
		// What the store refuses now it would refuse on every run.
		// The effect declared so far goes on the record's item too.
		rec := IdempotencyRecord{ID: s.lock.ID, Lease: s.lock.Lease, Validation: s.lock.Validation, Item: item, Staged: all, Effect: s.effect}
		if err := s.checker.CheckStaging(rec); err != nil {
			return Permanent(err)
		}
	}
	s.ops, s.item, s.checked = all, item, s.checker != nil
	return nil
}

// staging is what one handler run staged, as its stage closed.
type staging struct {
	ops  []any // the writes
	item any   // the item, nil when none was set
	// checked: the store's StagingChecker passed ops and item as they
	// are (IdempotencyRecord.Checked).
	checked bool
}

// close closes the stage and returns what was staged.
func (s *stage) close() staging {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := staging{ops: s.ops, item: s.item, checked: s.checked}
	s.ops, s.item, s.closed = nil, nil, true
	return w
}

// effectDone returns what EffectDone declared, "" if it was not called.
// Read after close, it is final.
func (s *stage) effectDone() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effect
}

// MaxEffectBytes bounds what EffectDone keeps, in bytes, so that the
// record that carries it can always be stored. A StagingChecker keeps
// room for it on the record: EffectDone may come after the last check.
const MaxEffectBytes = 1024

// EffectDone declares that the handler's external effect has happened (a
// card charged, an email sent): the recovery point. Call it on the line
// after the call that made the effect, with what is known of it, such as
// the gateway's ID ("charge ch_123").
//
// Before the point, a failure releases the key and the message is tried
// again, as usual. After it, no failure the process survives releases the
// key, since a retry would repeat the effect: the handler's error, a panic,
// a refused Stage, SetItem or Publish, or a completion the store refuses
// for good complete the record with the failure (IdempotencyRecord.Failure)
// and detail (IdempotencyRecord.Effect), and drop its result, staged writes
// and item; the message fails permanently with ErrFailedAfterEffect, and so
// does every later message with its key, without running the handler. A
// completion that fails for a while is tried again until the lease ends;
// the key stays locked meanwhile, and after. A crash or a timeout after the
// point leaves the key locked until the lease ends, and then another owner
// may take it over and run the handler again: there the effect's own
// idempotency key (a payment gateway's) is the defence.
//
// Called more than once, the details are kept in order, joined by "; ",
// up to MaxEffectBytes. An empty detail is kept as "done", and bytes that
// are not UTF-8 as U+FFFD, as the AWS SDK would send them. EffectDone reports
// whether the point was recorded: false outside a handler run by
// Idempotent or Once (and with idempotency disabled), after the handler
// returned, and under Options.StagedOnly, whose handler by contract has no
// effect but the writes it stages, which commit with its record or not at
// all. With Options.StoreEffect it writes the effect to the store before
// it returns, so that a crash after the point does not run the work again
// either.
func EffectDone(ctx context.Context, detail string) bool {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return false
	}
	s.mu.Lock()
	if s.closed || s.noEffect {
		s.mu.Unlock()
		return false
	}
	if detail == "" {
		detail = "done"
	}
	// Kept as it is sent: the SDK sends each byte that is not UTF-8 as
	// U+FFFD, three bytes, which would pass the room the store's staging
	// check keeps for the effect (MaxEffectBytes).
	detail = strings.ToValidUTF8(detail, "\uFFFD")
	if s.effect != "" {
		detail = s.effect + "; " + detail
	}
	s.effect = truncate(detail, MaxEffectBytes)
	s.mu.Unlock()
	if s.mark != nil {
		s.markMu.Lock()
		defer s.markMu.Unlock()
		s.mark(ctx, s.effectDone())
	}
	return true
}

// ErrItemAlreadySet means SetItem was called a second time in one handler
// run. The item is declared whole, once: a second call would silently
// replace or merge what the first declared.
var ErrItemAlreadySet = errors.New("lambdakit: SetItem called twice in one handler run")

// SetItem declares the attributes of the item the handler produces (a
// payment, an order), to be written onto the record's own item by its
// completion: the record then lives on the business item, in the
// business table, and a new message costs two requests of one write unit
// each under 1 KB (the lock, and the completion that writes the item),
// or one with Options.StagedOnly. What item is depends on the store
// (dynamostore.SetItem takes DynamoDB attributes). Use it with
// Options.ReadableIDs, so that the item's key is the business key
// ("<Prefix>#<key>"), and give the record a TTL that suits the item
// (NeverExpire for one that must stay).
//
// It fails, and sets nothing, outside a handler run by Idempotent or Once
// (ErrNotStaging, as Stage), when the handler already set its item
// (ErrItemAlreadySet), when the store cannot write one
// (ErrStagingUnsupported: it does not implement ItemStore), and when the
// store refuses item (ErrInvalidItem, by ItemStore.CheckItem's rules: an
// attribute of the record's own, say, or a value the database cannot hold;
// or, wrapping ErrStagedTooLarge too, an item that with the writes staged
// so far, and room for an effect EffectDone may declare after it
// (MaxEffectBytes), is too large for one completion). On a store that is a
// StagingChecker and the ItemStore, which makes both checks in one
// (CheckStaging), a refusal is marked Permanent: no delivery can write
// that item. If the handler returns an error, the item is dropped with
// its staged writes, and the record's item, which held only the lock, is
// deleted.
func SetItem(ctx context.Context, item any) error {
	s, ok := ctx.Value(stageKey{}).(*stage)
	if !ok {
		return ErrNotStaging
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("%w: the handler has returned, and its record was completed or released without this item", ErrNotStaging)
	case s.itemSet:
		return fmt.Errorf("%w (record %s)", ErrItemAlreadySet, hideKey(s.lock.ID, s.keyAt))
	case s.items == nil:
		return fmt.Errorf("%w: the store cannot write a handler's item (it does not implement lambdakit.ItemStore)", ErrStagingUnsupported)
	}
	// A StagingChecker that is the ItemStore checks the item as
	// CheckItem does, in the pass that counts it (see StagingChecker);
	// not one further down a wrapper's chain, which may check items by
	// other rules or none, and not a nil item, which CheckStaging takes
	// for no item at all.
	if !s.checksItems || item == nil {
		if err := s.items.CheckItem(item); err != nil {
			return err
		}
	}
	if err := s.add(nil, item); err != nil {
		// No delivery can write this item with these writes: refused
		// as an item the store cannot write.
		if errors.Is(err, ErrInvalidItem) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrInvalidItem, err)
	}
	s.itemSet = true
	return nil
}

// Stage hands writes to the Store, to be committed atomically with the
// completion of the current record (single-phase mode): either the record
// is completed and every staged write is applied, or nothing is. What an op
// is depends on the store (dynamostore.Stage stages DynamoDB writes with
// their proper type). If the handler returns an error, its staged writes are
// dropped. Stage fails with ErrNotStaging once the handler has returned (from
// a goroutine it left running, say): the completion has taken the staged
// writes by then, and a write staged later would be lost. On a store that
// is a StagingChecker, it fails, marked Permanent and staging nothing,
// when the writes would make, with those staged before and the item
// SetItem declared, a completion too large for the store
// (ErrStagedTooLarge), or when the store cannot write one of them
// (ErrStagingUnsupported); StageFunc too.
func Stage(ctx context.Context, ops ...any) error {
	return StageFunc(ctx, func([]any) ([]any, error) { return ops, nil })
}
