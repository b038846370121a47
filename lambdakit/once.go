package lambdakit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Options configures NewOnce and Idempotent. The zero
// value of each field means its default. Payload, DisableValidation,
// ProcessWithoutKey and Prefetch concern the SQS middleware (Idempotent)
// only: Do is given its payload.
type Options struct {
	// Prefix namespaces the records of one function in a shared table:
	// IDs are "<Prefix>#<sha256 of key>". Default: the function name from
	// AWS_LAMBDA_FUNCTION_NAME, else "lambdakit". Set it explicitly when a
	// function may be renamed, or two functions must share records.
	Prefix string
	// TTL is how long a completed record is remembered, counted from its
	// completion. Default 7 days. It must outlive every way a copy of a
	// message can come back: at worst the source queue's retention (its
	// event source mapping disabled), then the dead-letter queue's (a FIFO
	// queue restarts the clock there; up to 14 days), then the source
	// queue's again after a redrive. So: 2 x source retention + DLQ
	// retention + a margin. NeverExpire (any negative TTL) keeps
	// completed records forever, with no expiration stored: for records
	// that live on business items (SetItem) that must stay, and for work
	// that must never be repeated, such as a payment. An in-progress
	// record still ends with its lease, and expires after the default
	// TTL if its owner died, so that an orphaned lock does not stay.
	TTL time.Duration
	// ReadableIDs makes record IDs "<Prefix>#<key>", the key itself,
	// rather than "<Prefix>#<sha256 of key>": the record can then live on
	// the business item, found by its business key (see SetItem). A key
	// whose ID cannot be a DynamoDB key safely (longer than 2048 bytes
	// with the prefix, or not UTF-8) fails with ErrInvalidKey. Changing
	// it changes every ID: records kept under the other form are not
	// found.
	ReadableIDs bool
	// StagedOnly runs the handler before any store request, and then
	// creates its completed record, with its staged writes (Stage) and
	// item (SetItem), in one request: one write unit for a record with
	// its item under 1 KB. It needs a store that implements Committer
	// (NewOnce panics otherwise).
	//
	// Only for handlers whose every effect is a write they stage. Such a
	// handler may run more than once, and at the same time as a duplicate
	// of its message in another container: only the first to commit
	// writes anything; the others find its record and replay its result.
	// So it may read (a balance, a price) and compute; it must not call
	// out (a payment gateway, an email, a queue), nor write anything it
	// does not stage. A duplicate that lost the race costs one failed
	// conditional write, and its handler's writes are never applied.
	StagedOnly bool
	// StoreEffect keeps the recovery point in the store: EffectDone
	// writes the effect onto the in-progress record, fenced on the lease,
	// before it returns. Then an owner that stops after its effect
	// without a word (a crash, a timeout, a store unreachable until the
	// lease ends) leaves a record that is never taken over: every message
	// with its key fails permanently with ErrFailedAfterEffect, unrun,
	// until the record expires: each lock is written to expire a TTL
	// after its lease ends (the default TTL under NeverExpire), as a
	// completed record does after its completion. The cost: one more write per message
	// whose handler declares an effect (an UpdateItem of one write unit
	// on DynamoDB, for a record under 1 KB), and its latency in the
	// handler. A write that fails is logged at WARN, and the message goes
	// on as without the option. It needs a store that implements
	// EffectMarker (NewOnce panics otherwise); under StagedOnly it does
	// nothing, as EffectDone does.
	StoreEffect bool
	// Payload selects what must match between messages with one key.
	// Default (nil) PayloadBody. Set DisableValidation to skip the check.
	Payload PayloadFunc
	// DisableValidation turns payload validation off.
	DisableValidation bool
	// ProcessWithoutKey runs the handler without idempotency for messages
	// that carry no key. By default such messages fail (fail closed).
	ProcessWithoutKey bool
	// CacheSize is how many completed records each warm container keeps in
	// memory, so a duplicate costs no request at all. 0 turns it off.
	CacheSize int
	// LeaseWithoutDeadline is the lease used when the context has no
	// deadline (outside Lambda). Default 15 minutes, Lambda's maximum.
	LeaseWithoutDeadline time.Duration
	// Prefetch says when a batch's completed records are read ahead in
	// one request (see PrefetchPolicy). Default PrefetchRedeliveries.
	Prefetch PrefetchPolicy
	// ResponseHook, if set, runs for every call answered from a completed
	// record instead of by its handler: a duplicate, whose result is
	// replayed from the warm cache, from the store, or from a call with
	// the key that ran in this process meanwhile. It gets the stored
	// result (nil when the record holds none) and the record (its Data is
	// that result; its ID, Expiration and Validation say which run it
	// was), and what it returns is what the caller gets: to add a flag or
	// a header to a replayed response, or to log it. Its error is the
	// call's error, as it is (errors.Is and errors.As find it); a panic
	// in it fails the call with a *PanicError, as the handler's does. It
	// never runs for the call that ran the
	// handler, for a key in progress (ErrInProgress), nor for a record
	// whose work failed (ErrFailedAfterEffect, ErrCompletionRejected).
	// Each call gets a result of its own, which the hook may change. In
	// the SQS middleware (Idempotent) it runs for each duplicate message,
	// and its error fails that message, which comes back: never poison,
	// not even an ErrPayloadMismatch it met itself. Powertools for AWS Lambda calls
	// this responseHook (response_hook).
	ResponseHook func(ctx context.Context, result []byte, rec IdempotencyRecord) ([]byte, error)
	// Logger receives the lines about duplicates and results that could
	// not be cached. (A lost lease is a record failure, a *LeaseLostError,
	// which Batch logs.) Default: NewLogger(os.Stderr).
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Once runs work at most once to completion per key: the engine
// behind Idempotent, for work that does not come from SQS (an API Gateway
// handler, an EventBridge target, a Step Functions task) and has its key and
// payload at hand. It keeps the same records in the same Store, with the
// same lease, fencing, payload validation, warm cache and single-phase
// staging (Stage) as the SQS middleware. One Once per function: it
// holds the warm container's cache and its flights. It is safe for
// concurrent use.
//
// POWERTOOLS_IDEMPOTENCY_DISABLED turns idempotency off, for local tests,
// as in every Powertools for AWS Lambda runtime: when NewOnce (or
// Idempotent) finds it set to 1, y, yes, t, true or on (in any case), the
// engine runs every call's work directly, without touching the store: no
// key or payload check, no lock, no record, no replay. Stage then fails
// with ErrNotStaging. Any other value leaves idempotency on. Inside Lambda
// (AWS_LAMBDA_FUNCTION_NAME set) NewOnce logs a warning at WARN, since a
// deployed function with idempotency off repeats its work for every
// duplicate.
type Once struct {
	store     Store
	getter    BatchGetter    // nil when the store cannot read ahead
	items     ItemStore      // nil when the store cannot write a handler's item
	committer Committer      // nil when the store cannot commit in one request
	marker    EffectMarker   // set with Options.StoreEffect only
	checker   StagingChecker // nil when the store has no limit to check staging against
	// checksItems is set when checker is the ItemStore (items) itself,
	// whose CheckStaging makes CheckItem's check (see StagingChecker).
	checksItems bool
	idLimit     int // the longest record ID the store holds, for ReadableIDs
	// tellIDs is set with ReadableIDs on a wrapped store (StoreWrapper):
	// its calls carry the Prefix, for LoggedRecordID. A store no wrapper
	// stands before has no one to tell, and its records pay nothing.
	tellIDs  bool
	opts     Options
	state    *idempotencyState
	disabled bool // by POWERTOOLS_IDEMPOTENCY_DISABLED, read by NewOnce
}

// envDisabled turns idempotency off: see Once.
const envDisabled = "POWERTOOLS_IDEMPOTENCY_DISABLED"

// disabledByEnv reports whether envDisabled holds a value Powertools for
// AWS Lambda reads as true: 1, y, yes, t, true or on, in any case, spaces
// around ignored. Anything else, unset and empty included, leaves
// idempotency on: a typo must not turn it off.
func disabledByEnv() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(envDisabled))) {
	case "1", "y", "yes", "t", "true", "on":
		return true
	}
	return false
}

