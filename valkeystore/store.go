package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/internal/storedtime"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// DefaultKeyPrefix is what the keys of records start with unless
// Options.KeyPrefix says otherwise.
const DefaultKeyPrefix = "idempotency:"

// DefaultExpiryGrace is how long a key outlives its record by default.
//
// The scripts decide whether a record counts by the caller's clock; the
// key's expiry is kept by the server's. A server clock ahead of the
// caller's would delete a record, a lease included, while the caller
// still counts it: a second owner could run the work. The grace covers
// any skew between synchronised clocks many times over, and costs a
// record's memory for one more minute.
const DefaultExpiryGrace = time.Minute

// Options configure a Store. A zero field means its default.
type Options struct {
	// KeyPrefix starts every record's key, so that records can share a
	// database with other data. Default DefaultKeyPrefix.
	KeyPrefix string
	// ExpiryGrace is how long the server keeps a key after its record
	// stopped counting; see DefaultExpiryGrace. Default DefaultExpiryGrace.
	ExpiryGrace time.Duration
}

// ErrInvalidConfig is what New returns, wrapped with the reason, for a
// configuration that could never work.
var ErrInvalidConfig = errors.New("valkeystore: invalid configuration")

// Store is a lambdakit.Store on Valkey or Redis (standalone, or a cluster).
// It is safe for concurrent use.
type Store struct {
	client valkey.Client
	o      Options
}

var (
	_ lambdakit.Store       = (*Store)(nil)
	_ lambdakit.BatchGetter = (*Store)(nil)
)

// New returns a Store that keeps its records through client. Create the
// client once per container, at init, with WithLambdaDefaults. New sends
// nothing; Check asks the server whether it may evict records.
func New(client valkey.Client, optFns ...func(*Options)) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no client", ErrInvalidConfig)
	}
	var o Options
	for _, fn := range optFns {
		if fn != nil {
			fn(&o)
		}
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if o.ExpiryGrace < 0 {
		return nil, fmt.Errorf("%w: negative ExpiryGrace %v", ErrInvalidConfig, o.ExpiryGrace)
	}
	if o.ExpiryGrace == 0 {
		o.ExpiryGrace = DefaultExpiryGrace
	}
	return &Store{client: client, o: o}, nil
}

// Client returns the client the store sends its commands through.
func (s *Store) Client() valkey.Client { return s.client }

// Key returns the key that holds the record id.
func (s *Store) Key(id string) string { return s.o.KeyPrefix + id }

// keyExpiry is when the server may forget a record that stops counting at
// exp: epoch milliseconds, as PEXPIREAT takes; "" for a record kept
// forever (a zero exp: lambdakit.NeverExpire), whose key gets no expiry.
func (s *Store) keyExpiry(exp time.Time) string {
	if exp.IsZero() {
		return ""
	}
	return strconv.FormatInt(exp.Add(s.o.ExpiryGrace).UnixMilli(), 10)
}

// expiration is exp in epoch seconds, as the record's field holds it; ""
// for a record kept forever, which has no such field.
func expiration(exp time.Time) string {
	if exp.IsZero() {
		return ""
	}
	return strconv.FormatInt(exp.Unix(), 10)
}

// Acquire creates rec as an in-progress record unless a live record holds
// rec.ID, in one script: when one does, the script returns it, and so does
// Acquire, with no second request.
//
// Times are stored rounded up as on every store
// (lambdakit.IdempotencyRecord.Rounded): Expiration to the second,
// InProgressExpiration to the millisecond; the script compares them with
// now, the caller's clock, in the same units rounded down.
func (s *Store) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	rec = rec.Rounded()
	res := acquireScript.Exec(ctx, s.client, []string{s.Key(rec.ID)}, []string{
		strconv.FormatInt(now.Unix(), 10),
		strconv.FormatInt(now.UnixMilli(), 10),
		rec.Lease,
		expiration(rec.Expiration),
		strconv.FormatInt(rec.InProgressExpiration.UnixMilli(), 10),
		rec.Validation,
		s.keyExpiry(rec.Expiration),
	})
	vals, err := res.ToArray()
	switch {
	case valkey.IsValkeyNil(err):
		return lambdakit.IdempotencyRecord{}, true, nil
	case err != nil:
		return lambdakit.IdempotencyRecord{}, false, callErr("acquire", rec.ID, err)
	}
	existing, err := decode(rec.ID, vals)
	if err != nil {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("valkeystore: acquire %s: reading the live record: %w", rec.ID, err)
	}
	return existing, false, nil
}

var _ lambdakit.StagingChecker = (*Store)(nil)

// CheckStaging implements lambdakit.StagingChecker: it refuses every
// staged write, with an error wrapping lambdakit.ErrStagingUnsupported,
// when lambdakit.Stage (or an outbox's Publish) stages it, before the
// rest of the work: Complete could not commit it, and the work, its
// effect perhaps done, would be completed with the failure instead.
func (s *Store) CheckStaging(rec lambdakit.IdempotencyRecord) error {
	if len(rec.Staged) > 0 {
		return fmt.Errorf("valkeystore: %w", noStaging(len(rec.Staged)))
	}
	return nil
}

