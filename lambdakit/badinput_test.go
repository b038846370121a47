package lambdakit_test

import (
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// Bad input through Batch and Idempotent on the in-memory store: the rows of
// the bad-input table of docs/batch-processing.md that are not about the payment sample. The
// same rows run on DynamoDB (moto) in dynamostore's TestBadInput.
func TestBadInput(t *testing.T) {
	storetest.RunBadInput(t, func(t *testing.T) storetest.BadInputTarget {
		store := &lambdakittest.MemoryStore{}
		return storetest.BadInputTarget{
			Store: store,
			Statuses: func(*testing.T) map[string]lambdakit.IdempotencyStatus {
				out := map[string]lambdakit.IdempotencyStatus{}
				for id, rec := range store.Records() {
					out[id] = rec.Status
				}
				return out
			},
			// The memory store keeps any result.
		}
	})
}
