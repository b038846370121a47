package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// newReport is a report that writes to a buffer.
func newReport(out io.Writer) *report {
	return &report{out: out, start: time.Now(), pkgs: map[string]*pkgState{}, events: io.Discard}
}

// A passing package gets one line with its tests and skips; a failing one
// its line and the output of its failed test only; the closing line counts
// packages, top-level tests (not subtests) and skips, and says FAIL.
func TestReportLinesAndSummary(t *testing.T) {
	const stream = `{"Action":"start","Package":"github.com/lambdakit/lambdakit/a"}
{"Action":"run","Package":"github.com/lambdakit/lambdakit/a","Test":"TestOne"}
{"Action":"run","Package":"github.com/lambdakit/lambdakit/a","Test":"TestOne/sub"}
{"Action":"pass","Package":"github.com/lambdakit/lambdakit/a","Test":"TestOne/sub"}
{"Action":"pass","Package":"github.com/lambdakit/lambdakit/a","Test":"TestOne"}
{"Action":"run","Package":"github.com/lambdakit/lambdakit/a","Test":"TestTwo"}
{"Action":"output","Package":"github.com/lambdakit/lambdakit/a","Test":"TestTwo","Output":"    a_test.go:9: no moto_server; skipping\n"}
{"Action":"skip","Package":"github.com/lambdakit/lambdakit/a","Test":"TestTwo"}
{"Action":"pass","Package":"github.com/lambdakit/lambdakit/a","Elapsed":1.5}
{"Action":"start","Package":"github.com/lambdakit/lambdakit/b"}
{"Action":"run","Package":"github.com/lambdakit/lambdakit/b","Test":"TestGood"}
{"Action":"output","Package":"github.com/lambdakit/lambdakit/b","Test":"TestGood","Output":"chatter of a passing test\n"}
{"Action":"pass","Package":"github.com/lambdakit/lambdakit/b","Test":"TestGood"}
{"Action":"run","Package":"github.com/lambdakit/lambdakit/b","Test":"TestBad"}
{"Action":"output","Package":"github.com/lambdakit/lambdakit/b","Test":"TestBad","Output":"    b_test.go:7: got 1; want 2\n"}
{"Action":"output","Package":"github.com/lambdakit/lambdakit/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"github.com/lambdakit/lambdakit/b","Test":"TestBad"}
{"Action":"fail","Package":"github.com/lambdakit/lambdakit/b","Elapsed":0.2}
{"Action":"start","Package":"github.com/lambdakit/lambdakit/c"}
{"Action":"output","Package":"github.com/lambdakit/lambdakit/c","Output":"?   \tgithub.com/lambdakit/lambdakit/c\t[no test files]\n"}
{"Action":"skip","Package":"github.com/lambdakit/lambdakit/c","Elapsed":0}
`
	var out strings.Builder
	r := newReport(&out)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if r.summary(nil) {
		t.Error("summary reported a pass with package b failed")
	}
	got := out.String()
	for _, want := range []string{
		"ok   a ", "2 tests, 1 skipped",
		"FAIL b ", "2 tests, 1 failed", "b_test.go:7: got 1; want 2",
		"FAIL (b): 3 packages (2 with tests), 4 tests run, 1 skipped, in ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"chatter of a passing test", "no moto_server", " c "} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}
}

// go test failing without a failed package (it could not run: a bad
// flag, say) fails the summary too.
func TestSummaryFailsWhenGoTestFailed(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	if r.summary(errors.New("go test with -race: exit status 2")) {
		t.Error("summary reported a pass")
	}
	if !strings.HasPrefix(out.String(), "FAIL (go test with -race: exit status 2): 0 packages") {
		t.Errorf("summary %q; want FAIL naming go test's error", out.String())
	}
}