type idempotencyState struct {
	mu      sync.Mutex
	flights map[string]*flight
	cache   *lru
	ends    leaseEnds // the cleanup contexts' shared ends
}

// NewOnce returns the engine on store. It reads
// POWERTOOLS_IDEMPOTENCY_DISABLED once, here (see Once).
func NewOnce(store Store, optFns ...func(*Options)) *Once {
	o := Options{
		Prefix:               os.Getenv("AWS_LAMBDA_FUNCTION_NAME"),
		TTL:                  defaultTTL,
		Payload:              PayloadBody,
		LeaseWithoutDeadline: 15 * time.Minute,
		Now:                  time.Now,
	}
	for _, fn := range optFns {
		fn(&o)
	}
	if o.Prefix == "" {
		o.Prefix = "lambdakit"
	}
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	// One way to turn validation off: DisableValidation. A nil Payload
	// means the default, like every other zero field.
	switch {
	case o.DisableValidation:
		o.Payload = nil
	case o.Payload == nil:
		o.Payload = PayloadBody
	}
	if o.LeaseWithoutDeadline <= 0 {
		o.LeaseWithoutDeadline = 15 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = defaultLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	disabled := disabledByEnv()
	if disabled && os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" {
		o.Logger.LogAttrs(context.Background(), slog.LevelWarn,
			"idempotency: DISABLED by "+envDisabled+": every message runs its handler, duplicates included; unset it in a deployed function",
			slog.String("prefix", o.Prefix), slog.String(envDisabled, os.Getenv(envDisabled)))
	}
	// A wrapper (StoreWrapper) keeps the capabilities of what it wraps.
	getter, _ := StoreAs[BatchGetter](store)
	items, itemsAt, hasItems := storeAt[ItemStore](store)
	checker, checkerAt, hasChecker := storeAt[StagingChecker](store)
	committer, _ := StoreAs[Committer](store)
	idLimit := maxReadableID
	if l, ok := StoreAs[IDLimiter](store); ok {
		idLimit = min(idLimit, l.MaxIDBytes())
	}
	var marker EffectMarker
	if o.StoreEffect && !o.StagedOnly {
		var ok bool
		if marker, ok = StoreAs[EffectMarker](store); !ok {
			panic(fmt.Sprintf("lambdakit: Options.StoreEffect needs a store that implements lambdakit.EffectMarker; %T does not", store))
		}
	}
	if o.ReadableIDs && strings.Contains(o.Prefix, "#") {
		// "order" with key "eu#1" and "order#eu" with key "1" would be
		// one ID: two functions' records, taken for each other's.
		panic(fmt.Sprintf("lambdakit: Options.ReadableIDs needs a Prefix without '#'; %q has one", o.Prefix))
	}
	if o.StagedOnly && committer == nil {
		// A configuration that can never work: fail as the function
		// starts, not on its first message.
		panic(fmt.Sprintf("lambdakit: Options.StagedOnly needs a store that implements lambdakit.Committer; %T does not", store))
	}
	_, wrapped := store.(StoreWrapper)
	return &Once{store: store, getter: getter, items: items, committer: committer, checker: checker, marker: marker, idLimit: idLimit, opts: o, disabled: disabled,
		checksItems: hasItems && hasChecker && itemsAt == checkerAt,
		tellIDs:     o.ReadableIDs && wrapped,
		state:       &idempotencyState{flights: map[string]*flight{}, cache: newLRU(o.CacheSize)}}
}

// defaultTTL is how long a completed record is kept by default, and how
// long an in-progress record is kept when completed ones are kept forever
// (NeverExpire).
const defaultTTL = 7 * 24 * time.Hour

// NeverExpire, as Options.TTL, keeps completed records forever.
const NeverExpire time.Duration = -1

// forever reports whether completed records are kept forever.
func (e *Once) forever() bool { return e.opts.TTL < 0 }

// lockTTL is how long an in-progress record is kept, from its lock: the
// TTL, or for records kept forever the default, so that the lock of an
// owner that died does not stay forever.
func (e *Once) lockTTL() time.Duration {
	if e.forever() {
		return defaultTTL
	}
	return e.opts.TTL
}

