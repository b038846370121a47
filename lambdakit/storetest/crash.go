package storetest

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// crashLease is the lease of the crash checks' calls: they run without a
// deadline, so the engine's lease is Options.LeaseWithoutDeadline, counted
// on the clock the checks move.
const crashLease = time.Minute

// RunCrashChecks checks that a store keeps what a crashed process left,
// with lambdakittest.CrashStore over it and a lambdakittest.Clock: the key
// stays locked until the lease ends; then a redelivery takes the record
// over and runs the work again; but with Options.StoreEffect, a crash
// after EffectDone leaves a record no redelivery runs again. newStore may
// return the same store every time: each check uses a key of its own. The
// store must implement lambdakit.EffectMarker.
func RunCrashChecks(t *testing.T, newStore func(t *testing.T) lambdakit.Store) {
	// process is one container: an engine of its own over store, on clock.
	process := func(store lambdakit.Store, clock *lambdakittest.Clock, storeEffect bool) *lambdakit.Once {
		return lambdakit.NewOnce(store, func(o *lambdakit.Options) {
			o.Logger = slog.New(slog.DiscardHandler)
			o.Now = clock.Now
			o.LeaseWithoutDeadline = crashLease
			o.StoreEffect = storeEffect
		})
	}
	payload := []byte(`{"amount":1299}`)
	t.Run("a crash mid-handler locks the key until the lease ends, then the redelivery runs again", func(t *testing.T) {
		store := newStore(t)
		crash := lambdakittest.NewCrashStore(store)
		clock := lambdakittest.NewClock(time.Now())
		key := t.Name()
		var charges atomic.Int32
		charge := func(ctx context.Context) ([]byte, error) {
			charges.Add(1)
			crash.Crash() // the process dies right after the charge
			return []byte(`"charged"`), nil
		}
		_, _ = process(crash, clock, false).Do(t.Context(), key, payload, charge)

		next := process(store, clock, false) // a new container
		if _, err := next.Do(t.Context(), key, payload, charge); !errors.Is(err, lambdakit.ErrInProgress) {
			t.Fatalf("redelivery within the lease: got %v; want ErrInProgress", err)
		}
		clock.Advance(crashLease + time.Second)
		if got, err := next.Do(t.Context(), key, payload, charge); err != nil || string(got) != `"charged"` {
			t.Fatalf("redelivery after the lease: got %s, %v; want it to take over and run", got, err)
		}
		if n := charges.Load(); n != 2 {
			t.Errorf("charged %d times; want 2: without its effect kept, the crashed work runs again", n)
		}
	})
	t.Run("with StoreEffect a crash after EffectDone is not run again", func(t *testing.T) {
		store := newStore(t)
		crash := lambdakittest.NewCrashStore(store)
		crash.CrashBeforeCompletion()
		clock := lambdakittest.NewClock(time.Now())
		key := t.Name()
		var charges atomic.Int32
		charge := func(ctx context.Context) ([]byte, error) {
			charges.Add(1)
			lambdakit.EffectDone(ctx, "charge ch_1")
			return []byte(`"charged"`), nil
		}
		_, _ = process(crash, clock, true).Do(t.Context(), key, payload, charge)
		if !crash.Crashed() {
			t.Fatal("the process did not crash before its completion")
		}

		clock.Advance(crashLease + time.Second)
		_, err := process(store, clock, true).Do(t.Context(), key, payload, charge)
		if !errors.Is(err, lambdakit.ErrFailedAfterEffect) || !lambdakit.IsPermanent(err) {
			t.Errorf("redelivery after the lease: got %v; want a permanent ErrFailedAfterEffect", err)
		}
		if n := charges.Load(); n != 1 {
			t.Errorf("charged %d times; want once", n)
		}
	})
}
