package bench_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lambdakit/lambdakit/tools/internal/bench"
)

func TestParseMicro(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/lambdakit/lambdakit/lambdakit
cpu: AMD EPYC
BenchmarkIdempotentNewKey-2               	  215880	      8829 ns/op	    2274 B/op	      31 allocs/op
BenchmarkIdempotentNewKey-2               	  230958	     11624 ns/op	    2274 B/op	      31 allocs/op
BenchmarkIdempotentNewKey-2               	  230958	      9000 ns/op	    2274 B/op	      31 allocs/op
BenchmarkBatch10Duplicates-2              	   16219	     96272.5 ns/op	   21920 B/op	     309 allocs/op
PASS
ok  	github.com/lambdakit/lambdakit/lambdakit	6.859s
`
	ms, err := bench.ParseMicro(out)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(ms)
	want := "[{IdempotentNewKey [8829 9000 11624] 2274 31} {Batch10Duplicates [96272.5] 21920 309}]"
	if got != want {
		t.Fatalf("ParseMicro = %s; want %s", got, want)
	}
	if m := ms[0].Median(); m != 9000 {
		t.Fatalf("Median = %v; want 9000", m)
	}
}

func TestParseMicroWithoutBenchmarksFails(t *testing.T) {
	if _, err := bench.ParseMicro("PASS\nok x 0.1s\n"); err == nil {
		t.Fatal("ParseMicro of output without benchmark lines succeeded; want an error")
	}
}

// Every benchmark of lambdakit/bench_test.go is described, and divided by
// its records, in the micro table.
func TestMicroDescribesEveryBenchmark(t *testing.T) {
	src, err := os.ReadFile("../../../lambdakit/bench_test.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^func Benchmark(\w+)\(b \*testing\.B\)`).FindAllStringSubmatch(string(src), -1)
	if len(names) == 0 {
		t.Fatal("no benchmarks found in lambdakit/bench_test.go")
	}
	for _, n := range names {
		name := n[1]
		var out strings.Builder
		perOp := 1000.0 * 10 // a batch of 10 at 1,000 ns/record, or one record at 10,000
		bench.PrintMicro(&out, []bench.Micro{{Name: name, NsPerOp: []float64{perOp}}}, 1)
		line := ""
		for l := range strings.Lines(out.String()) {
			if strings.HasPrefix(l, "| `"+name+"`") {
				line = l
			}
		}
		if line == "" || strings.HasPrefix(line, "| `"+name+"`: "+name+" |") {
			t.Errorf("benchmark %s has no description in the micro table: %q", name, line)
		}
		if strings.HasPrefix(name, "Batch10") && !strings.Contains(line, "| 1,000 (") {
			t.Errorf("benchmark %s is not shown per record: %q; want 1,000 ns/record", name, line)
		}
	}
}