// completedExpiration is the expiration of a record completed at now
// that was locked until expiration: the TTL counted from the completion
// (zero: never, with NeverExpire). A handler that ran for minutes must
// not shorten how long its work is remembered, nor may a record expire
// before its lock would have.
func (e *Once) completedExpiration(now, expiration time.Time) time.Time {
	if e.forever() {
		return time.Time{}
	}
	if done := now.Add(e.opts.TTL); done.After(expiration) {
		return roundUp(done, time.Second)
	}
	return expiration
}

// Do runs fn at most once to completion per key, and returns its result, or
// for a key completed before (a duplicate) the result it returned then,
// without running it (through Options.ResponseHook, if set):
//
//   - a new key is locked (conditional write), fn runs, and the record is
//     completed with fn's result, which should be JSON (it is stored as
//     text); with Stage, fn's own writes commit with the completion;
//   - a key in progress elsewhere fails with ErrInProgress; the lock ends at
//     the deadline of ctx (LeaseWithoutDeadline without one), so a crashed
//     owner blocks no longer than that, and fn's context ends with it;
//   - an error from fn releases the lock, so a retry can run at once;
//     but not after fn declared its external effect done (EffectDone):
//     then the record is completed with the failure, and the call, like
//     every later one with the key, fails permanently;
//   - calls with one key in this process wait for each other: they share
//     the first one's result, or run on their own if it failed or
//     outlived its lease.
//
// payload is what must be the same for every call with the key, usually
// the request: JSON is compared by value (escapes, spacing, member order
// and number spellings do not matter), anything else byte for byte; a
// different one fails with ErrPayloadMismatch. nil, or DisableValidation,
// skips the check. An empty key is ErrNoKey.
//
// With idempotency disabled (POWERTOOLS_IDEMPOTENCY_DISABLED, see Once), Do
// returns fn(ctx), checking nothing and storing nothing.
//
// The SQS middleware (Idempotent) and Do keep records alike: a key given
// to Do is the key a KeyFunc would derive, and its record ID is
// "<Prefix>#<sha256 hex of key>" ("<Prefix>#<key>" with ReadableIDs).
//
// With StagedOnly, fn runs first, before any store request, and its
// record is created completed with its writes in one request (see
// Options.StagedOnly).
func (e *Once) Do(ctx context.Context, key string, payload []byte, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	if e.disabled {
		return fn(ctx)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrNoKey)
	}
	var validation string
	if payload != nil && !e.opts.DisableValidation {
		p, err := payloadOf(payload)
		if err != nil {
			return nil, err
		}
		validation = KeyHash(p)
	}
	id, err := e.recordID(key)
	if err != nil {
		return nil, err
	}
	return e.do(ctx, id, validation, nil, fn)
}

// DoTyped is Do for typed requests and results: req, as JSON, is the payload,
// and fn's result is kept as JSON, so that a duplicate gets the first
// call's result back. A duplicate whose result could not be kept (see
// ErrResultNotStorable), because the store could not hold it or because
// json.Marshal refused it (NaN, say), gets the zero Res; the call that ran
// fn gets fn's result all the same, and fn does not run again. With
// idempotency disabled (see Once), DoTyped returns fn(ctx, req).
func DoTyped[Req, Res any](ctx context.Context, e *Once, key string, req Req, fn func(context.Context, Req) (Res, error)) (Res, error) {
	if e.disabled {
		return fn(ctx, req)
	}
	var zero Res
	payload, err := json.Marshal(req)
	if err != nil {
		return zero, fmt.Errorf("lambdakit: request as JSON: %w", err)
	}
	var unencoded *Res // fn's result, when it ran here and could not be encoded
	out, err := e.Do(ctx, key, payload, func(ctx context.Context) ([]byte, error) {
		res, err := fn(ctx, req)
		if err != nil {
			return nil, err
		}
		out, err := encodeResult(res)
		if err != nil {
			unencoded = &res
		}
		return out, err
	})
	if err == nil && unencoded != nil {
		return *unencoded, nil
	}
	if err != nil || len(out) == 0 {
		return zero, err
	}
	var res Res
	if err := json.Unmarshal(out, &res); err != nil {
		return zero, fmt.Errorf("lambdakit: cached result: %w", err)
	}
	return res, nil
}

// do is Do for a record ID and payload hash. prefetched, when not nil, may
// answer a duplicate from what its batch read ahead.
func (e *Once) do(ctx context.Context, id, validation string, prefetched func(now time.Time) (IdempotencyRecord, bool), fn func(context.Context) ([]byte, error)) ([]byte, error) {
	now := e.opts.Now()
	ctx = e.withReadableIDs(ctx)
	note := noteFrom(ctx)
	note.setID(id, e.keyAt())
	if rec, ok := e.state.cache.get(id, now); ok {
		return e.replay(ctx, rec, validation, dupCache)
	}
	if prefetched != nil {
		if rec, ok := prefetched(now); ok {
			e.state.cache.put(rec)
			return e.replay(ctx, rec, validation, dupStore)
		}
	}

	for {
		f, done := e.join(id, e.waitBound(ctx))
		if done == nil {
			result, rec, duplicate, err := e.lead(ctx, f, id, validation, now, fn)
			if duplicate {
				return e.replay(ctx, rec, validation, dupStore)
			}
			return result, err
		}
		leaseEnded := time.NewTimer(time.Until(f.leaseEnd))
		select {
		case <-done:
			leaseEnded.Stop()
		case <-ctx.Done():
			leaseEnded.Stop()
			return nil, ctx.Err()
		case <-leaseEnded.C:
			// The leader outlived its lease: in the store the
			// record may now be taken over, by any container, so by
			// this call too. Go to the store as a flight of its own.
			e.abandon(id, f)
			now = e.opts.Now()
			continue
		}
		if f.err == nil {
			return e.replay(ctx, f.rec, validation, dupCache)
		}
		// The earlier call failed, and released its lock: its failure
		// is not this call's (another payload may be fine, a permanent
		// failure must not send this one to the dead-letter queue
		// unrun). Go again, as if this call had come alone: lead, or
		// wait for whoever leads now.
		now = e.opts.Now()
	}
}

