// Command testrun is `make test`: it runs the module's tests with go test
// -json and prints, as they come, what it is doing and how each package
// went, with times, then one closing line: packages, tests, time.
//
// The packages where goroutines meet (the engine, the batch, the stores,
// the mappings, the Runtime API) run with the race detector; the others
// run without it, which halves their build and run time (they drive the
// former through real processes or parse and print). Each group is one go
// test run with -p packages at once.
//
//	go run ./tools/testrun [-p 2] [-timeout 15m] [-v] [-json file] [packages]
//
// Before it starts it says which test servers are missing: the tests that
// need one are skipped then (failed under CI), and `make deps` installs
// them.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// raced are the package patterns run with -race: where goroutines meet.
var raced = []string{
	"./lambdakit/...",
	"./dynamostore/...",
	"./valkeystore/...",
	"./internal/esm/...",
	"./internal/runtimeapi/...",
	"./internal/ddbstream/...",
	"./internal/kinesisstream/...",
	// The test helpers' fault proxies (their race builds are made for the
	// packages above anyway).
	"./internal/testenv/...",
	"./internal/redisserver/...",
}

// heartbeat is how long testrun stays silent before it says what is still
// building or running.
const heartbeat = 20 * time.Second

func main() {
	p := flag.Int("p", 2, "packages built and tested at once, per group")
	timeout := flag.String("timeout", "15m", "go test -timeout, per package")
	verbose := flag.Bool("v", false, "print every test's output, not only the failures'")
	jsonFile := flag.String("json", "", "also write go test's events to this file, for timings")
	flag.Parse()
	os.Exit(testAll(*p, *timeout, *verbose, *jsonFile, flag.Args()))
}