// noStaging is why the store refuses n staged writes.
func noStaging(n int) error {
	return fmt.Errorf("%d staged writes: Valkey and Redis cannot commit a handler's writes atomically with the completion (use dynamostore for single-phase mode): %w",
		n, lambdakit.ErrStagingUnsupported)
}

// Complete marks the record completed with rec.Expiration, rec.Data and,
// if set, rec.Validation, rec.Failure and rec.Effect, provided it still carries
// rec.Lease, in one script; otherwise it returns an error wrapping
// lambdakit.ErrLeaseLost and changes nothing. An empty rec.Data removes
// any cached result.
//
// Staged writes (lambdakit.Stage) cannot commit atomically with a
// completion on this store: with any, Complete sends nothing and returns
// an error wrapping lambdakit.ErrStagingUnsupported.
func (s *Store) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	if len(rec.Staged) > 0 {
		return fmt.Errorf("valkeystore: complete %s: %w", rec.ID, noStaging(len(rec.Staged)))
	}
	rec = rec.Rounded()
	hasData, data := "0", ""
	if len(rec.Data) > 0 {
		hasData, data = "1", string(rec.Data)
	}
	n, err := completeScript.Exec(ctx, s.client, []string{s.Key(rec.ID)}, []string{
		rec.Lease,
		expiration(rec.Expiration),
		s.keyExpiry(rec.Expiration),
		rec.Validation,
		rec.Failure,
		hasData,
		data,
		rec.Effect,
	}).AsInt64()
	switch {
	case err != nil:
		return callErr("complete", rec.ID, err)
	case n == 0:
		return fmt.Errorf("valkeystore: complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	}
	return nil
}

var _ lambdakit.EffectMarker = (*Store)(nil)

// MarkEffect implements lambdakit.EffectMarker: it sets the record's
// effect field if the record is in progress under lease, in one script;
// then the acquire script never replaces it until it expires. Otherwise
// it returns an error wrapping lambdakit.ErrLeaseLost.
func (s *Store) MarkEffect(ctx context.Context, id, lease, effect string) error {
	n, err := markEffectScript.Exec(ctx, s.client, []string{s.Key(id)}, []string{lease, effect}).AsInt64()
	switch {
	case err != nil:
		return callErr("mark effect", id, err)
	case n == 0:
		return fmt.Errorf("valkeystore: mark effect %s: %w", id, lambdakit.ErrLeaseLost)
	}
	return nil
}

// Release deletes the record, so that a retry can run at once, provided it
// is still in progress under lease, in one script. A record that is
// already gone counts as released. Otherwise it returns an error wrapping
// lambdakit.ErrLeaseLost, and the record stays.
func (s *Store) Release(ctx context.Context, id, lease string) error {
	n, err := releaseScript.Exec(ctx, s.client, []string{s.Key(id)}, []string{lease}).AsInt64()
	switch {
	case err != nil:
		return callErr("release", id, err)
	case n == 0:
		return fmt.Errorf("valkeystore: release %s: %w", id, lambdakit.ErrLeaseLost)
	}
	return nil
}

// callErr wraps a failed call. A server out of memory under the
// noeviction policy refuses writes for lack of capacity: that is
// lambdakit.ErrThrottled, and the record comes back with its message.
func callErr(op, id string, err error) error {
	if ve, ok := valkey.IsValkeyErr(err); ok && strings.HasPrefix(ve.Error(), "OOM") {
		return fmt.Errorf("valkeystore: %s %s: %w: %w", op, id, lambdakit.ErrThrottled, err)
	}
	return fmt.Errorf("valkeystore: %s %s: %w", op, id, err)
}

// decode reads the fields of record id, in the order of fields. Values
// that are not what this package writes are an error: guessing could hand
// a duplicate someone else's result.
func decode(id string, vals []valkey.ValkeyMessage) (lambdakit.IdempotencyRecord, error) {
	if len(vals) != len(fields) {
		return lambdakit.IdempotencyRecord{}, fmt.Errorf("got %d fields; want %d", len(vals), len(fields))
	}
	str := func(i int) string {
		s, _ := vals[i].ToString() // nil: the field is absent, ""
		return s
	}
	rec := lambdakit.IdempotencyRecord{
		ID:         id,
		Status:     lambdakit.IdempotencyStatus(str(0)),
		Validation: str(3),
		Lease:      str(5),
		Failure:    str(6),
		Effect:     str(7),
	}
	if d := str(4); d != "" { // empty is no result, as on every store
		rec.Data = []byte(d)
	}
	if sec, ok, err := integer(str(1)); err != nil {
		return rec, fmt.Errorf("field %q: %w", fExpiration, err)
	} else if ok {
		rec.Expiration = storedtime.Unix(sec)
	}
	if ms, ok, err := integer(str(2)); err != nil {
		return rec, fmt.Errorf("field %q: %w", fInProgress, err)
	} else if ok {
		rec.InProgressExpiration = time.UnixMilli(ms)
	}
	return rec, nil
}

// integer parses a stored time as the scripts compare it (see
// storedtime.Number).
func integer(s string) (int64, bool, error) {
	if s == "" {
		return 0, false, nil
	}
	if n, ok := storedtime.Number(s); ok {
		return n, true, nil
	}
	return 0, false, fmt.Errorf("%q is not a number", s)
}