// waitBound is when the lease of a call on ctx ends on the wall clock, as
// lockRecord sets it, rounded up as the store keeps it: the most a call
// with the same key waits for it in this process. (lockRecord counts the
// lease from the engine's clock, Now, which only tests change.)
func (e *Once) waitBound(ctx context.Context) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(e.opts.LeaseWithoutDeadline)
	}
	return roundUp(deadline, time.Millisecond)
}

// lead processes the message as the flight's leader. However execute ends,
// the flight is left in a deferred call, so that waiters are never
// stranded: a panic, of the handler or of the store, becomes an error, and
// so does runtime.Goexit, which no recover stops but which runs deferred
// calls.
func (e *Once) lead(ctx context.Context, f *flight, id, validation string, now time.Time, fn func(context.Context) ([]byte, error)) (result []byte, rec IdempotencyRecord, duplicate bool, err error) {
	defer func() { e.leave(id, f, rec, err) }()
	pe := protect(func() {
		result, rec, duplicate, err = e.execute(ctx, id, validation, now, fn)
	}, func() {
		rec, err = IdempotencyRecord{}, ErrHandlerExited
	})
	if pe != nil {
		return nil, IdempotencyRecord{}, false, pe
	}
	return result, rec, duplicate, err
}

// execute runs fn at most once to completion for the record id: it locks the
// key, calls fn under the lock, and then completes the record with fn's
// result, or releases the key if fn failed. It returns fn's result and the
// record as stored; when the key was completed before, duplicate is true
// and rec is the stored record.
func (e *Once) execute(ctx context.Context, id, validation string, now time.Time, fn func(context.Context) ([]byte, error)) (result []byte, rec IdempotencyRecord, duplicate bool, err error) {
	if e.opts.StagedOnly {
		return e.runFirst(ctx, id, validation, now, fn)
	}
	rec = e.lockRecord(ctx, id, validation, now)
	existing, held, err := e.lock(ctx, rec, now)
	if err != nil {
		return nil, IdempotencyRecord{}, false, err
	}
	if !held {
		return e.taken("acquire", existing, validation)
	}
	cctx := e.cleanupContext(ctx, rec)
	defer cctx.stop()

	result, staged, effect, err := e.runHandler(ctx, rec, fn, func(effect string) {
		if effect != "" {
			// After the recovery point: never release (see EffectDone).
			rec.Effect = effect
			_ = e.completeFailed(cctx, rec, ErrHandlerExited)
			return
		}
		// Free the key as after a panic, so that a retry need not wait
		// for the lease to end.
		_ = e.release(cctx, id, rec.Lease)
	})
	rec.Effect = effect
	if err != nil && (effect != "" || errors.Is(err, ErrInvalidItem) && !panicked(err)) {
		// After the recovery point, any failure: a release would repeat
		// the effect. Or SetItem refused the handler's item: no delivery
		// can write it, and the work may have run. Either way the record
		// is completed with the failure, so that no delivery runs the
		// work again.
		return nil, IdempotencyRecord{}, false, e.completeFailed(cctx, rec, err)
	}
	if err != nil {
		return nil, IdempotencyRecord{}, false, e.unlock(cctx, rec, err)
	}
	if rec, err = e.commit(ctx, cctx, rec, result, staged); err != nil {
		return nil, IdempotencyRecord{}, false, err
	}
	return result, rec, false, nil
}

// runHandler runs fn for rec, with a stage of its own, and returns its
// result, what it staged, and the effect it declared (EffectDone). onGoexit
// runs if fn calls runtime.Goexit, which unwinds the caller's goroutine
// past the rest of its work, after fn's context has ended, with the effect
// declared by then.
func (e *Once) runHandler(ctx context.Context, rec IdempotencyRecord, fn func(context.Context) ([]byte, error), onGoexit func(effect string)) (result []byte, staged staging, effect string, err error) {
	st := &stage{lock: rec, keyAt: e.keyAt(), items: e.items, checker: e.checker, checksItems: e.checksItems, noEffect: e.opts.StagedOnly}
	if e.marker != nil {
		lock := rec // a copy for the closure: rec itself then stays on the stack
		st.mark = func(ctx context.Context, effect string) { e.markEffect(ctx, lock, effect) }
	}
	fctx, stop := e.handlerContext(ctx, st, rec)
	defer stop()
	result, err = call(fctx, fn, func() {
		stop()
		st.close()
		onGoexit(st.effectDone())
	})
	// From here on Stage fails: the writes are committed, or dropped, with
	// what the handler staged so far, and a write staged later (by a
	// goroutine the handler left running) must not vanish silently.
	staged = st.close()
	effect = st.effectDone()
	if errors.Is(err, ErrResultNotStorable) && !panicked(err) {
		// The work is done; only its result could not be encoded
		// (TypedResult, DoTyped). Complete without it, as when the store
		// cannot keep it: failing would run the work again.
		e.resultNotCached(ctx, rec.ID, err)
		result, err = nil, nil
	}
	return result, staged, effect, err
}

// runFirst is execute under StagedOnly: fn runs before any store request,
// then one Commit creates its record, completed, with fn's writes. A live
// record found instead is a duplicate (completed) or work in progress
// elsewhere (a two-step owner's lock), and fn's writes, never applied,
// are dropped. Nothing is locked, so nothing is released: a failure of fn
// or of the store leaves the key as it was.
func (e *Once) runFirst(ctx context.Context, id, validation string, now time.Time, fn func(context.Context) ([]byte, error)) (result []byte, rec IdempotencyRecord, duplicate bool, err error) {
	// The lease bounds fn's context as it does a two-step owner's, and
	// marks the record as this call's, should a retried request find it.
	rec = e.lockRecord(ctx, id, validation, now)
	result, staged, _, err := e.runHandler(ctx, rec, fn, func(string) {})
	if errors.Is(err, ErrInvalidItem) && !panicked(err) {
		// Nothing was written; no run can write this item.
		return nil, IdempotencyRecord{}, false, Permanent(err)
	}
	if err != nil {
		return nil, IdempotencyRecord{}, false, err
	}
	done := e.opts.Now()
	rec.Status = StatusCompleted
	rec.InProgressExpiration = time.Time{}
	rec.Expiration = e.completedExpiration(done, time.Time{})
	rec.Data, rec.Staged, rec.Item = result, staged.ops, staged.item
	existing, created, err := e.commitFirst(ctx, rec, done)
	if errors.Is(err, ErrResultNotStorable) && !panicked(err) {
		e.resultNotCached(ctx, id, err)
		rec.Data = nil
		existing, created, err = e.commitFirst(ctx, rec, done)
	}
	if err != nil {
		if rejected(err) {
			// No retry can commit these writes; nothing was applied,
			// so the message can go to the dead-letter queue as it is.
			err = Permanent(err)
		}
		return nil, IdempotencyRecord{}, false, err
	}
	// Our own record, from an attempt whose answer was lost: the writes
	// are applied, once.
	own := existing.Lease == rec.Lease && existing.Status == StatusCompleted
	if !created && !own {
		return e.taken("commit", existing, validation)
	}
	rec.Staged, rec.Item = nil, nil
	rec.Data = bytes.Clone(rec.Data)
	e.state.cache.put(rec)
	return result, rec, false, nil
}

