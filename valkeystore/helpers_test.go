package valkeystore_test

import (
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/valkeystore"
)

// newClient connects to addrs with the Lambda defaults, and closes the
// client when t ends.
func newClient(t testing.TB, addrs ...string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkeystore.WithLambdaDefaults(valkey.ClientOption{InitAddress: addrs}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newStore(t testing.TB, c valkey.Client) *valkeystore.Store {
	t.Helper()
	s, err := valkeystore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// standalone is a Store on a server of its own.
func standalone(t testing.TB) *valkeystore.Store {
	t.Helper()
	return newStore(t, newClient(t, redisserver.ForTest(t).Addr))
}

// cluster is a Store on a three-node cluster of its own.
func cluster(t testing.TB) (*valkeystore.Store, valkey.Client) {
	t.Helper()
	c := newClient(t, redisserver.ClusterForTest(t).Addrs()...)
	return newStore(t, c), c
}

// mustAcquire takes rec at now, which must be free.
func mustAcquire(t *testing.T, s *valkeystore.Store, rec lambdakit.IdempotencyRecord, now time.Time) {
	t.Helper()
	if _, ok, err := s.Acquire(callCtx(t), rec, now); err != nil || !ok {
		t.Fatalf("Acquire(%s): %v, %v; want acquired", rec.ID, ok, err)
	}
}
