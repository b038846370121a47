package lambdakit

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLRUKeepsTheMostRecentlyUsed runs random puts and gets, some of
// records that have expired, against a plain model of the cache: a slice
// of IDs, most recently used first. Every get must answer as the model
// does, and the cache must hold the model's records, no more.
func TestLRUKeepsTheMostRecentlyUsed(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 2, 5} {
		c := newLRU(size)
		var order []string // the model: most recently used first
		recs := map[string]IdempotencyRecord{}
		touch := func(id string) {
			order = slices.DeleteFunc(order, func(o string) bool { return o == id })
			order = slices.Insert(order, 0, id)
		}
		for step := range 5000 {
			id := strconv.Itoa(rng.IntN(3 * size))
			if rng.IntN(2) == 0 {
				rec := IdempotencyRecord{ID: id, Status: StatusCompleted, Data: []byte(strconv.Itoa(step)), Expiration: now.Add(time.Hour)}
				if rng.IntN(8) == 0 {
					rec.Expiration = now.Add(-time.Second) // dead when next read
				}
				c.put(rec)
				recs[id] = rec
				touch(id)
				if len(order) > size {
					delete(recs, order[size])
					order = order[:size]
				}
				continue
			}
			got, ok := c.get(id, now)
			want, known := recs[id]
			live := known && want.Live(now)
			if ok != live || (ok && string(got.Data) != string(want.Data)) {
				t.Fatalf("size %d, step %d: get(%s) = %q, %v; want %q, %v", size, step, id, got.Data, ok, want.Data, live)
			}
			switch {
			case live:
				touch(id)
			case known: // expired: dropped
				delete(recs, id)
				order = slices.DeleteFunc(order, func(o string) bool { return o == id })
			}
			if len(c.items) != len(order) {
				t.Fatalf("size %d, step %d: the cache holds %d records; want %d", size, step, len(c.items), len(order))
			}
		}
		var listed []string
		for n := c.root.next; n != &c.root; n = n.next {
			listed = append(listed, n.rec.ID)
		}
		if !slices.Equal(listed, order) {
			t.Errorf("size %d: the list is %v; want %v", size, listed, order)
		}
	}
}

// TestLRUPutAllocatesNothingOnceFull checks that a full cache gives the
// node of the record it drops to the new one: a put, made after every
// completion, allocates nothing then.
func TestLRUPutAllocatesNothingOnceFull(t *testing.T) {
	c := newLRU(4)
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = "payment#" + strconv.Itoa(i)
	}
	for _, id := range ids[:4] {
		c.put(IdempotencyRecord{ID: id, Status: StatusCompleted})
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		c.put(IdempotencyRecord{ID: ids[i%len(ids)], Status: StatusCompleted})
		i++
	}); n != 0 {
		t.Errorf("a put into a full cache makes %v allocations; want 0", n)
	}
}

// TestLRUAnswersEachKeyWithItsOwnRecord checks the cache where nodes are
// reused: a record handed out by get keeps what it held after its node
// carries another record, a put of a cached ID into a full cache drops
// nothing, and gets and puts from goroutines at once (run with -race)
// answer each ID with its own record only.
func TestLRUAnswersEachKeyWithItsOwnRecord(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	rec := func(id string) IdempotencyRecord {
		return IdempotencyRecord{ID: id, Status: StatusCompleted, Lease: "lease " + id, Data: []byte("result " + id), Effect: "effect " + id, Expiration: now.Add(time.Hour)}
	}
	c := newLRU(1)
	c.put(rec("a"))
	got, ok := c.get("a", now)
	c.put(rec("b")) // takes a's node
	if !ok || got.ID != "a" || got.Lease != "lease a" || string(got.Data) != "result a" || got.Effect != "effect a" {
		t.Fatalf("the record get gave for a became %+v after its node took b", got)
	}
	if _, ok := c.get("a", now); ok {
		t.Fatal("a is still cached in a cache of one after b")
	}

	c = newLRU(2)
	c.put(rec("a"))
	c.put(rec("b"))
	c.put(rec("a")) // cached already: a is updated and most recent, b stays
	for _, id := range []string{"a", "b"} {
		if got, ok := c.get(id, now); !ok || got.ID != id {
			t.Fatalf("get(%s) = %q, %v after a put of a cached ID into a full cache", id, got.ID, ok)
		}
	}

	c = newLRU(4)
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for g := range 4 {
		wg.Go(func() {
			for k := range 500 {
				id := strconv.Itoa((g*7 + k) % 9)
				if k%2 == 0 {
					c.put(rec(id))
					continue
				}
				if got, ok := c.get(id, now); ok && (got.ID != id || string(got.Data) != "result "+id || got.Lease != "lease "+id) {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d gets made at once answered another ID's record", n)
	}
}
