package lambdakit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// IdempotencyOptions configures Idempotent. The zero value of each field
// means its default.
type IdempotencyOptions struct {
	// Prefix namespaces the records of one function in a shared table:
	// IDs are "<Prefix>#<sha256 of key>". Default: the function name from
	// AWS_LAMBDA_FUNCTION_NAME, else "lambdakit". Set it explicitly when a
	// function may be renamed, or two functions must share records.
	Prefix string
	// TTL is how long a completed record is remembered. Default 7 days. It
	// must outlive every way a message can come back, including a replay
	// from the dead-letter queue (retention up to 14 days).
	TTL time.Duration
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
	// Logger receives the lines about duplicates and results that could
	// not be cached. (A lost lease is a record failure, a *LeaseLostError,
	// which Batch logs.) Default: JSON to standard error.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Idempotent returns a Middleware that runs the handler at most once to
// completion per idempotency key, using store for the records and key to
// derive the key of each message:
//
//   - a new key is locked (conditional write), the handler runs, and the
//     record is completed with the handler's result;
//   - a key completed before skips the handler and returns the cached
//     result;
//   - a key in progress in another invocation fails with ErrInProgress, so
//     the message is redelivered later; the lock ends at the owner's
//     invocation deadline, so a crashed owner blocks no longer than that;
//   - a handler error releases the lock, so a retry can run at once;
//   - messages with one key in this container wait for each other instead
//     of failing with ErrInProgress, and replay the first one's outcome.
func Idempotent(store Store, key KeyFunc, optFns ...func(*IdempotencyOptions)) Middleware {
	o := IdempotencyOptions{
		Prefix:               os.Getenv("AWS_LAMBDA_FUNCTION_NAME"),
		TTL:                  7 * 24 * time.Hour,
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
	if o.TTL <= 0 {
		o.TTL = 7 * 24 * time.Hour
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
	// One cache and one set of flights per middleware: they live as long as
	// the warm container.
	shared := &idempotencyState{flights: map[string]*flight{}, cache: newLRU(o.CacheSize)}
	getter, _ := store.(BatchGetter)
	return func(next Handler) Handler {
		return &idempotent{next: next, store: store, getter: getter, key: key, opts: o, state: shared}
	}
}

type idempotent struct {
	next   Handler
	store  Store
	getter BatchGetter // nil when the store cannot read ahead
	key    KeyFunc
	opts   IdempotencyOptions
	state  *idempotencyState
}

type idempotencyState struct {
	mu      sync.Mutex
	flights map[string]*flight
	cache   *lru
}

// A flight is one record being processed in this container; later messages
// with the same key wait on done and then replay rec or fail with err. The
// first waiter makes done (under the state's mutex), so the common case of
// no duplicate in flight costs no channel.
type flight struct {
	done chan struct{}
	rec  Record
	err  error
}

// Handle implements Handler.
func (m *idempotent) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	key, err := m.key(msg)
	if err != nil {
		// Only a message that truly has no key may run without
		// idempotency; ErrInvalidKey never does.
		if m.opts.ProcessWithoutKey && errors.Is(err, ErrNoKey) && !errors.Is(err, ErrInvalidKey) {
			return m.next.Handle(ctx, msg)
		}
		return nil, err
	}
	id := m.recordID(key)
	var validation string
	if m.opts.Payload != nil {
		p, err := m.opts.Payload(msg)
		if err != nil {
			return nil, err
		}
		validation = hashHex(p)
	}
	now := m.opts.Now()
	note := noteFrom(ctx)
	note.setID(id)
	if rec, ok := m.state.cache.get(id, now); ok {
		return m.replay(ctx, msg, rec, validation, dupCache)
	}
	if rec, ok := m.prefetched(ctx, msg, id, now); ok {
		m.state.cache.put(rec)
		return m.replay(ctx, msg, rec, validation, dupStore)
	}

	f, done := m.join(id)
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil && IsPermanent(f.err) {
			// This message did not run, so it is not known to fail
			// for good: it must not follow the earlier one into the
			// dead-letter queue, but come back and run on its own.
			return nil, fmt.Errorf("lambdakit: an earlier message with the same key failed permanently: %v", f.err)
		}
		if f.err != nil {
			return nil, fmt.Errorf("lambdakit: an earlier message with the same key failed: %w", f.err)
		}
		return m.replay(ctx, msg, f.rec, validation, dupCache)
	}
	result, rec, duplicate, err := m.lead(ctx, msg, f, id, validation, now)
	if duplicate {
		return m.replay(ctx, msg, rec, validation, dupStore)
	}
	return result, err
}

// join registers the caller as the one processing id and returns its flight,
// or returns a channel that is closed when the flight already processing id
// ends.
func (m *idempotent) join(id string) (f *flight, wait <-chan struct{}) {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	if f, ok := m.state.flights[id]; ok {
		if f.done == nil {
			f.done = make(chan struct{})
		}
		return f, f.done
	}
	f = &flight{}
	m.state.flights[id] = f
	return f, nil
}

func (m *idempotent) leave(id string, f *flight, rec Record, err error) {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	f.rec, f.err = rec, err
	delete(m.state.flights, id)
	if f.done != nil {
		close(f.done)
	}
}

// lead processes the message as the flight's leader. Whatever way run ends,
// the flight is left in a deferred call, so that waiters are never
// stranded: a panic, of the handler or of the store, becomes an error, and
// so does runtime.Goexit, which no recover stops but which runs deferred
// calls.
func (m *idempotent) lead(ctx context.Context, msg *events.SQSMessage, f *flight, id, validation string, now time.Time) (result []byte, rec Record, duplicate bool, err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			result, rec, duplicate, err = nil, Record{}, false, newPanicError(p)
		} else if !returned {
			rec, err = Record{}, ErrHandlerExited
		}
		m.leave(id, f, rec, err)
	}()
	result, rec, duplicate, err = m.run(ctx, msg, id, validation, now)
	returned = true
	return result, rec, duplicate, err
}

