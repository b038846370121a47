package valkeystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// A record completed with no expiration (Options.TTL NeverExpire: "for
// work that must never be repeated, such as a payment") must stay, and a
// later Acquire must get it back, with its result. The store turns the
// zero Expiration into PEXPIREAT at year 1 plus the grace (a negative
// timestamp, which deletes the key at once) and an expiration field of
// -62135596800, which the acquire script reads as long expired.
func TestNeverExpireCompletionIsKept(t *testing.T) {
	srv := redisserver.ForTest(t)
	s := newStore(t, newClient(t, srv.Addr))
	now := time.Now()
	rec := lambdakit.IdempotencyRecord{ID: "forever", Status: lambdakit.StatusInProgress,
		Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "first"}
	if _, ok, err := s.Acquire(callCtx(t), rec, now); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	done := rec
	done.Status, done.Expiration, done.Data = lambdakit.StatusCompleted, time.Time{}, []byte(`"charged"`)
	if err := s.Complete(callCtx(t), done); err != nil {
		t.Fatalf("Complete with no expiration: %v", err)
	}
	if n, err := srv.Do("EXISTS", s.Key(rec.ID)); err != nil || n != "1" {
		t.Errorf("EXISTS %s after a completion kept forever = %s, %v; want 1 (the server deleted it)", s.Key(rec.ID), n, err)
	}
	other := rec
	other.Lease, other.InProgressExpiration = "second", now.Add(time.Hour)
	old, ok, err := s.Acquire(callCtx(t), other, now.Add(time.Second))
	if err != nil || ok || old.Status != lambdakit.StatusCompleted || string(old.Data) != `"charged"` || !old.Expiration.IsZero() {
		t.Fatalf("Acquire a second after a completion kept forever: %+v, acquired=%v, %v; want refused with the completed record and its result", old, ok, err)
	}
}

// The same through the engine: with NeverExpire the work runs twice.
func TestNeverExpireWorkRunsOnce(t *testing.T) {
	s := standalone(t)
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte(`"charged"`), nil }
	opts := func(o *lambdakit.Options) { quiet(o); o.TTL = lambdakit.NeverExpire }
	if _, err := lambdakit.NewOnce(s, opts).Do(callCtx(t), "pay-1", []byte(`{"n":1}`), fn); err != nil {
		t.Fatal(err)
	}
	// Another container: no cache, only the store.
	got, err := lambdakit.NewOnce(s, opts).Do(callCtx(t), "pay-1", []byte(`{"n":1}`), fn)
	if err != nil || string(got) != `"charged"` || runs != 1 {
		t.Errorf("duplicate with NeverExpire: got %s, %v after %d runs; want the first result and 1 run", got, err, runs)
	}
}