// lockRecord is the record that locks id for a call on ctx: in progress,
// with a fresh lease that ends with the call's deadline, after which the
// call is gone and another owner may take the work over.
func (e *Once) lockRecord(ctx context.Context, id, validation string, now time.Time) IdempotencyRecord {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(e.opts.LeaseWithoutDeadline)
	}
	// The record must not expire while its owner may still be running,
	// whatever the TTL.
	expiration := now.Add(e.lockTTL())
	if deadline.After(expiration) {
		expiration = deadline
	}
	if e.marker != nil {
		// A record MarkEffect marks is taken over only once it expires:
		// keep it a TTL past its lease, as a completed record is kept a
		// TTL past its completion. Ending with the lease, it would expire
		// the moment a later delivery may come for it.
		expiration = deadline.Add(e.lockTTL())
	}
	return IdempotencyRecord{
		ID:                   id,
		Status:               StatusInProgress,
		Expiration:           expiration,
		InProgressExpiration: deadline,
		Validation:           validation,
		Lease:                newLease(now),
	}.Rounded()
}

// lock puts rec, to take its key for this call. held reports whether the
// call now holds the key; if not, existing is the record that stands in
// its way.
func (e *Once) lock(ctx context.Context, rec IdempotencyRecord, now time.Time) (existing IdempotencyRecord, held bool, err error) {
	existing, acquired, err := e.acquire(ctx, rec, now)
	if err != nil {
		// The put may have landed though its answer did not: free the
		// key if it holds our lease, so that a retry need not wait for
		// the lease to end. Release leaves anyone else's record alone.
		cctx := e.cleanupContext(ctx, rec)
		defer cctx.stop()
		if rerr := e.release(cctx, rec.ID, rec.Lease); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			err = errors.Join(err, rerr)
		}
		return IdempotencyRecord{}, false, err
	}
	// Our own lease in progress: the store retried a put whose first
	// answer was lost. We hold the key all the same.
	own := existing.Lease == rec.Lease && existing.Status == StatusInProgress
	return existing, acquired || own, nil
}

// taken answers a call that found its key taken by another owner's
// record, when the store's op (acquire or commit) refused to create its
// own: completed, the call is a duplicate of it; in progress, the work is
// being done elsewhere and the call fails for now, to be retried.
func (e *Once) taken(op string, existing IdempotencyRecord, validation string) (result []byte, rec IdempotencyRecord, duplicate bool, err error) {
	switch {
	case existing.Status == StatusCompleted && !existing.foreign():
		e.state.cache.put(existing)
		return nil, existing, true, nil
	case !existing.Status.Known() || existing.foreign():
		// An item under the record's key that no engine wrote: with
		// ReadableIDs, a business item written by other code; or a
		// status this engine does not know. It must not be
		// overwritten, nor taken for work in progress or done. What
		// the store holds is the failure, so it counts as one.
		return nil, IdempotencyRecord{}, false, e.storeErr(op, existing.ID, &NotARecordError{ID: existing.ID, Status: existing.Status})
	case validation != "" && existing.Validation != "" && existing.Validation != validation:
		return nil, IdempotencyRecord{}, false, ErrPayloadMismatch
	case existing.Effect != "" && !e.opts.Now().Before(existing.InProgressExpiration):
		// Its owner stopped after its effect (Options.StoreEffect),
		// and nobody recorded how it ended: running the work again
		// would repeat the effect.
		return nil, IdempotencyRecord{}, false, Permanent(fmt.Errorf("%w (record %s, effect: %s): its owner stopped after the effect, before completing; not run again",
			ErrFailedAfterEffect, e.loggedID(existing.ID), existing.Effect))
	default:
		return nil, IdempotencyRecord{}, false, fmt.Errorf("%w (lease ends %s)", ErrInProgress, existing.InProgressExpiration.UTC().Format(time.RFC3339))
	}
}

// cleanupContext is the context to complete or release rec in. Cleanup
// must happen even when the batch has cancelled ctx at its deadline guard:
// an unreleased lock delays the retry, an uncompleted record repeats the
// work. But not for longer than the lease: after it the record may be
// someone else's, and a hung call must not keep later messages with this
// key waiting in the container.
//
// The lease ends at ctx's deadline, on the wall clock, or without one
// LeaseWithoutDeadline after the engine's clock (Now): then its end is
// turned into a duration on that clock, as handlerContext does, since a
// wall-clock deadline would end cleanup at once for a clock behind it.
//
// The context takes its values from ctx, and its end from a cancelCtx of
// its own under a context shared by every record whose lease ends at the
// same instant (the records of a batch): one timer a batch rather than
// one a record. stop cancels it: a store call's leftover work ends with
// the cleanup, as it did with a context of its own.
func (e *Once) cleanupContext(ctx context.Context, rec IdempotencyRecord) *cleanupCtx {
	end := rec.InProgressExpiration
	if _, ok := ctx.Deadline(); !ok {
		end = time.Now().Add(rec.InProgressExpiration.Sub(e.opts.Now()))
	}
	return e.state.ends.until(ctx, end)
}

