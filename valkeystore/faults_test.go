package valkeystore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/valkeystore"
)

func quiet(o *lambdakit.Options) { o.Logger = slog.New(slog.DiscardHandler) }

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A connection lost after the server ran the script, before its answer
// came back, at each of the three calls: the client resends the script on
// a new connection, which finds the first run's work done. The work runs
// once, and its completion is kept.
func TestAnswerLostAfterTheWriteLanded(t *testing.T) {
	srv := redisserver.ForTest(t)
	proxy := redisserver.ProxyForTest(t, srv.Addr)
	// No background PING on idle connections (valkey-go sends one every
	// Dialer.KeepAlive): its answer, not the script's, would be the one
	// the proxy loses, as a CI run on a busy machine saw.
	c, err := valkey.NewClient(valkeystore.WithLambdaDefaults(valkey.ClientOption{InitAddress: []string{proxy.Addr}, Dialer: net.Dialer{KeepAlive: -1}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := newStore(t, c)
	e := lambdakit.NewOnce(s, quiet)

	t.Run("complete", func(t *testing.T) {
		// The scripts loaded first: a NOSCRIPT answer lost would be an
		// answer to a script that did not run.
		if _, err := e.Do(callCtx(t), "warm-up", nil, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		runs := 0
		fn := func(context.Context) ([]byte, error) {
			runs++
			proxy.LoseNextAnswer() // the next answer is the completion's
			return []byte(`"charged"`), nil
		}
		if got, err := e.Do(callCtx(t), "lost-complete", []byte(`{"n":1}`), fn); err != nil || string(got) != `"charged"` {
			t.Fatalf("Do whose completion's answer was lost: %s, %v; want the result (the script resent)", got, err)
		}
		if proxy.Lost() != 1 {
			t.Fatalf("the proxy lost %d answers; want 1", proxy.Lost())
		}
		// A fresh engine: no cache of this container's, only the store.
		got, err := lambdakit.NewOnce(s, quiet).Do(callCtx(t), "lost-complete", []byte(`{"n":1}`), fn)
		if err != nil || string(got) != `"charged"` || runs != 1 {
			t.Errorf("retry: got %s, %v after %d runs; want the first result and 1 run", got, err, runs)
		}
	})

	t.Run("acquire", func(t *testing.T) {
		now := time.Now()
		rec := lambdakit.IdempotencyRecord{ID: "lost-acquire", Status: lambdakit.StatusInProgress,
			Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "mine"}
		// The proxy loses the next answer on any connection; on a busy
		// machine that was now and then another command's (the Acquire
		// came back answered, acquired). Such an attempt proves nothing
		// either way, so it is released and tried again, five times at
		// most: a store that took its own record for a new one every time
		// still fails.
		for attempt := 1; ; attempt++ {
			rec.ID = fmt.Sprint("lost-acquire-", attempt)
			before := proxy.Lost()
			proxy.LoseNextAnswer()
			// The resent script finds the first run's record: the
			// caller's own, which lambdakit takes as acquired.
			old, ok, err := s.Acquire(callCtx(t), rec, now)
			if err != nil {
				t.Fatal(err)
			}
			if proxy.Lost() != before+1 {
				t.Fatal("the proxy lost no answer")
			}
			if ok && old.ID == "" && attempt < 5 {
				if err := s.Release(callCtx(t), rec.ID, rec.Lease); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if ok || old.Lease != "mine" {
				t.Fatalf("Acquire whose answer was lost: got %+v, %v, %v; want the caller's own record", old, ok, err)
			}
			break
		}
		before := proxy.Lost()
		other := rec
		other.Lease = "other"
		if _, ok, err := s.Acquire(callCtx(t), other, now); err != nil || ok {
			t.Fatalf("another owner's Acquire: acquired=%v, %v; want refused", ok, err)
		}
		proxy.LoseNextAnswer()
		if err := s.Release(callCtx(t), rec.ID, rec.Lease); err != nil || proxy.Lost() != before+1 {
			t.Fatalf("Release whose answer was lost: %v (answers lost: %d); want nil, the record gone", err, proxy.Lost()-before)
		}
		if _, ok, err := s.Acquire(callCtx(t), other, now); err != nil || !ok {
			t.Fatalf("Acquire after the release: acquired=%v, %v; want acquired", ok, err)
		}
	})
}

// The server restarts (SIGTERM, 300 ms down, then started again on its
// port and files) while a batch runs, and the other records complete while
// it is down: the client resends their scripts until it is back. With appendonly and appendfsync always, nothing
// acknowledged is lost: the records completed before the restart stay
// completed, and a redelivery of the whole batch runs nothing again.
func TestServerRestartMidBatch(t *testing.T) {
	srv := redisserver.ForTest(t, "--appendonly", "yes", "--appendfsync", "always")
	client := newClient(t, srv.Addr)
	s := newStore(t, client)
	var mu sync.Mutex
	runs := map[string]int{}
	h := lambdakit.Idempotent(s, lambdakit.KeyFromField("id"), quiet)(lambdakit.HandlerFunc(
		func(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
			id := msg.MessageId
			mu.Lock()
			runs[id]++
			mu.Unlock()
			if id == "m4" {
				if err := srv.Restart(300 * time.Millisecond); err != nil {
					return nil, err
				}
			} else {
				// Complete while the server is down.
				time.Sleep(100 * time.Millisecond)
			}
			return []byte(`"ok-` + id + `"`), nil
		}))
	// The other records run meanwhile: their calls find the connection
	// broken, or the server down, and the client resends them once it is
	// back.
	batch := lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = slog.New(slog.DiscardHandler) })
	var msgs []events.SQSMessage
	for i := range 8 {
		msgs = append(msgs, lambdakittest.Message(fmt.Sprintf(`{"id":"restart-%d"}`, i), func(m *events.SQSMessage) { m.MessageId = "m" + strconv.Itoa(i) }))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	resp, err := batch(ctx, lambdakittest.Event(msgs...))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("first delivery: %+v, %v; want every record done", resp, err)
	}
	var again []events.SQSMessage
	for _, m := range msgs {
		again = append(again, lambdakittest.Redelivery(m))
	}
	// A fresh handler: another container, which knows only the store.
	h2 := lambdakit.Idempotent(s, lambdakit.KeyFromField("id"), quiet)(lambdakit.HandlerFunc(
		func(_ context.Context, msg *events.SQSMessage) ([]byte, error) {
			mu.Lock()
			runs[msg.MessageId]++
			mu.Unlock()
			return nil, nil
		}))
	resp, err = lambdakit.Batch(h2, func(o *lambdakit.BatchOptions) { o.Logger = slog.New(slog.DiscardHandler) })(ctx, lambdakittest.Event(again...))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("redelivery: %+v, %v", resp, err)
	}
	for _, m := range msgs {
		if runs[m.MessageId] != 1 {
			t.Errorf("%s ran %d times; want 1", m.MessageId, runs[m.MessageId])
		}
	}
}

// Around a whole second, at x.999 s: a lease ending at x.999 holds at
// x.998 and ends at x.999; an expiration asked for x.001 counts until
// x+1, and the key itself expires ExpiryGrace after that, by the server's
// clock.
func TestTimesAtTheEdgeOfASecond(t *testing.T) {
	srv := redisserver.ForTest(t)
	s := newStore(t, newClient(t, srv.Addr))
	x := time.Now().Truncate(time.Second).Add(time.Hour) // never expired by the server meanwhile
	rec := lambdakit.IdempotencyRecord{ID: "edge", Status: lambdakit.StatusInProgress,
		Expiration: x.Add(time.Millisecond), InProgressExpiration: x.Add(999 * time.Millisecond), Lease: "first"}
	ctx := callCtx(t)
	if _, ok, err := s.Acquire(ctx, rec, x); err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	pexp, err := srv.Do("PEXPIRETIME", s.Key("edge"))
	if want := strconv.FormatInt(x.Add(time.Second+time.Minute).UnixMilli(), 10); err != nil || pexp != want {
		t.Errorf("PEXPIRETIME = %s, %v; want %s (expiration rounded up to x+1 s, plus a minute's grace)", pexp, err, want)
	}
	other := rec
	other.Lease, other.InProgressExpiration = "second", x.Add(time.Hour)
	// The lease (x.999) outlasts the expiration asked (x.001), but not the
	// one stored (x+1).
	if old, ok, err := s.Acquire(ctx, other, x.Add(998*time.Millisecond)); err != nil || ok || old.Lease != "first" {
		t.Fatalf("Acquire at x.998: %+v, %v, %v; want refused by the first lease", old, ok, err)
	}
	if _, ok, err := s.Acquire(ctx, other, x.Add(999*time.Millisecond)); err != nil || !ok {
		t.Fatalf("Acquire at x.999: %v, %v; want acquired, the lease has ended", ok, err)
	}
	done := other
	done.Status, done.Expiration, done.Data = lambdakit.StatusCompleted, x.Add(2*time.Second+time.Millisecond), []byte(`"r"`)
	if err := s.Complete(ctx, done); err != nil {
		t.Fatal(err)
	}
	third := rec
	third.Lease = "third"
	if old, ok, err := s.Acquire(ctx, third, x.Add(2999*time.Millisecond)); err != nil || ok || old.Status != lambdakit.StatusCompleted {
		t.Fatalf("Acquire at x+2.999: %+v, %v, %v; want the completed record (it counts until x+3)", old, ok, err)
	}
	if _, ok, err := s.Acquire(ctx, third, x.Add(3*time.Second)); err != nil || !ok {
		t.Fatalf("Acquire at x+3: %v, %v; want acquired", ok, err)
	}
}

// Staged writes never reach the server: Complete refuses them, says why,
// and leaves the record in progress under its lease.
func TestStagedWritesAreRefused(t *testing.T) {
	s := standalone(t)
	now := time.Now()
	rec := lambdakit.IdempotencyRecord{ID: "staged", Status: lambdakit.StatusInProgress,
		Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "l"}
	if _, ok, err := s.Acquire(callCtx(t), rec, now); err != nil || !ok {
		t.Fatal(ok, err)
	}
	done := rec
	done.Status, done.Staged = lambdakit.StatusCompleted, []any{"a write"}
	err := s.Complete(callCtx(t), done)
	if !errors.Is(err, lambdakit.ErrStagingUnsupported) {
		t.Fatalf("got %v; want ErrStagingUnsupported", err)
	}
	t.Log(err)
	got, err := s.GetRecords(callCtx(t), []string{rec.ID})
	if err != nil || got[rec.ID].Status != lambdakit.StatusInProgress || got[rec.ID].Lease != "l" {
		t.Errorf("after the refusal: %+v, %v; want the record in progress, untouched", got, err)
	}
}

// A staged write is refused when the handler stages it, before the rest
// of the work, as permanent; Complete would refuse it only after.
func TestStageIsRefusedBeforeTheWork(t *testing.T) {
	e := lambdakit.NewOnce(standalone(t))
	var stageErr error
	after := false
	_, err := e.Do(callCtx(t), "staged-before-the-work", nil, func(ctx context.Context) ([]byte, error) {
		if stageErr = lambdakit.Stage(ctx, "a write"); stageErr != nil {
			return nil, stageErr
		}
		after = true // the work goes on, to an effect perhaps
		return []byte(`"done"`), nil
	})
	if !errors.Is(stageErr, lambdakit.ErrStagingUnsupported) || !lambdakit.IsPermanent(stageErr) || after {
		t.Fatalf("Stage: %v, the work went on: %v; want ErrStagingUnsupported, permanent, the work stopped there (Do: %v)", stageErr, after, err)
	}
}

// A cluster spreads records over its nodes; the read ahead finds them on
// every node at once.
func TestClusterSpreadsRecordsAndReadsThemBack(t *testing.T) {
	c := redisserver.ClusterForTest(t)
	client := newClient(t, c.Addrs()...)
	s := newStore(t, client)
	now := time.Now()
	var ids []string
	for i := range 30 {
		rec := lambdakit.IdempotencyRecord{ID: fmt.Sprintf("spread#%d", i), Status: lambdakit.StatusInProgress,
			Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "l"}
		if _, ok, err := s.Acquire(callCtx(t), rec, now); err != nil || !ok {
			t.Fatal(ok, err)
		}
		ids = append(ids, rec.ID)
	}
	for _, n := range c.Nodes {
		if size, err := n.Do("DBSIZE"); err != nil || size == "0" {
			t.Errorf("node %s holds %s keys, %v; want some of the 30", n.Addr, size, err)
		}
	}
	got, err := s.GetRecords(callCtx(t), append(ids, "spread#missing"))
	if err != nil || len(got) != 30 {
		t.Fatalf("GetRecords: %d records, %v; want 30", len(got), err)
	}
}

// AUTH with a user and password, given as fields or by AuthCredentialsFn
// (how IAMAuth plugs in); a wrong password fails at once.
func TestAuth(t *testing.T) {
	srv := redisserver.ForTest(t)
	if _, err := srv.Do("ACL", "SETUSER", "fn", "on", ">s3cret", "~idempotency:*", "+@all"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("ACL", "SETUSER", "default", "off"); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for name, o := range map[string]valkey.ClientOption{
		"fields": {InitAddress: []string{srv.Addr}, Username: "fn", Password: "s3cret"},
		"fn": {InitAddress: []string{srv.Addr}, AuthCredentialsFn: func(valkey.AuthCredentialsContext) (valkey.AuthCredentials, error) {
			calls++
			return valkey.AuthCredentials{Username: "fn", Password: "s3cret"}, nil
		}},
	} {
		c, err := valkey.NewClient(o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := newStore(t, c)
		now := time.Now()
		_, ok, err := s.Acquire(callCtx(t), lambdakit.IdempotencyRecord{ID: "auth-" + name, Expiration: now.Add(time.Hour), InProgressExpiration: now.Add(time.Minute), Lease: "l"}, now)
		c.Close()
		if err != nil || !ok {
			t.Errorf("%s: Acquire: %v, %v", name, ok, err)
		}
	}
	if calls == 0 {
		t.Error("AuthCredentialsFn was never called")
	}
	if c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr}, Username: "fn", Password: "wrong"}); err == nil {
		c.Close()
		t.Error("a wrong password connected; want an error")
	}
}
