package valkeystore_test

import (
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
	"github.com/lambdakit/lambdakit/valkeystore"
)

// Bad input through Batch and Idempotent on a real redis-server, each row
// on a server of its own, scanned after every batch for locks left behind.
// Values are binary-safe strings: any result, text or not, is kept.
func TestBadInput(t *testing.T) {
	storetest.RunBadInput(t, func(t *testing.T) storetest.BadInputTarget {
		s := standalone(t)
		return storetest.BadInputTarget{
			Store:    s,
			Statuses: func(t *testing.T) map[string]lambdakit.IdempotencyStatus { return statuses(t, s) },
		}
	})
}

// statuses scans every record key of s: the status of every record, by ID.
func statuses(t *testing.T, s *valkeystore.Store) map[string]lambdakit.IdempotencyStatus {
	t.Helper()
	c := s.Client()
	prefix := s.Key("")
	out := map[string]lambdakit.IdempotencyStatus{}
	cursor := uint64(0)
	for range 1000 {
		entry, err := c.Do(t.Context(), c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for _, key := range entry.Elements {
			status, err := c.Do(t.Context(), c.B().Hget().Key(key).Field("status").Build()).ToString()
			if err != nil && !valkey.IsValkeyNil(err) {
				t.Fatalf("hget %s: %v", key, err)
			}
			out[strings.TrimPrefix(key, prefix)] = lambdakit.IdempotencyStatus(status)
		}
		if cursor = entry.Cursor; cursor == 0 {
			return out
		}
	}
	t.Fatal("scan: more than 1000 rounds")
	return nil
}
