package valkeystore

import (
	"context"
	"fmt"

	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// GetRecords reads the records stored under ids, so that lambdakit's read
// ahead can answer a re-driven batch of completed records without running
// the acquire script once per record. The records are hashes, which MGET
// cannot read: it sends one HMGET per record, all in one pipeline (in a
// cluster, one pipeline per node, sent at once), so the read costs one
// round trip however many records it asks for. Reads go to primaries only,
// so they see every acknowledged write.
//
// A key it cannot read as a record (a key of another type, or a hash whose
// fields are not what this package writes, which another program may have
// put under the record's key) is left out, as if it held no record: one
// such key must not cost the read of all the others, and the lock reports
// it for its own record. A failed connection fails the read.
func (s *Store) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	out := make(map[string]lambdakit.IdempotencyRecord, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cmds := make(valkey.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = s.client.B().Hmget().Key(s.Key(id)).Field(fields...).Build()
	}
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		vals, err := res.ToArray()
		if _, refused := valkey.IsValkeyErr(err); refused {
			continue // the server's answer for this key alone (WRONGTYPE)
		}
		if err != nil {
			return nil, fmt.Errorf("valkeystore: get %d records: %s: %w", len(ids), ids[i], err)
		}
		if vals[0].IsNil() { // no status: no record
			continue
		}
		if rec, err := decode(ids[i], vals); err == nil {
			out[rec.ID] = rec
		}
	}
	return out, nil
}