// cleanupCtx is a cleanup context (see cleanupContext): its Deadline, Done
// and Err are those of a cancelCtx under a shared leaseEnd; its values are
// the record context's.
type cleanupCtx struct {
	context.Context                    // under end.ctx: the end, no values
	cancel          context.CancelFunc // cancels Context
	values          context.Context    // the record's context
	end             *leaseEnd
	ends            *leaseEnds
	stopped         bool // guarded by ends.mu
}

// Value is the record context's value for key. The embedded context,
// asked first, has no values of its own: what it answers is the context
// package's own lookup of the cancelCtx behind Done, which a context
// derived from this one (an SDK attempt's deadline) needs to hang on it
// as a child, as on any context of the package. Without it the package
// would start a goroutine for each derived context to watch Done; and the
// record context's answer would name the batch's cancelCtx, whose
// cancellation the cleanup must outlive.
func (c *cleanupCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}

// stop cancels the context and releases its shared end; later calls do
// nothing.
func (c *cleanupCtx) stop() {
	c.cancel()
	c.ends.drop(c)
}

// A leaseEnd is a context that ends at one lease end, shared by the
// cleanup contexts of the records whose leases end then.
type leaseEnd struct {
	ctx    context.Context
	cancel context.CancelFunc
	refs   int // cleanup contexts not yet stopped; guarded by leaseEnds.mu
}

// leaseEnds holds the shared leaseEnds of one engine. An end no cleanup
// context uses any more stays for the records that may follow with the
// same end (the rest of a batch, run one after the other in a FIFO
// group), until a new end comes: then every unused end is cancelled,
// which stops its timer, and dropped. So a process keeps about as many as
// it runs cleanups at once, plus one.
type leaseEnds struct {
	mu   sync.Mutex
	ends map[int64]*leaseEnd
}

// until returns a cleanup context with ctx's values that ends at end, or
// when stopped.
func (l *leaseEnds) until(ctx context.Context, end time.Time) *cleanupCtx {
	c := &cleanupCtx{values: ctx, ends: l, end: l.hold(end)}
	c.Context, c.cancel = context.WithCancel(c.end.ctx)
	return c
}

// hold returns the leaseEnd that ends at end, made if need be, counted as
// used until drop.
func (l *leaseEnds) hold(end time.Time) *leaseEnd {
	key := end.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	le, ok := l.ends[key]
	if !ok {
		for k, unused := range l.ends {
			if unused.refs == 0 {
				unused.cancel()
				delete(l.ends, k)
			}
		}
		if l.ends == nil {
			l.ends = map[int64]*leaseEnd{}
		}
		le = &leaseEnd{}
		le.ctx, le.cancel = context.WithDeadline(context.Background(), end)
		l.ends[key] = le
	}
	le.refs++
	return le
}

// drop ends c's use of its leaseEnd, once.
func (l *leaseEnds) drop(c *cleanupCtx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.stopped {
		c.stopped = true
		c.end.refs--
	}
}

// handlerContext is the context fn runs in, carrying the stage its writes
// go to. Without a deadline on ctx it ends with the lease, as a Lambda
// invocation's does: past it another owner may take the record over, and
// fn must be told to stop. (With a deadline, the lease is it.) stop ends
// it.
func (e *Once) handlerContext(ctx context.Context, st *stage, rec IdempotencyRecord) (fctx context.Context, stop func()) {
	fctx = context.WithValue(ctx, stageKey{}, st)
	if _, ok := ctx.Deadline(); ok {
		return fctx, func() {}
	}
	return context.WithTimeout(fctx, rec.InProgressExpiration.Sub(e.opts.Now()))
}

// unlock releases the key after fn failed, so that a retry can run at once
// instead of waiting for the lease to end. It returns fn's error, joined
// with the release's when the key turned out to be lost.
func (e *Once) unlock(cctx context.Context, rec IdempotencyRecord, err error) error {
	if rerr := e.release(cctx, rec.ID, rec.Lease); rerr != nil && !e.releasedEarlier(cctx, rerr, rec) {
		err = errors.Join(err, e.leaseLost(rec.ID, "release", rerr))
	}
	return err
}

// commit completes rec with fn's result and staged writes: from then on
// the work is done for every container, and is never run again. It returns
// the record as stored.
func (e *Once) commit(ctx, cctx context.Context, rec IdempotencyRecord, result []byte, staged staging) (IdempotencyRecord, error) {
	rec.Status = StatusCompleted
	rec.Data = result
	rec.Staged, rec.Item, rec.Checked = staged.ops, staged.item, staged.checked
	rec.Expiration = e.completedExpiration(e.opts.Now(), rec.Expiration)
	err := e.complete(cctx, rec)
	if errors.Is(err, ErrResultNotStorable) && !panicked(err) {
		// The work is done; forgetting that would repeat it. Complete
		// without the result: duplicates then replay no result.
		e.resultNotCached(ctx, rec.ID, err)
		rec.Data = nil
		err = e.complete(cctx, rec)
	}
	if rec.Effect != "" {
		// After the recovery point a release would repeat the effect:
		// try again for as long as the lease lasts, the key locked.
		err = e.retryComplete(cctx, rec, err)
	}
	if rejected(err) {
		return IdempotencyRecord{}, e.completeFailed(cctx, rec, err)
	}
	if err != nil && rec.Effect != "" && !errors.Is(err, ErrLeaseLost) {
		// Never landed: the key stays locked until its lease ends (then
		// another owner may take it over; see EffectDone), and the
		// message fails permanently, for someone to reconcile. (A lost
		// lease is another owner's work now, and fails as usual.)
		return IdempotencyRecord{}, Permanent(afterEffect(rec.Effect, err))
	}
	if err != nil {
		err = e.leaseLost(rec.ID, "complete", err)
		if !errors.Is(err, ErrLeaseLost) {
			// Nothing is known to be committed; free the key for the
			// retry. Release refuses a record that did complete.
			if rerr := e.release(cctx, rec.ID, rec.Lease); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				err = errors.Join(err, rerr)
			}
		}
		return IdempotencyRecord{}, err
	}
	// The record outlives this call, in the cache and in the flight that
	// waiters replay: it holds what the store holds (no result when it
	// could not be kept, so that a duplicate gets the same answer in
	// every container), and it must not share the handler's buffer, which
	// the handler may reuse for another message's result.
	rec.Staged, rec.Item, rec.Checked = nil, nil, false
	rec.Data = bytes.Clone(rec.Data)
	e.state.cache.put(rec)
	return rec, nil
}

