package valkeystore_test

import (
	"context"
	"fmt"
	"strconv"
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

// A stored time that is no number as lambdakit reads one (padded with
// white space, hexadecimal, cut by a NUL byte) fails closed: the record is
// never taken over, as on DynamoDB, where such a value is no number and
// its comparison with now is false. Lua's tonumber reads each of them as
// a number long past, and the acquire script took the record over: the
// work ran again, over a completion or a live lease. Each row keeps every
// other field valid and live.
func TestAcquireNeverTakesOverARecordWhoseTimeIsNoNumber(t *testing.T) {
	srv := redisserver.ForTest(t)
	s := newStore(t, newClient(t, srv.Addr))
	now := time.Now()
	exp := strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
	leaseEnd := strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10)
	for i, bad := range []string{" 5 ", "\t1\n", "0x10", "5\x00x"} {
		for _, row := range []struct {
			status, field string
		}{
			{"COMPLETED", "expiration"},
			{"INPROGRESS", "expiration"},
			{"INPROGRESS", "in_progress_expiration"},
		} {
			id := fmt.Sprintf("no-number-%d-%s-%s", i, row.status, row.field)
			fields := map[string]string{"status": row.status, "lease": "first", "expiration": exp, "in_progress_expiration": leaseEnd, "data": `"charged"`}
			fields[row.field] = bad
			args := []string{"HSET", s.Key(id)}
			for name, v := range fields {
				args = append(args, name, v)
			}
			if _, err := srv.Do(args...); err != nil {
				t.Fatal(err)
			}
			rec := lambdakit.IdempotencyRecord{ID: id, Status: lambdakit.StatusInProgress,
				Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "second"}
			old, ok, err := s.Acquire(callCtx(t), rec, now)
			if ok || err == nil {
				t.Errorf("%s %s %q: Acquire = %+v, acquired=%v, %v; want an error, the record left as it is", row.status, row.field, bad, old, ok, err)
			}
			if lease, err := srv.Do("HGET", s.Key(id), "lease"); err != nil || lease != "first" {
				t.Errorf("%s %s %q: lease after the Acquire = %q, %v; want first", row.status, row.field, bad, lease, err)
			}
		}
	}
}

// The same through the engine: a payment completed under a record whose
// expiration another writer padded with a space is not charged again.
func TestWorkDoesNotRunOverACompletionWhoseTimeIsNoNumber(t *testing.T) {
	srv := redisserver.ForTest(t)
	s := newStore(t, newClient(t, srv.Addr))
	id := lambdakit.RecordID("pay", "pay-1")
	if _, err := srv.Do("HSET", s.Key(id), "status", "COMPLETED", "lease", "first", "data", `"charged"`,
		"expiration", " "+strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)); err != nil {
		t.Fatal(err)
	}
	runs := 0
	_, err := lambdakit.NewOnce(s, quiet, func(o *lambdakit.Options) { o.Prefix = "pay" }).Do(callCtx(t), "pay-1", nil,
		func(context.Context) ([]byte, error) { runs++; return []byte(`"charged again"`), nil })
	if err == nil || runs != 0 {
		t.Errorf("Do over the completion: %v after %d runs; want an error and no run", err, runs)
	}
}