// testAll runs the tests and returns the exit code: 0 when all passed, 1 when
// any failed, 2 when they could not run.
func testAll(p int, timeout string, verbose bool, jsonFile string, patterns []string) int {
	start := time.Now()
	missingServers(os.Stdout)
	race, rest, err := groups(patterns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	r := &report{out: os.Stdout, verbose: verbose, start: start, pkgs: map[string]*pkgState{}, events: io.Discard}
	if jsonFile != "" {
		f, err := os.Create(jsonFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testrun:", err)
			return 2
		}
		defer f.Close()
		r.events = f
	}
	// One folder of test binaries for the whole run (see testenv.Build).
	builds, err := os.MkdirTemp("", "lambdakit-test-builds-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	defer os.RemoveAll(builds)
	os.Setenv(testenv.SharedBuildsEnv, builds)

	// The two groups run at the same time: most packages spend their time
	// waiting on servers and processes, not computing, so one group alone
	// left a core idle (make test used 1.07 cores of 2 on average when the
	// groups ran one after the other: 5m26s of CPU in 5m06s).
	stop := r.heartbeats()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		runErrs []error
	)
	for _, g := range []struct {
		name  string
		flags []string
		pkgs  []string
	}{
		{"with -race", []string{"-race"}, race},
		{"without -race", nil, rest},
	} {
		if len(g.pkgs) == 0 {
			continue
		}
		r.print("== %d packages %s, %d at once  [%s]\n", len(g.pkgs), g.name, p, since(start))
		args := append([]string{"test", "-json", "-count=1", "-p", strconv.Itoa(p), "-timeout", timeout}, g.flags...)
		cmd := exec.Command("go", append(args, g.pkgs...)...)
		wg.Go(func() {
			if err := r.run(cmd); err != nil {
				errMu.Lock()
				runErrs = append(runErrs, fmt.Errorf("go test %s: %w", g.name, err))
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	stop()
	if !r.summary(errors.Join(runErrs...)) {
		return 1
	}
	return 0
}

// groups splits the packages of patterns (default ./...) into those
// under the raced patterns and the others.
func groups(patterns []string) (race, rest []string, err error) {
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	all, err := goList(patterns...)
	if err != nil {
		return nil, nil, err
	}
	racedPkgs, err := goList(raced...)
	if err != nil {
		return nil, nil, err
	}
	isRaced := map[string]bool{}
	for _, p := range racedPkgs {
		isRaced[p] = true
	}
	for _, p := range all {
		if isRaced[p] {
			race = append(race, p)
		} else {
			rest = append(rest, p)
		}
	}
	return race, rest, nil
}

func goList(patterns ...string) ([]string, error) {
	out, err := exec.Command("go", append([]string{"list"}, patterns...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w", strings.Join(patterns, " "), err)
	}
	return strings.Fields(string(out)), nil
}

// missingServers says which servers the integration tests need and the
// machine lacks.
func missingServers(w io.Writer) {
	for _, err := range []error{motoserver.Installed(), redisserver.Installed()} {
		if err == nil {
			continue
		}
		what := "skipped"
		if os.Getenv("CI") != "" {
			what = "failed, because CI is set"
		}
		fmt.Fprintf(w, "!! %v\n!! the tests that need it will be %s\n", err, what)
	}
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type pkgState struct {
	started            bool
	tests, skip, fails int
	output             map[string][]string // by test ("" for the package)
}

type report struct {
	out     io.Writer
	events  io.Writer // go test's lines as they came
	verbose bool
	start   time.Time

	mu                   sync.Mutex
	pkgs                 map[string]*pkgState
	done, failed         []string
	tests, skip, noTests int
	lastPrint            time.Time
}

// run runs one go test -json and reports its events as they come.
func (r *report) run(cmd *exec.Cmd) error {
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	return errors.Join(r.read(stdout), cmd.Wait())
}

// read reports the events of a go test -json output.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		r.events.Write(append(sc.Bytes(), '\n'))
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event (go test's own messages): pass it on.
			r.print("%s\n", sc.Text())
			continue
		}
		r.event(e)
	}
	return sc.Err()
}

func (r *report) state(pkg string) *pkgState {
	s := r.pkgs[pkg]
	if s == nil {
		s = &pkgState{output: map[string][]string{}}
		r.pkgs[pkg] = s
	}
	return s
}

func (r *report) event(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state(e.Package)
	top := e.Test != "" && !strings.Contains(e.Test, "/")
	switch {
	case e.Action == "start":
		s.started = true
	case e.Action == "build-output" || e.Action == "output":
		s.output[e.Test] = append(s.output[e.Test], e.Output)
		if r.verbose {
			r.printLocked("%s", e.Output)
		}
	case e.Action == "run" && top:
		s.tests++
	case e.Action == "skip" && top:
		s.skip++
	case e.Action == "fail" && top:
		s.fails++
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		r.finish(e, s)
	}
}

// finish prints a package's line, and the output of its failures.
func (r *report) finish(e event, s *pkgState) {
	name := strings.TrimPrefix(e.Package, "github.com/lambdakit/lambdakit/")
	r.tests += s.tests
	r.skip += s.skip
	switch {
	case e.Action == "fail":
		r.failed = append(r.failed, name)
		r.printLocked("FAIL %-40s %6.1fs  %d tests, %d failed  [%s]\n", name, e.Elapsed, s.tests, s.fails, since(r.start))
		if !r.verbose {
			// The package's own output (TestMain, a build error) and that
			// of the failed tests; all of it when no test failed (a panic,
			// a timeout).
			for _, test := range sortedKeys(s.output) {
				if test != "" && s.fails > 0 && !failedTest(s.output[test]) {
					continue
				}
				for _, line := range s.output[test] {
					r.printLocked("    %s", line)
				}
			}
		}
	case s.tests == 0:
		r.noTests++
	default:
		skipped := ""
		if s.skip > 0 {
			skipped = fmt.Sprintf(", %d skipped", s.skip)
		}
		r.printLocked("ok   %-40s %6.1fs  %d tests%s  [%s]\n", name, e.Elapsed, s.tests, skipped, since(r.start))
	}
	r.done = append(r.done, e.Package)
	delete(r.pkgs, e.Package)
}

// failedTest reports whether a test's output ends in its failure.
func failedTest(lines []string) bool {
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// heartbeats says what is running whenever nothing was printed for a
// while, until the returned func is called.
func (r *report) heartbeats() (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			r.mu.Lock()
			if time.Since(r.lastPrint) >= heartbeat {
				var running []string
				for pkg, s := range r.pkgs {
					if s.started {
						running = append(running, strings.TrimPrefix(pkg, "github.com/lambdakit/lambdakit/"))
					}
				}
				sort.Strings(running)
				if len(running) == 0 {
					r.printLocked(".. building  [%s]\n", since(r.start))
				} else {
					r.printLocked(".. running %s  [%s]\n", strings.Join(running, ", "), since(r.start))
				}
			}
			r.mu.Unlock()
		}
	}()
	return func() { close(done) }
}

func (r *report) print(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.printLocked(format, args...)
}

func (r *report) printLocked(format string, args ...any) {
	fmt.Fprintf(r.out, format, args...)
	r.lastPrint = time.Now()
}

// summary prints the closing line and reports whether everything passed:
// no package failed, and go test itself ended well (runErr nil; it fails
// when a package failed, and also when go test could not run).
func (r *report) summary(runErr error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	status := "PASS"
	switch {
	case len(r.failed) > 0:
		status = "FAIL (" + strings.Join(r.failed, ", ") + ")"
	case runErr != nil:
		status = "FAIL (" + runErr.Error() + ")"
	}
	fmt.Fprintf(r.out, "%s: %d packages (%d with tests), %d tests run, %d skipped, in %s\n",
		status, len(r.done), len(r.done)-r.noTests, r.tests, r.skip, since(r.start))
	return status == "PASS"
}

func since(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
}
