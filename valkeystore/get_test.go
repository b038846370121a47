package valkeystore_test

import (
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit"
)

// Keys GetRecords cannot read as records, which another program put under
// record keys (a string, a hash whose expiration is no number), are left
// out, as if they held no record; the record beside them is still read.
func TestGetRecordsLeavesOutKeysItCannotRead(t *testing.T) {
	srv := redisserver.ForTest(t)
	s := newStore(t, newClient(t, srv.Addr))
	now := time.Now()
	mustAcquire(t, s, lambdakit.IdempotencyRecord{ID: "orders#o-1", Status: lambdakit.StatusInProgress,
		Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "l"}, now)
	if _, err := srv.Do("SET", s.Key("orders#o-2"), `{"status":"COMPLETED"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("HSET", s.Key("orders#o-3"), "status", "COMPLETED", "expiration", "soon"); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRecords(callCtx(t), []string{"orders#o-1", "orders#o-2", "orders#o-3"})
	if err != nil {
		t.Fatalf("GetRecords: %v", err)
	}
	if len(got) != 1 || got["orders#o-1"].Lease != "l" {
		t.Errorf("got %v; want the record orders#o-1 only", got)
	}
}