// resultNotCached warns that the record id completes without a result,
// for the reason err: the store cannot hold it, or it could not be encoded.
func (e *Once) resultNotCached(ctx context.Context, id string, err error) {
	e.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: result not cached",
		messageAttr(ctx), slog.String("recordId", e.loggedID(id)), slog.String("reason", hideKeyIn(err.Error(), e.keyAt(), id)))
}

// maxFailure bounds the reason a rejected completion leaves on its record:
// enough for the store's message, and small enough that the record itself
// can always be stored.
const maxFailure = 1024

// rejected reports whether a completion failed for a reason no retry can
// change.
func rejected(err error) bool {
	return (errors.Is(err, ErrCompletionRejected) || errors.Is(err, ErrStagingUnsupported)) && !panicked(err)
}

// panicked reports whether err is a panic. A panic's value may wrap any
// error, ErrResultNotStorable or ErrCompletionRejected among them, but a
// panic says only that the code stopped half-way: never that the work is
// done, nor that the store refused it for good.
func panicked(err error) bool {
	var pe *PanicError
	return errors.As(err, &pe)
}

// completeFailed handles a failure after which the work must not run
// again: a completion the store refused for good, an item SetItem refused,
// or any failure after the recovery point (rec.Effect, see EffectDone).
// Releasing the key, as after a store that was unavailable, would run the
// work again on every delivery; so the record is completed with the
// failure instead, and its effect, without result and staged writes, and
// the message fails permanently: with a dead-letter sender it goes to the
// DLQ at once, without one it comes back and fails again, without running
// the work, until the queue's redrive policy moves it. It returns the
// record's error.
func (e *Once) completeFailed(ctx context.Context, rec IdempotencyRecord, cause error) error {
	switch {
	case rec.Effect != "":
		cause = afterEffect(rec.Effect, cause)
	case !errors.Is(cause, ErrCompletionRejected):
		cause = fmt.Errorf("%w: %w", ErrCompletionRejected, cause)
	}
	rec.Status = StatusCompleted
	rec.Expiration = e.completedExpiration(e.opts.Now(), rec.Expiration)
	rec.Staged, rec.Data, rec.Item, rec.Checked = nil, nil, nil, false
	rec.Failure = truncate(cause.Error(), maxFailure)
	// The failure must be recorded: without it, the next delivery after
	// the lease ends runs the work again.
	if err := e.retryComplete(ctx, rec, e.complete(ctx, rec)); err != nil {
		// Not even the failure could be recorded. The key stays locked
		// (not released) until its lease ends: released, the work would
		// run again on the very next delivery.
		return Permanent(errors.Join(cause, e.leaseLost(rec.ID, "complete", err)))
	}
	e.state.cache.put(rec)
	return Permanent(cause)
}

// afterEffect marks cause, a failure after the recovery point, with
// ErrFailedAfterEffect and the effect declared.
func afterEffect(effect string, cause error) error {
	if errors.Is(cause, ErrFailedAfterEffect) {
		return cause
	}
	return fmt.Errorf("%w (effect: %s): %w", ErrFailedAfterEffect, effect, cause)
}

// retryComplete completes rec again after a completion that failed with
// err, for as long as err is transient and the lease lasts (ctx ends with
// it), with a doubling pause: the record stays locked under this lease
// meanwhile. It returns the last completion's error: nil once one landed.
func (e *Once) retryComplete(ctx context.Context, rec IdempotencyRecord, err error) error {
	pause := 20 * time.Millisecond
	for n := 0; err != nil && !errors.Is(err, ErrLeaseLost) && !rejected(err) && n < 1000; n++ {
		if !sleepCtx(ctx, pause) {
			return err
		}
		err = e.complete(ctx, rec)
		pause = min(2*pause, time.Second)
	}
	return err
}

// sleepCtx waits d, or until ctx ends; it reports whether it waited d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// releasedEarlier reports whether a release refused with ErrLeaseLost was
// in fact this owner's own, landed earlier: the store's client retried a
// delete whose answer was lost, and meanwhile another owner took the key.
//
// Nobody can take a key over before its lease ends, by the clock of
// whoever takes over: so while rec's lease lasts, another holder can only
// have found the key free. The holder, when the store can read it
// (BatchGetter, one request), tells by its own clock: the time its lease
// token starts with, before rec's lease ended, means it found the key
// free; after, it took it over (a clock ahead of this owner's, or a lease
// too short), which is a lost lease. When no holder can tell (the key is
// free again, its holder keeps no lease or one without a time, as another
// runtime's, or it cannot be read), this owner's clock decides: its lease
// had not ended, so the release landed. The one case this misreads: a
// takeover by a third owner whose clock ran ahead, who then released the
// key to the present holder; the record still fails with the handler's
// error, only the LeaseLost count is missed.
func (e *Once) releasedEarlier(ctx context.Context, err error, rec IdempotencyRecord) bool {
	if !errors.Is(err, ErrLeaseLost) {
		return false
	}
	if holder, ok := e.holder(ctx, rec.ID); ok {
		if holder.Lease == rec.Lease {
			return false // still ours, and refused: not a release that landed
		}
		if taken, ok := leaseTaken(holder.Lease); ok {
			return taken.Before(rec.InProgressExpiration)
		}
	}
	return e.opts.Now().Before(rec.InProgressExpiration)
}

// holder reads the record that now holds id, if the store can read it
// and one does.
func (e *Once) holder(ctx context.Context, id string) (IdempotencyRecord, bool) {
	if e.getter == nil || ctx.Err() != nil {
		return IdempotencyRecord{}, false
	}
	held, err := e.getter.GetRecords(ctx, []string{id})
	if err != nil {
		return IdempotencyRecord{}, false
	}
	rec, ok := held[id]
	return rec, ok
}