// run acquires the record, runs the handler and completes or releases the
// record. It returns the handler's result and the record as stored; when the
// key was completed before, duplicate is true and rec is the stored record.
func (m *idempotent) run(ctx context.Context, msg *events.SQSMessage, id, validation string, now time.Time) (result []byte, rec Record, duplicate bool, err error) {
	var cctx context.Context // for cleanup, made once the record may be ours
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(m.opts.LeaseWithoutDeadline)
	}
	// The record must not expire while its owner may still be running,
	// whatever the TTL.
	expiration := now.Add(m.opts.TTL)
	if deadline.After(expiration) {
		expiration = deadline
	}
	rec = Record{
		ID:                   id,
		Status:               StatusInProgress,
		Expiration:           expiration,
		InProgressExpiration: deadline,
		Validation:           validation,
		Lease:                newLease(),
	}.Rounded()
	existing, acquired, err := m.acquire(ctx, rec, now)
	if err != nil || acquired || existing.Lease == rec.Lease {
		// Cleanup (Complete, Release) must happen even when the batch
		// has cancelled ctx at its deadline guard: an unreleased lock
		// delays the retry, an uncompleted record repeats the work. But
		// not for longer than the lease: after it the record may be
		// someone else's, and a hung call must not keep later messages
		// with this key waiting in the container.
		var cancel context.CancelFunc
		cctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), rec.InProgressExpiration)
		defer cancel()
	}
	switch {
	case err != nil:
		// The put may have landed though its answer did not: free the
		// key if it holds our lease, so that a retry need not wait for
		// the lease to end. Release leaves anyone else's record alone.
		if rerr := m.release(cctx, id, rec.Lease); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			err = errors.Join(err, rerr)
		}
		return nil, Record{}, false, err
	case acquired:
	case existing.Lease == rec.Lease && existing.Status == StatusInProgress:
		// Our own lock: the store retried a put whose first answer was
		// lost. We hold it.
	case existing.Status == StatusCompleted:
		m.state.cache.put(existing)
		return nil, existing, true, nil
	case validation != "" && existing.Validation != "" && existing.Validation != validation:
		return nil, Record{}, false, ErrPayloadMismatch
	default:
		return nil, Record{}, false, fmt.Errorf("%w (lease ends %s)", ErrInProgress, existing.InProgressExpiration.UTC().Format(time.RFC3339))
	}

	st := &stage{}
	returned := false
	defer func() {
		if !returned {
			// The handler called runtime.Goexit: free the key as
			// after a panic, so that a retry need not wait for the
			// lease to end.
			_ = m.release(cctx, id, rec.Lease)
		}
	}()
	result, err = m.call(context.WithValue(ctx, stageKey{}, st), msg)
	returned = true
	if err != nil {
		if rerr := m.release(cctx, id, rec.Lease); rerr != nil {
			err = errors.Join(err, m.leaseLost(id, "release", rerr))
		}
		return nil, Record{}, false, err
	}

	rec.Status = StatusCompleted
	rec.Data = result
	rec.Staged = st.take()
	// The TTL counts from the completion, not from the lock: a handler
	// that ran for minutes must not shorten how long its work is
	// remembered.
	if done := m.opts.Now().Add(m.opts.TTL); done.After(rec.Expiration) {
		rec.Expiration = done
		rec = rec.Rounded()
	}
	err = m.complete(cctx, rec)
	if errors.Is(err, ErrResultNotStorable) {
		// The work is done; forgetting that would repeat it. Complete
		// without the result: duplicates then replay no result.
		m.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "idempotency: result not cached",
			slog.String("messageId", msg.MessageId), slog.String("id", id), slog.String("reason", err.Error()))
		rec.Data = nil
		err = m.complete(cctx, rec)
	}
	if err != nil {
		err = m.leaseLost(id, "complete", err)
		if !errors.Is(err, ErrLeaseLost) {
			// Nothing is known to be committed; free the key for the
			// retry. Release refuses a record that did complete.
			if rerr := m.release(cctx, id, rec.Lease); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				err = errors.Join(err, rerr)
			}
		}
		return nil, Record{}, false, err
	}
	// The record outlives this call, in the cache and in the flight that
	// waiters replay: it must not share the handler's buffer, which the
	// handler may reuse for another message's result.
	rec.Staged = nil
	rec.Data = bytes.Clone(result)
	m.state.cache.put(rec)
	return result, rec, false, nil
}

