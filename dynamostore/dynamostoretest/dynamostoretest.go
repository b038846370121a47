// Package dynamostoretest gives the tests of code that keeps its
// idempotency records with dynamostore a local DynamoDB: moto_server,
// started on a free loopback port and stopped when the test ends, or an
// endpoint already running that AWS_ENDPOINT_URL_DYNAMODB names.
//
// A test of a consumer:
//
//	func TestShipsOnce(t *testing.T) {
//		db := dynamostoretest.Start(t)
//		store, err := dynamostore.New(db.Client(), db.NewTable(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		// ... run the consumer's lambdakit.Batch with store on an event
//		// and its redelivery (lambdakittest.Event, lambdakittest.Redelivery)
//	}
//
// Start skips the test when there is no moto_server (install it with
// pip install 'moto[server]'), and fails it when the CI environment variable
// is set, so that a CI machine without moto does not pass by skipping. A
// package with many such tests starts one server for all of them with Run
// from TestMain.
//
// Everything talks to the local endpoint only, with static test
// credentials: the configs are built by hand, so neither shared AWS files
// nor the EC2 instance metadata service are ever consulted.
package dynamostoretest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// EndpointEnv is the variable whose endpoint Open and Start reuse instead
// of starting a server: the AWS SDK's own per-service endpoint variable,
// which Run sets for the tests it runs.
const EndpointEnv = "AWS_ENDPOINT_URL_DYNAMODB"

// Region is the region of every config this package returns.
const Region = "us-east-1" // motoserver.Region

// ErrNoMoto means there is no local DynamoDB to use: EndpointEnv is not
// set and moto_server is not installed.
var ErrNoMoto = errors.New("dynamostoretest: no local DynamoDB: " + EndpointEnv + " is not set and moto_server is not installed (pip install 'moto[server]')")

// ErrNotLocal means EndpointEnv names an endpoint that is not on this
// machine: the tests send static test credentials, and only to a local
// DynamoDB.
var ErrNotLocal = errors.New("dynamostoretest: " + EndpointEnv + " is not on loopback (127.0.0.1, ::1 or localhost)")

// Endpoint is a local DynamoDB.
type Endpoint struct {
	// URL is the endpoint, such as http://127.0.0.1:40123.
	URL string

	srv *motoserver.Server // nil when the endpoint was reused
}

// Open returns a local DynamoDB: the endpoint EndpointEnv names when it is
// set, after checking that it is on loopback (else an error wrapping
// ErrNotLocal), or a new moto_server on a free loopback port, waiting until
// it answers. Without either it returns ErrNoMoto. Close stops what Open
// started.
func Open() (*Endpoint, error) {
	if raw := os.Getenv(EndpointEnv); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("%w: %s=%q", ErrNotLocal, EndpointEnv, raw)
		}
		return &Endpoint{URL: raw}, nil
	}
	srv, err := motoserver.Start()
	if errors.Is(err, motoserver.ErrNotInstalled) {
		return nil, ErrNoMoto
	}
	if err != nil {
		return nil, fmt.Errorf("dynamostoretest: %w", err)
	}
	return &Endpoint{URL: srv.URL, srv: srv}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Close stops the moto_server that Open started, and its process group,
// by its process ID; it leaves a reused endpoint alone. It is safe to call
// more than once.
func (e *Endpoint) Close() {
	e.srv.Stop() // a nil server is fine
}

// Start is Open for a test: the server it starts stops when tb and its
// subtests end. Without a local DynamoDB it skips tb, or fails it when the
// CI environment variable is set; any other failure fails tb.
func Start(tb testing.TB) *Endpoint {
	tb.Helper()
	e, err := Open()
	switch {
	case errors.Is(err, ErrNoMoto) && os.Getenv("CI") == "":
		tb.Skipf("%v; skipping", err)
	case errors.Is(err, ErrNoMoto):
		tb.Fatalf("%v; failing, because CI is set", err)
	case err != nil:
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	return e
}

// Run starts one local DynamoDB for the tests of a package, runs them,
// stops it and exits with their status; it does not return. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { dynamostoretest.Run(m) }
//
// While the tests run, EndpointEnv names the server, so that every Start
// reuses it (and so does code under test that builds its config with
// config.LoadDefaultConfig), and AWS_EC2_METADATA_DISABLED is true.
// Without a local DynamoDB the tests run all the same (Start skips those
// that need one, or fails them under CI), and the package's examples, which
// cannot skip themselves, are skipped.
func Run(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	e, err := Open()
	switch {
	case err == nil:
		defer e.Close()
		for _, kv := range [][2]string{{EndpointEnv, e.URL}, {"AWS_EC2_METADATA_DISABLED", "true"}} {
			if err := os.Setenv(kv[0], kv[1]); err != nil {
				fmt.Fprintln(os.Stderr, "dynamostoretest:", err)
				return 1
			}
		}
	case errors.Is(err, ErrNoMoto) && os.Getenv("CI") == "":
		fmt.Fprintf(os.Stderr, "%v; skipping the tests and examples that need it\n", err)
		if err := skipExamples(); err != nil {
			fmt.Fprintln(os.Stderr, "dynamostoretest:", err)
			return 1
		}
	default:
		// Under CI, or a server that would not start: the tests that ask
		// for one fail, and so does the run.
		code := m.Run()
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return max(code, 1)
	}
	return m.Run()
}

// skipExamples adds the examples to the -test.skip pattern.
func skipExamples() error {
	if !flag.Parsed() {
		flag.Parse()
	}
	skip := flag.Lookup("test.skip")
	if skip == nil {
		return errors.New("no -test.skip flag: is this a test binary?")
	}
	pattern := "^Example"
	if old := skip.Value.String(); old != "" {
		pattern = old + "|" + pattern
	}
	return skip.Value.Set(pattern)
}

// Config returns an AWS config for the endpoint only: static test
// credentials, Region, the endpoint as the endpoint of every service, no
// shared config files, environment or EC2 instance metadata read, and
// bounded timeouts and retries.
func (e *Endpoint) Config() aws.Config {
	return motoserver.Config(e.URL)
}

// Client returns a DynamoDB client on Config, with optFns applied.
func (e *Endpoint) Client(optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(e.Config(), optFns...)
}

// NewTable creates a table with a name no other test uses (tb's name and a
// random suffix), keyed and with TTL as dynamostore.CreateTable makes it
// for a Store with the same optFns, and returns its name. It fails tb if
// the table cannot be created within 30 s.
func (e *Endpoint) NewTable(tb testing.TB, optFns ...func(*dynamostore.Options)) string {
	tb.Helper()
	name := testenv.Name(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	if err := dynamostore.CreateTable(ctx, e.Client(), name, optFns...); err != nil {
		tb.Fatalf("dynamostoretest: %v", err)
	}
	return name
}
