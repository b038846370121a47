package bench_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

func cpuRounds(pairs ...[2]time.Duration) bench.CPUComparison {
	c := bench.CPUComparison{Impls: [2]string{"lambdakit", "bare"}, Records: 100, Rounds: len(pairs), BatchSize: 10, Concurrency: 2,
		LoadBefore: "1.00 1.00 1.00", LoadAfter: "2.00 1.00 1.00"}
	for i, p := range pairs {
		c.Round = append(c.Round, bench.CPURound{First: c.Impls[i%2], CPU: map[string]time.Duration{"lambdakit": p[0], "bare": p[1]},
			Failed: map[string]int{}, Load: "1.50 1.00 1.00", Containers: 1})
	}
	return c
}

// The target is held to the median of the rounds' ratios, which one
// spoiled round does not move; the pooled ratio is reported beside it.
func TestCPUComparisonFigures(t *testing.T) {
	ms := time.Millisecond
	c := cpuRounds([2]time.Duration{104 * ms, 100 * ms}, [2]time.Duration{300 * ms, 100 * ms}, [2]time.Duration{100 * ms, 100 * ms})
	if got := c.MedianRatio(); got != 1.04 {
		t.Errorf("median ratio %v; want 1.04, the middle round's", got)
	}
	if got := c.PooledRatio(); got < 1.679 || got > 1.681 {
		t.Errorf("pooled ratio %v; want 504/300", got)
	}
	if got := c.Total("lambdakit"); got != 504*ms/300 {
		t.Errorf("lambdakit's CPU per record %v; want %v", got, 504*ms/300)
	}
	even := cpuRounds([2]time.Duration{110 * ms, 100 * ms}, [2]time.Duration{100 * ms, 100 * ms})
	if got := even.MedianRatio(); got < 1.0499 || got > 1.0501 {
		t.Errorf("median of two rounds %v; want their mean, 1.05", got)
	}

	cpuReportHas(t, c,
		"| 1 | 1 | lambdakit | 1,040 | 1,000 | 1.04× | 0 | 1.50 |",
		"| 2 | 1 | bare | 3,000 | 1,000 | 3.00× | 0 | 1.50 |",
		"ratio median 1.040× (rounds 1.000× – 3.000×), pooled 1.680×",
		"Target: at most 1.05×, on the median: met.",
		"before: 1.00 1.00 1.00; after: 2.00 1.00 1.00")
	var out bytes.Buffer
	bench.PrintCPU(&out, cpuRounds([2]time.Duration{106 * ms, 100 * ms}))
	if !strings.Contains(out.String(), "on the median: not met.") {
		t.Errorf("a ratio of 1.06 reported as:\n%s", out.String())
	}
}

// With new containers after every few rounds, the report numbers each
// round's set and gives each set's median ratio: a set of processes that
// came out dearer or cheaper shows as such, not as the code's.
func TestCPUComparisonMediansBySetOfContainers(t *testing.T) {
	ms := time.Millisecond
	c := cpuRounds([2]time.Duration{102 * ms, 100 * ms}, [2]time.Duration{104 * ms, 100 * ms},
		[2]time.Duration{110 * ms, 100 * ms}, [2]time.Duration{108 * ms, 100 * ms}, [2]time.Duration{112 * ms, 100 * ms})
	c.RestartEvery = 2
	for i := range c.Round {
		c.Round[i].Containers = 1 + i/2
	}
	got := c.SetMedians()
	want := []float64{1.03, 1.09, 1.12}
	if len(got) != len(want) {
		t.Fatalf("set medians %v; want %v", got, want)
	}
	for i := range want {
		if got[i] < want[i]-1e-9 || got[i] > want[i]+1e-9 {
			t.Errorf("set medians %v; want %v", got, want)
		}
	}
	cpuReportHas(t, c,
		"replaced by new ones after every 2 rounds",
		"| 3 | 2 | lambdakit | 1,100 | 1,000 | 1.10× | 0 | 1.50 |",
		"Median ratio of each set of containers: 1.030×, 1.090×, 1.120×.")
}

// cpuReportHas fails t unless PrintCPU's report of c holds each of wants.
func cpuReportHas(t *testing.T, c bench.CPUComparison, wants ...string) {
	t.Helper()
	var out bytes.Buffer
	bench.PrintCPU(&out, c)
	for _, want := range wants {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