// acquire, complete and release make the store's requests, timing each for
// the invocation's metrics and marking its failures as *StoreError.
func (m *idempotent) acquire(ctx context.Context, rec Record, now time.Time) (Record, bool, error) {
	defer noteFrom(ctx).storeCall(time.Now())
	existing, acquired, err := m.store.Acquire(ctx, rec, now)
	return existing, acquired, storeErr("acquire", err)
}

func (m *idempotent) complete(ctx context.Context, rec Record) error {
	defer noteFrom(ctx).storeCall(time.Now())
	return storeErr("complete", m.store.Complete(ctx, rec))
}

func (m *idempotent) release(ctx context.Context, id, lease string) error {
	defer noteFrom(ctx).storeCall(time.Now())
	return storeErr("release", m.store.Release(ctx, id, lease))
}

// call runs the next handler, turning a panic into a *PanicError so that the
// record's lock is released like after any other failure.
func (m *idempotent) call(ctx context.Context, msg *events.SQSMessage) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newPanicError(p)
		}
	}()
	return m.next.Handle(ctx, msg)
}

// replay answers a duplicate from a completed record, found in source.
func (m *idempotent) replay(ctx context.Context, msg *events.SQSMessage, rec Record, validation string, source int) ([]byte, error) {
	if validation != "" && rec.Validation != "" && rec.Validation != validation {
		return nil, ErrPayloadMismatch
	}
	if note := noteFrom(ctx); note != nil {
		note.setDuplicate(source, rec.Data != nil) // Batch logs the record's line
	} else {
		m.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "idempotency: duplicate skipped",
			slog.String("messageId", msg.MessageId), slog.String("id", rec.ID))
	}
	// A copy: the caller may change what it gets, and the cached record
	// must answer the next duplicate the same.
	return bytes.Clone(rec.Data), nil
}

// leaseLost marks a store error that says the lease was lost as a
// *LeaseLostError, which Batch logs, once, with a LeaseLost metric: another
// owner took the work over, which means a lease (the invocation deadline)
// was too short or clocks disagree. Other errors are returned as they are.
func (m *idempotent) leaseLost(id, op string, err error) error {
	if !errors.Is(err, ErrLeaseLost) {
		return err
	}
	return &LeaseLostError{ID: id, Prefix: m.opts.Prefix, Op: op, Err: err}
}

func (m *idempotent) recordID(key string) string {
	sum := sha256.Sum256(bytesOf(key))
	b := make([]byte, 0, len(m.opts.Prefix)+1+2*len(sum))
	b = append(b, m.opts.Prefix...)
	b = append(b, '#')
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}

func hashHex(p string) string {
	sum := sha256.Sum256(bytesOf(p))
	return hex.EncodeToString(sum[:])
}

// newLease returns a 128-bit random token. It fences owners apart, it is no
// secret, so the fast runtime generator will do.
func newLease() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}
