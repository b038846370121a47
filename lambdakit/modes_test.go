package lambdakit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// plainStore is a Store and nothing more: no item, no Commit.
type plainStore struct{ lambdakit.Store }

func TestStagedOnlyNeedsACommitterAtStart(t *testing.T) {
	defer func() {
		r := recover()
		if msg, _ := r.(string); !strings.Contains(msg, "Committer") {
			t.Errorf("got panic %v; want one naming lambdakit.Committer", r)
		}
	}()
	lambdakit.NewOnce(plainStore{&lambdakittest.MemoryStore{}}, func(o *lambdakit.Options) { o.StagedOnly = true })
	t.Error("NewOnce returned; want a panic")
}

func TestSetItemOnAStoreThatCannotWriteOne(t *testing.T) {
	e := lambdakit.NewOnce(plainStore{&lambdakittest.MemoryStore{}})
	var setErr error
	if _, err := e.Do(t.Context(), "k", nil, func(ctx context.Context) ([]byte, error) {
		setErr = lambdakit.SetItem(ctx, map[string]any{"a": 1})
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(setErr, lambdakit.ErrStagingUnsupported) {
		t.Errorf("got %v; want ErrStagingUnsupported", setErr)
	}
}

// Under StagedOnly the handler runs before any request, and a duplicate
// found at commit is replayed: the memory store counts one Commit per
// run, and the second run's writes never apply.
func TestStagedOnlyRunsFirstAndCommitsOnce(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	applied, runs := 0, 0
	fn := func(ctx context.Context) ([]byte, error) {
		// Each run before its own request: after the earlier runs' one
		// each.
		if got := store.Calls().Total(); got != runs {
			t.Errorf("run %d started after %d requests; want %d", runs+1, got, runs)
		}
		runs++
		if err := lambdakit.Stage(ctx, func() { applied++ }); err != nil {
			return nil, err
		}
		return []byte(`"done"`), nil
	}
	opts := func(o *lambdakit.Options) { o.StagedOnly, o.Logger = true, slog.New(slog.DiscardHandler) }
	for i := range 2 {
		// A fresh engine each time: no cache, no flight, the store decides.
		got, err := lambdakit.NewOnce(store, opts).Do(t.Context(), "k", []byte(`{}`), fn)
		if err != nil || string(got) != `"done"` {
			t.Fatalf("call %d: got %s, %v", i+1, got, err)
		}
	}
	if c := store.Calls(); c.Commit != 2 || c.Total() != 2 {
		t.Errorf("calls %+v; want 2 Commits and nothing else", c)
	}
	if applied != 1 {
		t.Errorf("staged write applied %d times; want 1", applied)
	}
}

// Under StagedOnly a payload mismatch is found after the handler ran, at
// the commit; it is still the message's own (poison), not the handler's,
// which a retry could get past.
func TestStagedOnlyMismatchIsPoison(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	ran := 0
	newHandler := func() lambdakit.Handler {
		return lambdakit.Idempotent(store, lambdakit.KeyFromField("id"), func(o *lambdakit.Options) {
			o.StagedOnly, o.Logger = true, slog.New(slog.DiscardHandler)
		})(lambdakit.HandlerFunc(func(context.Context, *events.SQSMessage) ([]byte, error) { ran++; return nil, nil }))
	}
	first := lambdakittest.Message(`{"id":"k","amount":1}`)
	if _, err := newHandler().Handle(t.Context(), &first); err != nil {
		t.Fatal(err)
	}
	other := lambdakittest.Message(`{"id":"k","amount":2}`)
	_, err := newHandler().Handle(t.Context(), &other) // another container
	if !errors.Is(err, lambdakit.ErrPayloadMismatch) || !lambdakit.IsPoison(err) || ran != 2 {
		t.Errorf("got %v (poison %v) after %d runs; want a poison ErrPayloadMismatch after the second run", err, lambdakit.IsPoison(err), ran)
	}
	if c := store.Calls(); c.Commit != 2 || c.Total() != 2 {
		t.Errorf("calls %+v; want 2 Commits", c)
	}
}

// With ReadableIDs the ID is "<Prefix>#<key>", and a Prefix may hold '#':
// two functions sharing a table (as Prefix is documented to allow), one
// with Prefix "order" and key "eu#1", one with Prefix "order#eu" and key
// "1", get one ID. The second's message is taken for a duplicate of the
// first's and its work is never done (or, with another payload, it is
// dead-lettered as a mismatch). Hashed IDs cannot collide so: the hash
// holds no '#'.
func TestReadableIDsRefuseAPrefixWithHash(t *testing.T) {
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

// readableKey is the key the ReadableIDs tests give their record.
const readableKey = "alice@example.com"

// failReadable runs, under Batch, one record of readableKey through fn,
// made idempotent with ReadableIDs (prefix "order"), and returns the batch's
// log and the line of the record, which must fail.
func failReadable(t *testing.T, store *lambdakittest.MemoryStore, fn lambdakit.HandlerFunc) (*batchLog, map[string]any) {
	t.Helper()
	log := &batchLog{}
	h := idempotent(store, fn, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order", true })
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = log.Logger(); o.AllowAllFailed = true })
	msg := lambdakittest.Message(`{"payment_id":"` + readableKey + `"}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := batch(ctx, lambdakittest.Event(msg)); err != nil {
		t.Fatal(err)
	}
	line, ok := log.byMessageID(t)[msg.MessageId]
	if !ok {
		t.Fatal("no line for the failed record")
	}
	return log, line
}

// wantHashedReason checks the reason of failReadable's line: it holds
// fragment, and names the record by its hashed ID, never by the key.
func wantHashedReason(t *testing.T, line map[string]any, fragment string) {
	t.Helper()
	reason, _ := line["reason"].(string)
	hashed := lambdakit.RecordID("order", readableKey)
	if !strings.Contains(reason, fragment) || strings.Contains(reason, readableKey) || !strings.Contains(reason, hashed) {
		t.Errorf("reason %q; want %q in it, and the record named by its hashed ID %s, not the key", reason, fragment, hashed)
	}
}

// With ReadableIDs the record's ID holds the key ("order#<key>"), yet the
// batch's line names the record as it does without them, by the hashed ID
// (RecordID), as traces do: the key stays out of the logs. So does it out
// of the text of a failure that names the record.
func TestReadableIDsStayOutOfTheLogLine(t *testing.T) {
	log, line := failReadable(t, &lambdakittest.MemoryStore{}, func(context.Context, *events.SQSMessage) ([]byte, error) {
		return nil, errors.New("gateway down")
	})
	if want := lambdakit.RecordID("order", readableKey); line["recordId"] != want {
		t.Errorf("recordId %v; want %s, the hashed ID", line["recordId"], want)
	}
	for _, l := range log.Lines(t) {
		for k, v := range l {
			if s, _ := v.(string); strings.Contains(s, readableKey) {
				t.Errorf("log field %s = %q holds the key", k, s)
			}
		}
	}
}

// idNamingStore fails one kind of call with an error that names the
// record by its stored ID, as dynamostore's and valkeystore's errors do.
type idNamingStore struct {
	*lambdakittest.MemoryStore
	fail string // "acquire", "complete", "lost" (Complete: a lost lease), "read" (GetRecords) or "read panic"
}

func (s *idNamingStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	if s.fail == "acquire" {
		return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("teststore: acquire %s: throttled", rec.ID)
	}
	return s.MemoryStore.Acquire(ctx, rec, now)
}

func (s *idNamingStore) Complete(ctx context.Context, rec lambdakit.IdempotencyRecord) error {
	switch s.fail {
	case "complete":
		return fmt.Errorf("teststore: complete %s: throttled", rec.ID)
	case "lost":
		return fmt.Errorf("teststore: complete %s: %w", rec.ID, lambdakit.ErrLeaseLost)
	}
	return s.MemoryStore.Complete(ctx, rec)
}

func (s *idNamingStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	switch s.fail {
	case "read":
		return nil, fmt.Errorf("teststore: get %d records: %s: throttled", len(ids), ids[0])
	case "read panic":
		panic("teststore: get " + ids[0])
	}
	return s.MemoryStore.GetRecords(ctx, ids)
}

// With ReadableIDs a store's error text names the record by its stored ID,
// which holds the key: the engine's errors and lines name it by the hashed
// ID instead, as the batch's line does, and the store's own error is still
// there to unwrap.
func TestReadableIDsStayOutOfAStoreErrorText(t *testing.T) {
	hashed := lambdakit.RecordID("order", readableKey)
	for _, fail := range []string{"acquire", "complete", "lost", "read"} {
		t.Run(fail, func(t *testing.T) {
			log := &batchLog{}
			store := &idNamingStore{MemoryStore: &lambdakittest.MemoryStore{}, fail: fail}
			h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
				o.Prefix, o.ReadableIDs, o.Logger = "order", true, log.Logger()
			})(noop)
			batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = log.Logger(); o.AllowAllFailed = true })
			// Delivered before, so that the batch reads its record ahead.
			msg := lambdakittest.Redelivery(lambdakittest.Message(`{"payment_id":"` + readableKey + `"}`))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := batch(ctx, lambdakittest.Event(msg)); err != nil {
				t.Fatal(err)
			}
			named := false
			for _, l := range log.Lines(t) {
				reason, _ := l["reason"].(string)
				named = named || strings.Contains(reason, "teststore") && strings.Contains(reason, hashed)
				for k, v := range l {
					if s, _ := v.(string); strings.Contains(s, readableKey) {
						t.Errorf("log field %s = %q holds the key", k, s)
					}
				}
			}
			if !named {
				t.Errorf("no line's reason names the record by its hashed ID %s in the store's text:\n%s", hashed, log.String())
			}
			if fail == "read" {
				return
			}
			store.fail = fail
			_, err := handle(t, h, lambdakittest.Message(`{"payment_id":"`+readableKey+`x"}`))
			if err == nil || strings.Contains(err.Error(), readableKey) {
				t.Errorf("error %v; want the store's failure, without the key", err)
			}
			if raw := errors.Unwrap(err); raw == nil || !strings.Contains(raw.Error(), "order#"+readableKey) {
				t.Errorf("unwrapped %v; want the store's own error, naming the stored ID", raw)
			}
		})
	}
}

// A store that panics in its read ahead, naming a record by its stored ID
// in the panic, gets the key no further than one that returns an error:
// the warning names the record by its hashed ID.
func TestReadableIDsStayOutOfAReadAheadPanic(t *testing.T) {
	log := &batchLog{}
	store := &idNamingStore{MemoryStore: &lambdakittest.MemoryStore{}, fail: "read panic"}
	h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), func(o *lambdakit.Options) {
		o.Prefix, o.ReadableIDs, o.Logger = "order", true, log.Logger()
	})(noop)
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = log.Logger() })
	msg := lambdakittest.Redelivery(lambdakittest.Message(`{"payment_id":"` + readableKey + `"}`))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := batch(ctx, lambdakittest.Event(msg)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), lambdakit.RecordID("order", readableKey)) {
		t.Errorf("no line names the record by its hashed ID:\n%s", log.String())
	}
	if strings.Contains(log.String(), readableKey) {
		t.Errorf("a line holds the key:\n%s", log.String())
	}
}

// quotingStore fails every Acquire with a text that quotes the record's
// stored ID with verb (%q or %+q), which escapes some of the key's
// characters.
type quotingStore struct {
	*lambdakittest.MemoryStore
	verb string
}

func (s quotingStore) Acquire(_ context.Context, rec lambdakit.IdempotencyRecord, _ time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	return lambdakit.IdempotencyRecord{}, false, fmt.Errorf("teststore: acquire "+s.verb+": throttled", rec.ID)
}

// A store's text may quote the stored ID, escaping a key's quotes,
// backslashes or non-ASCII letters: the key stays out of the error text
// all the same, and the record is named by its hashed ID.
func TestReadableIDsStayOutOfAQuotedStoreErrorText(t *testing.T) {
	const key = `zoë "the boss" \ müller`
	for _, verb := range []string{"%q", "%+q"} {
		t.Run(verb, func(t *testing.T) {
			store := quotingStore{MemoryStore: &lambdakittest.MemoryStore{}, verb: verb}
			e := lambdakit.NewOnce(store, func(o *lambdakit.Options) {
				o.Prefix, o.ReadableIDs, o.Logger = "order", true, (&lambdakittest.LogBuffer{}).Logger()
			})
			_, err := e.Do(t.Context(), key, nil, func(context.Context) ([]byte, error) { return nil, nil })
			if err == nil {
				t.Fatal("Do succeeded; want the store's failure")
			}
			if text := err.Error(); strings.Contains(text, "the boss") || strings.Contains(text, "ller") ||
				!strings.Contains(text, lambdakit.RecordID("order", key)) {
				t.Errorf("error %q; want the record named by its hashed ID %s, not the key", text, lambdakit.RecordID("order", key))
			}
		})
	}
}

// A record completed with a failure (a rejected completion) replays the
// failure to every later delivery. A failure stored by an older lambdakit
// names the record by its readable ID: the replayed error does not.
func TestReadableIDsStayOutOfAReplayedFailure(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	id := "order#" + readableKey
	store.Put(lambdakit.IdempotencyRecord{
		ID: id, Status: lambdakit.StatusCompleted, Expiration: time.Now().Add(time.Hour),
		Failure: "lambdakit: store complete: teststore: complete " + id + ": rejected",
	})
	_, line := failReadable(t, store, func(context.Context, *events.SQSMessage) ([]byte, error) {
		t.Error("the handler ran again after a rejected completion")
		return nil, nil
	})
	wantHashedReason(t, line, "rejected")
}

// loggingIDStore records what LoggedRecordID says on each call it gets.
type loggingIDStore struct {
	*lambdakittest.MemoryStore
	mu   sync.Mutex
	seen []string // "<call> <ID as logged> <ok>"
}

// Unwrap makes it a StoreWrapper, which the engine tells its IDs hold keys.
func (s *loggingIDStore) Unwrap() lambdakit.Store { return s.MemoryStore }

func (s *loggingIDStore) note(ctx context.Context, call, id string) {
	shown, ok := lambdakit.LoggedRecordID(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, fmt.Sprintf("%s %s %t", call, shown, ok))
}

func (s *loggingIDStore) Acquire(ctx context.Context, rec lambdakit.IdempotencyRecord, now time.Time) (lambdakit.IdempotencyRecord, bool, error) {
	s.note(ctx, "acquire", rec.ID)
	return s.MemoryStore.Acquire(ctx, rec, now)
}

func (s *loggingIDStore) GetRecords(ctx context.Context, ids []string) (map[string]lambdakit.IdempotencyRecord, error) {
	s.note(ctx, "get", ids[0])
	return s.MemoryStore.GetRecords(ctx, ids)
}

// A Store wrapper learns from LoggedRecordID that the IDs of an engine
// with ReadableIDs hold keys, and how lambdakit's lines name them; the
// calls of an engine without them, or of no engine, are left as they are.
func TestLoggedRecordIDTellsAStoreWhichIDsHoldKeys(t *testing.T) {
	for _, readable := range []bool{true, false} {
		store := &loggingIDStore{MemoryStore: &lambdakittest.MemoryStore{}}
		h := idempotent(store, noop, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order", readable })
		batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = silentLogger() })
		// Delivered before, so that the batch reads its record ahead.
		msg := lambdakittest.Redelivery(lambdakittest.Message(`{"payment_id":"` + readableKey + `"}`))
		if _, err := batch(t.Context(), lambdakittest.Event(msg)); err != nil {
			t.Fatal(err)
		}
		hashed := lambdakit.RecordID("order", readableKey)
		want := []string{"get " + hashed + " true", "acquire " + hashed + " true"}
		if !readable {
			want = []string{"get " + hashed + " false", "acquire " + hashed + " false"}
		}
		if !slices.Equal(store.seen, want) {
			t.Errorf("ReadableIDs %t: the store saw %q; want %q", readable, store.seen, want)
		}
	}
	if id, ok := lambdakit.LoggedRecordID(t.Context(), "order#"+readableKey); ok || id != "order#"+readableKey {
		t.Errorf("outside a store call: %q, %t; want the ID as it is, false", id, ok)
	}
}

// A handler that sets its item twice gets ErrItemAlreadySet, whose text
// names the record: with ReadableIDs by the hashed ID, as the batch's line
// does, for the handler's error becomes that line's reason.
func TestReadableIDsStayOutOfTheItemAlreadySetError(t *testing.T) {
	_, line := failReadable(t, &lambdakittest.MemoryStore{}, func(ctx context.Context, _ *events.SQSMessage) ([]byte, error) {
		item := map[string]any{"email": "x"}
		if err := lambdakit.SetItem(ctx, item); err != nil {
			return nil, err
		}
		return nil, lambdakit.SetItem(ctx, item)
	})
	wantHashedReason(t, line, lambdakit.ErrItemAlreadySet.Error())
}

// With ReadableIDs, an item under the record's key that no engine wrote
// (a business item with a status of its own) fails the record with a
// *NotARecordError, in an error whose text names the record by its hashed
// ID, not by the stored ID that holds the key; its ID field keeps the
// stored ID, to find the item.
func TestReadableIDsStayOutOfTheNotARecordText(t *testing.T) {
	store := &lambdakittest.MemoryStore{}
	store.Put(lambdakit.IdempotencyRecord{ID: "order#" + readableKey, Status: "CANCELLED"})
	_, line := failReadable(t, store, func(context.Context, *events.SQSMessage) ([]byte, error) {
		t.Error("the handler ran over another item")
		return nil, nil
	})
	wantHashedReason(t, line, "no idempotency record")
	var nar *lambdakit.NotARecordError
	h := idempotent(store, noop, func(o *lambdakit.Options) { o.Prefix, o.ReadableIDs = "order", true })
	if _, err := handle(t, h, lambdakittest.Message(`{"payment_id":"`+readableKey+`"}`)); !errors.As(err, &nar) || nar.ID != "order#"+readableKey {
		t.Errorf("error %v; want a *NotARecordError with ID order#%s", err, readableKey)
	}
}
