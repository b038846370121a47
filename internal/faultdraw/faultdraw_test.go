package faultdraw_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/lambdakit/lambdakit/internal/faultdraw"
)

// draws returns the faults of n calls as a string: '.' none, 'b' before,
// 'a' after.
func draws(d *faultdraw.Draw, n int) string {
	out := make([]byte, n)
	for i := range out {
		switch before, after := d.Next(); {
		case before && after:
			out[i] = '!'
		case before:
			out[i] = 'b'
		case after:
			out[i] = 'a'
		default:
			out[i] = '.'
		}
	}
	return string(out)
}

func TestDrawStrikesTheRateHalfBeforeHalfAfter(t *testing.T) {
	const n = 4000
	d := faultdraw.New(0.3, 7)
	s := draws(d, n)
	var before, after, both int
	for _, c := range s {
		switch c {
		case 'b':
			before++
		case 'a':
			after++
		case '!':
			both++
		}
	}
	if rate := float64(before+after) / n; rate < 0.27 || rate > 0.33 {
		t.Errorf("got fault rate %.3f; want about 0.3", rate)
	}
	if both != 0 || before < after/2 || after < before/2 {
		t.Errorf("got %d before, %d after, %d both; want about as many before as after, never both", before, after, both)
	}
	if d.Injected() != before+after {
		t.Errorf("Injected() = %d; want %d", d.Injected(), before+after)
	}
}

func TestDrawIsRepeatableForASeed(t *testing.T) {
	a, b := draws(faultdraw.New(0.5, 3), 200), draws(faultdraw.New(0.5, 3), 200)
	if a != b {
		t.Errorf("two draws of seed 3 differ:\n%s\n%s", a, b)
	}
	if c := draws(faultdraw.New(0.5, 4), 200); c == a {
		t.Errorf("seeds 3 and 4 drew the same faults: %s", a)
	}
}

func TestDrawEdges(t *testing.T) {
	if s := draws(faultdraw.New(0, 1), 100); s != strings.Repeat(".", 100) {
		t.Errorf("rate 0 struck: %s", s)
	}
	for _, c := range draws(faultdraw.New(1, 1), 100) {
		if c == '.' {
			t.Fatal("rate 1 let a call through")
		}
	}
	var none *faultdraw.Draw
	if s := draws(none, 10); s != ".........." || none.Injected() != 0 {
		t.Errorf("a nil Draw struck: %s, %d injected", s, none.Injected())
	}
}

// Under -race: many goroutines draw from one Draw, and every fault is
// counted.
func TestDrawIsSafeForConcurrentUse(t *testing.T) {
	d := faultdraw.New(0.5, 9)
	var mu sync.Mutex
	struck := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				if b, a := d.Next(); b || a {
					mu.Lock()
					struck++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if d.Injected() != struck {
		t.Errorf("Injected() = %d; the goroutines saw %d", d.Injected(), struck)
	}
}
