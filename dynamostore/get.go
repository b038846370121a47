package dynamostore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/lambdakit"
)

var _ lambdakit.BatchGetter = (*Store)(nil)

// maxBatchGetKeys is how many keys one BatchGetItem may ask for.
const maxBatchGetKeys = 100

// unprocessedRounds bounds the retries of keys a BatchGetItem left
// unprocessed (for its 16 MB answer limit, or throttling).
const unprocessedRounds = 5

// batchGetsAtOnce bounds the BatchGetItem requests one GetRecords has in
// flight.
const batchGetsAtOnce = 8

// GetRecords reads the records stored under ids with strongly consistent
// BatchGetItem requests of up to 100 keys each, so that lambdakit's read
// ahead can answer a re-driven batch of completed records without a write
// per record. Keys DynamoDB leaves unprocessed are asked again, a bounded
// number of times with backoff; those still unprocessed after that are left
// out of the result, as if they had no record: their records then take the
// lock as usual, which is always correct, only dearer. So are items it
// cannot read as records (an attribute of another type, as a business item
// under lambdakit.Options.ReadableIDs may have): one such item must not
// cost the read of all the others, and the lock reports it for its own
// record. An ID given more than once is asked for once, since DynamoDB
// refuses a request that names a key twice.
//
// The requests of a read of more than 100 IDs are sent at once, up to
// batchGetsAtOnce at a time: one after the other, a batch of thousands of
// redelivered records would wait for tens of round trips (and as many
// rounds of backoff under throttling) before any of them ran, longer than
// the conditional writes the read ahead saves.
func (s *Store) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	ids = distinct(ids)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		out   = make(map[string]lambdakit.IdempotencyRecord, len(ids))
		first error
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, batchGetsAtOnce)
	for start := 0; start < len(ids); start += maxBatchGetKeys {
		chunk := ids[start:min(start+maxBatchGetKeys, len(ids))]
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			recs, err := s.getChunk(ctx, chunk)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
				cancel() // the read fails as a whole: stop the others
			}
			maps.Copy(out, recs)
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// getChunk reads the records of up to 100 IDs.
func (s *Store) getChunk(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	out := make(map[string]lambdakit.IdempotencyRecord, len(ids))
	keys := make([]map[string]types.AttributeValue, len(ids))
	for i, id := range ids {
		keys[i] = s.key(id)
	}
	for round := 0; len(keys) > 0 && round < unprocessedRounds; round++ {
		if round > 0 {
			// Full jitter over 20 ms, 40 ms, 80 ms, 160 ms.
			wait := time.Duration(rand.Int64N(int64(20*time.Millisecond) << (round - 1)))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		resp, err := s.client.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{
			RequestItems: map[string]types.KeysAndAttributes{
				s.table: {Keys: keys, ConsistentRead: aws.Bool(true)},
			},
		})
		if err != nil {
			return nil, fmt.Errorf("dynamostore: get %d records: %w", len(keys), err)
		}
		for _, item := range resp.Responses[s.table] {
			if rec, err := s.decode(item); err == nil {
				out[rec.ID] = rec
			}
		}
		keys = resp.UnprocessedKeys[s.table].Keys
	}
	return out, nil
}

// distinct returns ids without repeats, in their order.
func distinct(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