// acquire, complete and release make the store's requests, timing each for
// the invocation's metrics and marking its failures as *StoreError.
// The store's calls. A store that panics fails the call as an error does,
// so that the engine cleans up as after any store error: an acquire that
// landed before the panic is released, a completion that did not land
// frees the key. Left to unwind, the panic would skip that cleanup and
// leave the key locked until its lease ends.

func (e *Once) acquire(ctx context.Context, rec IdempotencyRecord, now time.Time) (existing IdempotencyRecord, acquired bool, err error) {
	defer noteFrom(ctx).storeCall(time.Now())
	if pe := protect(func() { existing, acquired, err = e.store.Acquire(ctx, rec, now) }, nil); pe != nil {
		return IdempotencyRecord{}, false, e.storeErr("acquire", rec.ID, pe)
	}
	return existing, acquired, e.storeErr("acquire", rec.ID, err)
}

func (e *Once) complete(ctx context.Context, rec IdempotencyRecord) (err error) {
	defer noteFrom(ctx).storeCall(time.Now())
	if pe := protect(func() { err = e.store.Complete(ctx, rec) }, nil); pe != nil {
		err = pe
	}
	return e.storeErr("complete", rec.ID, err)
}

func (e *Once) commitFirst(ctx context.Context, rec IdempotencyRecord, now time.Time) (existing IdempotencyRecord, created bool, err error) {
	defer noteFrom(ctx).storeCall(time.Now())
	if pe := protect(func() { existing, created, err = e.committer.Commit(ctx, rec, now) }, nil); pe != nil {
		return IdempotencyRecord{}, false, e.storeErr("commit", rec.ID, pe)
	}
	return existing, created, e.storeErr("commit", rec.ID, err)
}

// markEffect keeps the effect on rec's in-progress record
// (Options.StoreEffect), in a context that outlives a cancelled ctx until
// the lease ends. A failure is logged: the point still holds for every
// failure this process survives.
func (e *Once) markEffect(ctx context.Context, rec IdempotencyRecord, effect string) {
	cctx := e.cleanupContext(ctx, rec)
	defer cctx.stop()
	defer noteFrom(ctx).storeCall(time.Now())
	var err error
	if pe := protect(func() { err = e.marker.MarkEffect(cctx, rec.ID, rec.Lease, effect) }, nil); pe != nil {
		err = pe
	}
	if err != nil {
		e.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: effect not kept in the store; a crash before the completion would let the work run again",
			messageAttr(ctx), slog.String("recordId", e.loggedID(rec.ID)), slog.String("reason", hideKeyIn(err.Error(), e.keyAt(), rec.ID)))
	}
}

func (e *Once) release(ctx context.Context, id, lease string) (err error) {
	defer noteFrom(ctx).storeCall(time.Now())
	if pe := protect(func() { err = e.store.Release(ctx, id, lease) }, nil); pe != nil {
		err = pe
	}
	return e.storeErr("release", id, err)
}

// call runs fn, turning a panic into a *PanicError so that the record's
// lock is released like after any other failure. onGoexit runs if fn calls
// runtime.Goexit instead, which no recover stops.
func call(ctx context.Context, fn func(context.Context) ([]byte, error), onGoexit func()) (result []byte, err error) {
	if pe := protect(func() { result, err = fn(ctx) }, onGoexit); pe != nil {
		return nil, pe
	}
	return result, err
}

// replay answers a duplicate from a completed record, found in source.
func (e *Once) replay(ctx context.Context, rec IdempotencyRecord, validation string, source int) ([]byte, error) {
	if validation != "" && rec.Validation != "" && rec.Validation != validation {
		return nil, ErrPayloadMismatch
	}
	if rec.Failure != "" {
		// The work ran, but failed after its effect or its completion
		// was rejected (see completeFailed): never run it again, and
		// fail as the first delivery did.
		cause := ErrCompletionRejected
		if rec.Effect != "" {
			cause = ErrFailedAfterEffect
		}
		// The failure was stored by some version of lambdakit, perhaps
		// one that kept a store's text naming the record by its readable
		// ID: it is hidden here again, as the text was when stored.
		return nil, Permanent(fmt.Errorf("%w (record %s, work not run again): %s", cause, e.loggedID(rec.ID), hideKeyIn(rec.Failure, e.keyAt(), rec.ID)))
	}
	if note := noteFrom(ctx); note != nil {
		note.setDuplicate(source, len(rec.Data) > 0) // Batch logs the record's line
	} else {
		e.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "idempotency: duplicate skipped",
			slog.String("recordId", e.loggedID(rec.ID)))
	}
	// A copy: the caller, or the hook, may change what it gets, and the
	// cached record must answer the next duplicate the same. An empty
	// result is no result, as the stores keep it.
	var result []byte
	if len(rec.Data) > 0 {
		result = bytes.Clone(rec.Data)
	}
	if e.opts.ResponseHook == nil {
		return result, nil
	}
	rec.Data = result
	return e.respond(ctx, result, rec)
}

// respond runs the response hook on a replayed result. A panic in it
// fails the call as a *PanicError, as a handler's does, rather than
// unwinding through Do into the function, where under lambda.Start it
// ends the process and every invocation the process runs. Its error is
// marked as the hook's (see hookError).
func (e *Once) respond(ctx context.Context, result []byte, rec IdempotencyRecord) (out []byte, err error) {
	if pe := protect(func() { out, err = e.opts.ResponseHook(ctx, result, rec) }, nil); pe != nil {
		return nil, pe
	}
	if err != nil {
		err = &hookError{err: err}
	}
	return out, err
}

// hookError is an error the response hook returned, as it is: its
// message and chain are the hook's. The mark tells the SQS middleware
// that a payload mismatch in it is the hook's own (a nested Do's), no
// verdict on the message.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// leaseLost marks a store error that says the lease was lost as a
// *LeaseLostError, which Batch logs, once, with a LeaseLost metric: another
// owner took the work over, which means a lease (the invocation deadline)
// was too short or clocks disagree. Other errors are returned as they are.
func (e *Once) leaseLost(id, op string, err error) error {
	if !errors.Is(err, ErrLeaseLost) {
		return err
	}
	return &LeaseLostError{ID: e.loggedID(id), Prefix: e.opts.Prefix, Op: op, Err: err, storedID: id, keyAt: e.keyAt()}
}
