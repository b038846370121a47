package dynamostore_test

import (
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The same contract the in-memory store meets, on DynamoDB (moto).
func TestStoreContract(t *testing.T) {
	f := setup(t)
	lambdakittest.RunStoreContract(t, func(*testing.T) lambdakit.Store { return f.store })
}

// The idempotency engine (Idempotency.Do) on DynamoDB, held to the same
// checks as on the memory store.
func TestIdempotencyChecks(t *testing.T) {
	lambdakittest.RunIdempotencyChecks(t, func(t *testing.T) lambdakit.Store { return setup(t).store })
}
