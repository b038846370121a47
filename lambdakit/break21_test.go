package lambdakit_test

import (
	"context"
	"testing"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// Tests from a review told to break the cost modes. Each fails on the
// code it was written against.

// With ReadableIDs the ID is "<Prefix>#<key>", and a Prefix may hold '#':
// two functions sharing a table (as Prefix is documented to allow), one
// with Prefix "order" and key "eu#1", one with Prefix "order#eu" and key
// "1", get one ID. The second's message is taken for a duplicate of the
// first's and its work is never done (or, with another payload, it is
// dead-lettered as a mismatch). Hashed IDs cannot collide so: the hash
// holds no '#'.
func TestBreakReadableIDsPrefixWithHashCollides(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	// Fixed by refusing such a Prefix as the function starts.
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error(`NewOnce with ReadableIDs and Prefix "order#eu" did not panic; want the Prefix refused`)
			}
		}()
		lambdakit.NewOnce(store, quiet, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order#eu", true })
	}()
	if !t.Failed() {
		return
	}
	orders := lambdakit.NewOnce(store, quiet, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order", true })
	euOrders := lambdakit.NewOnce(store, quiet, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order#eu", true })
	payload := []byte(`{"ship":true}`)
	if _, err := orders.Do(t.Context(), "eu#1", payload, func(context.Context) ([]byte, error) { return []byte(`"order eu#1"`), nil }); err != nil {
		t.Fatal(err)
	}
	ran := false
	out, err := euOrders.Do(t.Context(), "1", payload, func(context.Context) ([]byte, error) { ran = true; return []byte(`"eu order 1"`), nil })
	if !ran {
		t.Errorf(`Prefix "order#eu", key "1": got %s, %v without running; its ID collides with Prefix "order", key "eu#1" (IDs %v); want it run, or a Prefix with '#' refused under ReadableIDs`,
			out, err, recordIDs(store))
	}
}

func recordIDs(s *lambdakittest.MemoryStore) []string {
	var out []string
	for id := range s.Records() {
		out = append(out, id)
	}
	return out
}
