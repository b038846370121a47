package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// builds are the binaries Build made in this test process, under one
// temporary directory, which removeBuilds removes.
var builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*build // by the package's absolute directory
	made int               // builds started, for their folders' names
}

type build struct {
	once sync.Once
	sub  string // its folder under the process's
	path string
	err  error
}

// Build builds the main package in the directory pkg ("./testdata/echo",
// "../../functions/payment": relative to the package under test, where go
// test runs its tests) for this machine, once per test process, and returns
// the binary's path. Tests that ask for the same package share the one
// build, and a failed build fails each of them. The binary is named after
// the package's directory.
//
// The binaries are removed when the process's tests end, by Moto.Run or
// Main from TestMain; in a package with neither, they stay in the system's
// temporary directory.
//
// When the environment names a folder in SharedBuildsEnv (make test sets
// it for its run), the binaries go there instead and every test process of
// the run shares them: a package's binary is built once per run, not once
// per test package, and whoever set the folder removes it.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	return buildOnce(tb, pkg, false)
}

// BuildRace is Build with the race detector on (go build -race): for a
// test that runs a bootstrap's goroutines at once (several invocations in
// one process) and wants a data race in them to fail it. The race
// detector's report goes to the process's standard error, and the process
// exits with status 66 when it ends.
func BuildRace(tb testing.TB, pkg string) string {
	tb.Helper()
	return buildOnce(tb, pkg, true)
}

// buildOnce is Build, with the race detector if race.
func buildOnce(tb testing.TB, pkg string, race bool) string {
	tb.Helper()
	abs, err := filepath.Abs(pkg)
	if err != nil {
		tb.Fatalf("testenv: build %s: %v", pkg, err)
	}
	key := buildKey(abs, race)
	builds.mu.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*build{}
	}
	b := builds.bins[key]
	if b == nil {
		// Each binary has a folder of its own: a function runs in its
		// binary's folder (LAMBDA_TASK_ROOT), and two packages may share a
		// name.
		builds.made++
		b = &build{sub: strconv.Itoa(builds.made)}
		builds.bins[key] = b
	}
	builds.mu.Unlock()

	b.once.Do(func() {
		if shared := os.Getenv(SharedBuildsEnv); shared != "" {
			b.path, b.err = buildShared(shared, pkg, abs, race)
			return
		}
		dir, err := buildDir()
		if err == nil {
			dir = filepath.Join(dir, b.sub)
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			b.err = fmt.Errorf("testenv: build %s: %w", pkg, err)
			return
		}
		out := filepath.Join(dir, filepath.Base(abs))
		if b.err = goBuild(pkg, abs, out, race); b.err == nil {
			b.path = out
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// SharedBuildsEnv names the environment variable that holds a folder of
// binaries shared by the test processes of one run (see Build).
const SharedBuildsEnv = "LAMBDAKIT_TEST_BUILDS"

// buildShared returns the binary of the package in directory abs from the
// shared folder, building it there if no process of the run has yet. Two
// processes that build it at once each write their own file and rename it
// into place; either binary is the same program.
func buildShared(shared, pkg, abs string, race bool) (string, error) {
	// A folder per package (and race detector), named after its directory:
	// a function runs in its binary's folder, and two packages may share a
	// base name.
	sum := sha256.Sum256([]byte(buildKey(abs, race)))
	dir := filepath.Join(shared, hex.EncodeToString(sum[:8]))
	out := filepath.Join(dir, filepath.Base(abs))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: build %s: %w", pkg, err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	if err := goBuild(pkg, abs, tmp, race); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("testenv: build %s: %w", pkg, err)
	}
	return out, nil
}

// buildKey names the build of the package in directory abs: two builds of
// one package, with and without the race detector, are two binaries.
func buildKey(abs string, race bool) string {
	if race {
		return abs + " -race"
	}
	return abs
}

// goBuild builds the main package in directory abs into out, with the race
// detector if race.
func goBuild(pkg, abs, out string, race bool) error {
	// A build is shared, so it does not end with the test that asked
	// first; cold, with the race detector, it can take a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	if msg, err := exec.CommandContext(ctx, "go", append(args, abs)...).CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: go build %s: %v\n%s", pkg, err, msg)
	}
	return nil
}

// buildDir returns the process's folder of binaries, made on first use.
func buildDir() (string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "lambdakit-test-bin-")
		if err != nil {
			return "", err
		}
		builds.dir = dir
	}
	return builds.dir, nil
}

// removeBuilds removes what Build made.
func removeBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.bins, builds.made = "", nil, 0
	}
}

// Main runs the package's tests, removes the binaries Build made, and exits
// the process with the tests' status; it does not return. Call it from
// TestMain in a package that builds binaries without moto_server (Moto.Run
// does the same):
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	removeBuilds()
	os.Exit(code)
}
