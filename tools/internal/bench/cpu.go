package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The design target "first delivery: at most 1.05× the floor's CPU per
// message" asks for a measure steadier than 5 %. One end-to-end row per
// function, one after the other, is not: on a shared 2-core machine the
// load moves between the two rows, and the ratio with it. Rounds that
// take turns (lambdakit then the floor, the floor then lambdakit) were
// not either: a function's CPU per record moved by half from one round
// to the next (one run's round ratios spread from 0.93× to 1.32×), as
// moto's pace and the machine's other tenants changed between the two
// halves of a round. So each round runs the two functions side by side:
// the same number of new payments through each one's warm containers,
// at the same time, each round's CPU read from the kernel for each
// function's processes only (/proc/<pid>/task/*/schedstat: CPU time, not
// wall time, so that waiting for moto or for a busy core costs nothing).
// Whatever slows the machine slows both alike (the same run's round
// ratios then spread from 1.03× to 1.15×); the median of the rounds'
// ratios ignores a round that something else spoiled.

// CPURound is one round of the comparison: the same number of new
// payments through each function's warm containers, at the same time.
type CPURound struct {
	// First is the function whose batches the round started first.
	First string
	// CPU is each function's CPU time over the round, by Impl name.
	CPU map[string]time.Duration
	// Failed counts records reported failed, by Impl name.
	Failed map[string]int
	// Load is /proc/loadavg's 1-minute average when the round ended.
	Load string
	// Containers numbers the set of containers the round ran on, from 1:
	// with CPUComparison.RestartEvery, each set runs that many rounds.
	Containers int
}

// CPUComparison is the side-by-side first-delivery CPU comparison of two
// functions: Impls[0] (lambdakit) against Impls[1] (the floor).
type CPUComparison struct {
	Impls           [2]string
	Records, Rounds int // new payments per function per round; rounds
	BatchSize       int
	Concurrency     int // containers per function, invoked at once
	Warmup          int // new payments per function before the first round, not measured
	// RestartEvery is how many rounds a set of containers runs before
	// new ones, warmed up alike, replace it; 0 keeps one set for every
	// round. A process keeps what it starts with (which core it shares
	// with moto, where its code and data land), and that moves all of its
	// rounds together: a run on one set gives the ratio of those
	// processes, not of the code.
	RestartEvery int
	Round        []CPURound
	LoadBefore   string // load averages (1, 5, 15 min) before the first round
	LoadAfter    string // and after the last
}

// PerRecord is fn's CPU per record in round r.
func (c CPUComparison) PerRecord(r CPURound, fn string) time.Duration {
	return r.CPU[fn] / time.Duration(c.Records)
}

// Ratios are each round's CPU ratio, Impls[0] / Impls[1].
func (c CPUComparison) Ratios() []float64 {
	out := make([]float64, len(c.Round))
	for i, r := range c.Round {
		out[i] = float64(r.CPU[c.Impls[0]]) / float64(r.CPU[c.Impls[1]])
	}
	return out
}

// MedianRatio is the median of the rounds' ratios: the figure the target
// is held to.
func (c CPUComparison) MedianRatio() float64 {
	rs := c.Ratios()
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if n := len(rs); n%2 == 0 {
		return (rs[n/2-1] + rs[n/2]) / 2
	}
	return rs[len(rs)/2]
}

// SetMedians are the median ratios of the rounds of each set of
// containers, in order (see RestartEvery).
func (c CPUComparison) SetMedians() []float64 {
	var out []float64
	for i := 0; i < len(c.Round); {
		j := i
		for j < len(c.Round) && c.Round[j].Containers == c.Round[i].Containers {
			j++
		}
		set := c
		set.Round = c.Round[i:j]
		out = append(out, set.MedianRatio())
		i = j
	}
	return out
}

// PooledRatio is the ratio of the total CPU over every round.
func (c CPUComparison) PooledRatio() float64 {
	var a, b time.Duration
	for _, r := range c.Round {
		a += r.CPU[c.Impls[0]]
		b += r.CPU[c.Impls[1]]
	}
	return float64(a) / float64(b)
}

// Total is fn's CPU per record over every round.
func (c CPUComparison) Total(fn string) time.Duration {
	var d time.Duration
	for _, r := range c.Round {
		d += r.CPU[fn]
	}
	return d / time.Duration(c.Records*len(c.Round))
}

// FailedTotal counts the records that failed over every round.
func (c CPUComparison) FailedTotal() int {
	n := 0
	for _, r := range c.Round {
		for _, f := range r.Failed {
			n += f
		}
	}
	return n
}

// cpuWarmup is how many new payments each function's containers get,
// unmeasured, before the first round.
const cpuWarmup = 100

// FirstDeliveryCPU compares the CPU per record of two functions on first
// delivery: rounds rounds of records new payments each (from pays[i] for
// impls[i]), in batches of batchSize, on h.Concurrency warm containers per
// function (warmed up with cpuWarmup payments), the two functions driven
// at once, the one started first alternating from one round to the next.
// The containers are kept for every round, or with restartEvery > 0
// replaced by new ones, warmed up alike, after every restartEvery rounds.
func (h *Harness) FirstDeliveryCPU(ctx context.Context, impls [2]Impl, pays [2]*Payments, rounds, records, batchSize, restartEvery int) (CPUComparison, error) {
	c := CPUComparison{Impls: [2]string{impls[0].Name, impls[1].Name}, Records: records, Rounds: rounds, BatchSize: batchSize,
		Concurrency: h.Concurrency, Warmup: cpuWarmup, RestartEvery: restartEvery, LoadBefore: LoadAverage()}
	var warm [2]*Containers
	defer func() {
		for _, w := range warm {
			w.Close()
		}
	}()
	set := 0
	startWarm := func() error {
		set++
		for i, im := range impls {
			warm[i].Close()
			warm[i] = nil
			w, err := h.Start(ctx, im, h.Concurrency, nil)
			if err != nil {
				return err
			}
			warm[i] = w
			// Warmer than one batch: connection pools full, the heap at
			// its working size. Not measured.
			h.progress("first-delivery CPU, warming up %s (containers %d)", im.Name, set)
			if _, _, err := h.drive(ctx, w, InBatches(pays[i].Take(cpuWarmup), batchSize), nil); err != nil {
				return fmt.Errorf("bench: first-delivery CPU, warming up %s: %w", im.Name, err)
			}
		}
		return nil
	}
	for r := range rounds {
		if r == 0 || restartEvery > 0 && r%restartEvery == 0 {
			if err := startWarm(); err != nil {
				return c, err
			}
		}
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		round := CPURound{First: impls[order[0]].Name, CPU: map[string]time.Duration{}, Failed: map[string]int{}, Containers: set}
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for _, i := range order {
			wg.Go(func() {
				h.progress("first-delivery CPU, round %d of %d, %s", r+1, rounds, impls[i].Name)
				pids := pidsOf(impls[i].Path)
				cpu0 := sumCPU(pids)
				outs, _, err := h.drive(ctx, warm[i], InBatches(pays[i].Take(records), batchSize), nil)
				if err != nil {
					errs[i] = fmt.Errorf("bench: first-delivery CPU, %s: %w", impls[i].Name, err)
					return
				}
				cpu := sumCPU(pids) - cpu0
				mu.Lock()
				defer mu.Unlock()
				round.CPU[impls[i].Name] = cpu
				for _, o := range outs {
					round.Failed[impls[i].Name] += o.failed
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return c, err
		}
		round.Load = LoadAverage()
		c.Round = append(c.Round, round)
	}
	c.LoadAfter = LoadAverage()
	return c, nil
}
