package valkeystore_test

import (
	"strconv"
	"testing"

	"github.com/lambdakit/lambdakit/valkeystore"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// The contract the in-memory and DynamoDB stores meet, on a real
// redis-server: one server, and a three-node cluster.
func TestStoreContract(t *testing.T) {
	s := standalone(t)
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store { return s })
}

func TestStoreContractOnCluster(t *testing.T) {
	s, _ := cluster(t)
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store { return s })
}

// Hashes other code wrote under a record's key with a status that is no
// record status, on one server and on a cluster.
func TestUnknownStatusContract(t *testing.T) {
	s := standalone(t)
	storetest.RunUnknownStatusContract(t, func(*testing.T) lambdakit.Store { return s }, putHash)
}

func TestUnknownStatusContractOnCluster(t *testing.T) {
	s, _ := cluster(t)
	storetest.RunUnknownStatusContract(t, func(*testing.T) lambdakit.Store { return s }, putHash)
}

// putHash writes rec's hash as it is, with the fields valkeystore reads,
// zero fields left out.
func putHash(t *testing.T, s lambdakit.Store, rec lambdakit.IdempotencyRecord) {
	t.Helper()
	vs := s.(*valkeystore.Store)
	fields := map[string]string{"lease": rec.Lease, "status": string(rec.Status), "data": string(rec.Data), "validation": rec.Validation}
	if !rec.Expiration.IsZero() {
		fields["expiration"] = strconv.FormatInt(rec.Expiration.Unix(), 10)
	}
	if !rec.InProgressExpiration.IsZero() {
		fields["in_progress_expiration"] = strconv.FormatInt(rec.InProgressExpiration.UnixMilli(), 10)
	}
	cmd := vs.Client().B().Hset().Key(vs.Key(rec.ID)).FieldValue()
	for name, v := range fields {
		if v != "" {
			cmd = cmd.FieldValue(name, v)
		}
	}
	if err := vs.Client().Do(t.Context(), cmd.Build()).Error(); err != nil {
		t.Fatalf("HSET %s: %v", rec.ID, err)
	}
}

// The idempotency engine's checks (Once.Do, the SQS middleware).
func TestIdempotencyChecks(t *testing.T) {
	s := standalone(t)
	storetest.RunIdempotencyChecks(t, func(*testing.T) lambdakit.Store { return s })
}

func TestIdempotencyChecksOnCluster(t *testing.T) {
	s, _ := cluster(t)
	storetest.RunIdempotencyChecks(t, func(*testing.T) lambdakit.Store { return s })
}

// A crashed process's record on Valkey: locked until its lease ends, then
// taken over; with StoreEffect, not run again.
func TestCrashChecks(t *testing.T) {
	s := standalone(t)
	storetest.RunCrashChecks(t, func(*testing.T) lambdakit.Store { return s })
}
