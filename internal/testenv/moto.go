package testenv

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/lambdakit/lambdakit/internal/motoserver"
)

// deadEndpoint is where the SDK is pointed when there is no moto: a
// loopback port nothing listens on, so that a test that builds a client
// anyway fails fast instead of reaching AWS.
const deadEndpoint = "http://127.0.0.1:1"

// Moto is the one moto_server shared by the tests of a package. Declare it
// as a package-level variable in a _test.go file, start it with Run from
// TestMain, and reach it from tests with Server or Config, which skip the
// test (or fail it under CI) when there is no moto_server. Its zero value
// is ready for Run.
type Moto struct {
	ran  bool
	srv  *motoserver.Server
	err  error // why srv is nil, for messages
	fail bool  // whether a missing server fails tests instead of skipping them
}

// Run starts moto_server, runs the package's tests, removes the binaries
// Build made, and exits the process with the tests' status; it does not
// return. Call it from TestMain:
//
//	func TestMain(m *testing.M) { moto.Run(m) }
//
// Before the tests run, Run points the process environment, which child
// processes inherit, at the server with static test credentials (see Env).
//
// Without moto_server on PATH, tests that ask for the server are skipped,
// unless the CI environment variable is set: then they fail, and so does
// the run even if none asked. Any other failure to start the server fails
// them always.
func (m *Moto) Run(tm *testing.M) {
	m.ran = true
	srv, err := motoserver.Start()
	if err == nil {
		err = setEnv(srv.URL)
	} else {
		// Point the SDK somewhere harmless all the same.
		if envErr := setEnv(deadEndpoint); envErr != nil {
			err = errors.Join(err, envErr)
		}
	}
	switch {
	case err == nil:
		m.srv = srv
	case errors.Is(err, motoserver.ErrNotInstalled) && os.Getenv("CI") == "":
		m.err = fmt.Errorf("%w; skipping the tests that need it", err)
	case errors.Is(err, motoserver.ErrNotInstalled):
		m.err, m.fail = fmt.Errorf("%w; failing, because CI is set", err), true
	default:
		m.err, m.fail = err, true
	}
	if m.err != nil {
		fmt.Fprintln(os.Stderr, m.err)
	}
	code := tm.Run()
	srv.Stop() // a nil srv is fine
	removeBuilds()
	if code == 0 && m.fail {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", m.err)
		code = 1
	}
	os.Exit(code)
}

// Server returns the running server. Without one it skips tb, or fails it
// when a missing server must not pass (CI, or a server that would not
// start).
func (m *Moto) Server(tb testing.TB) *motoserver.Server {
	tb.Helper()
	switch {
	case !m.ran:
		tb.Fatal("testenv: no moto_server: call moto.Run(m) from TestMain")
	case m.fail:
		tb.Fatal(m.err)
	case m.srv == nil:
		tb.Skip(m.err)
	}
	return m.srv
}

// Config returns an AWS config for the running server; see Config.
func (m *Moto) Config(tb testing.TB) aws.Config {
	tb.Helper()
	return Config(tb, m.Server(tb))
}

// setEnv sets motoserver.Env(endpoint) and removes what would override it: a session
// token or profile of the developer's, and per-service endpoints.
func setEnv(endpoint string) error {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_ENDPOINT_URL_") {
			os.Unsetenv(k)
		}
	}
	for _, k := range []string{"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"} {
		os.Unsetenv(k)
	}
	for _, kv := range motoserver.Env(endpoint) {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("testenv: setting %s: %w", k, err)
		}
	}
	return nil
}

// RequireMotoServer is for tests that start moto_server themselves (through
// a command under test): it skips tb when there is no moto_server (on PATH
// or in the project's .venv), or fails it when the CI environment variable
// is set.
func RequireMotoServer(tb testing.TB) {
	tb.Helper()
	if err := motoserver.Installed(); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("%v; failing, because CI is set", motoserver.ErrNotInstalled)
		}
		tb.Skipf("%v; skipping", motoserver.ErrNotInstalled)
	}
}
