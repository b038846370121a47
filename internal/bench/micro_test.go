package bench_test

import (
	"fmt"
	"testing"

	"github.com/lambdakit/lambdakit/internal/bench"
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
