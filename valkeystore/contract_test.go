package valkeystore_test

import (
	"testing"

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

// The idempotency engine's checks (Once.Do, the SQS middleware).
func TestIdempotencyChecks(t *testing.T) {
	s := standalone(t)
	storetest.RunIdempotencyChecks(t, func(*testing.T) lambdakit.Store { return s })
}

func TestIdempotencyChecksOnCluster(t *testing.T) {
	s, _ := cluster(t)
	storetest.RunIdempotencyChecks(t, func(*testing.T) lambdakit.Store { return s })
}
