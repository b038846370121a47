package dynamostoretest_test

import (
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/dynamostoretest"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		// A child run of TestHelperStart: no shared server.
		os.Exit(m.Run())
	}
	dynamostoretest.Run(m)
}

// The test docs/testing.md shows, on the consumer of example_test.go.
func TestShipsOnce(t *testing.T) {
	db := dynamostoretest.Start(t)
	store, err := dynamostore.New(db.Client(), db.NewTable(t))
	if err != nil {
		t.Fatal(err)
	}
	var shipped atomic.Int32
	batch := newShipping(store, &shipped)
	msg := lambdakittest.Message(`{"order_id": "o-1"}`)
	for _, ev := range []events.SQSEvent{lambdakittest.Event(msg), lambdakittest.Event(lambdakittest.Redelivery(msg))} {
		if resp, err := batch(t.Context(), ev); err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("got %v, %v; want no failure", resp.BatchItemFailures, err)
		}
	}
	if got := shipped.Load(); got != 1 {
		t.Errorf("shipped %d times; want 1", got)
	}
}

// answers reports whether something accepts connections at endpoint, a
// loopback URL.
func answers(t *testing.T, endpoint string) bool {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestStartStartsAServerAndStopsItWithTheTest(t *testing.T) {
	var url string
	t.Run("inner", func(t *testing.T) {
		t.Setenv(dynamostoretest.EndpointEnv, "") // no server to reuse
		db := dynamostoretest.Start(t)
		url = db.URL
		if shared := os.Getenv(dynamostoretest.EndpointEnv); url == shared {
			t.Fatalf("Start reused %s; want a server of its own", url)
		}
		if _, err := db.Client().ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
			t.Fatalf("ListTables: %v", err)
		}
	})
	if url == "" {
		t.Skip("the inner test was skipped")
	}
	if answers(t, url) {
		t.Errorf("%s still answers after the test that started it ended", url)
	}
}

func TestStartReusesTheEndpointTheEnvironmentNames(t *testing.T) {
	shared := os.Getenv(dynamostoretest.EndpointEnv) // set by Run
	if shared == "" {
		t.Skip("no server from Run to reuse")
	}
	t.Run("inner", func(t *testing.T) {
		db := dynamostoretest.Start(t)
		if db.URL != shared {
			t.Errorf("URL = %s; want %s, from %s", db.URL, shared, dynamostoretest.EndpointEnv)
		}
	})
	if !answers(t, shared) {
		t.Errorf("%s stopped with a test that only reused it", shared)
	}
}

func TestOpenRefusesAnEndpointElsewhere(t *testing.T) {
	for _, endpoint := range []string{
		"https://dynamodb.us-east-1.amazonaws.com",
		"http://10.0.0.5:8000",
		"http://dynamodb-local:8000",
		"127.0.0.1:8000", // no scheme
	} {
		t.Run(endpoint, func(t *testing.T) {
			t.Setenv(dynamostoretest.EndpointEnv, endpoint)
			db, err := dynamostoretest.Open()
			if !errors.Is(err, dynamostoretest.ErrNotLocal) {
				t.Errorf("Open() = %v, %v; want an error wrapping ErrNotLocal", db, err)
			}
		})
	}
	for _, endpoint := range []string{"http://localhost:8000", "http://[::1]:8000", "http://127.0.0.2:8000"} {
		t.Run(endpoint, func(t *testing.T) {
			t.Setenv(dynamostoretest.EndpointEnv, endpoint)
			db, err := dynamostoretest.Open()
			if err != nil || db.URL != endpoint {
				t.Errorf("Open() = %v, %v; want the endpoint %s", db, err, endpoint)
			}
		})
	}
}

func TestConfigTalksToTheEndpointWithTestCredentials(t *testing.T) {
	db := &dynamostoretest.Endpoint{URL: "http://127.0.0.1:8000"}
	cfg := db.Config()
	if got := aws.ToString(cfg.BaseEndpoint); got != db.URL {
		t.Errorf("BaseEndpoint = %q; want %q", got, db.URL)
	}
	if cfg.Region != dynamostoretest.Region {
		t.Errorf("Region = %q; want %q", cfg.Region, dynamostoretest.Region)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || creds.AccessKeyID != "test" || creds.Source != "StaticCredentials" {
		t.Errorf("credentials %+v, %v; want the static test ones", creds, err)
	}
}

// NewTable makes the table the way the Store needs it, for the Options
// the Store is given.
func TestNewTableFitsTheStore(t *testing.T) {
	db := dynamostoretest.Start(t)
	for _, c := range []struct {
		name    string
		opts    []func(*dynamostore.Options)
		key, tt string
	}{
		{"defaults", nil, "id", "expiration"},
		{"renamed attributes", []func(*dynamostore.Options){func(o *dynamostore.Options) { o.KeyAttr, o.ExpirationAttr = "pk", "ttl" }}, "pk", "ttl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			table := db.NewTable(t, c.opts...)
			client := db.Client()
			desc, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, k := range desc.Table.KeySchema {
				keys = append(keys, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
			}
			if want := []string{c.key + ":HASH"}; !slices.Equal(keys, want) {
				t.Errorf("key schema %v; want %v", keys, want)
			}
			ttl, err := client.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != c.tt {
				t.Errorf("TTL on %q; want %q", got, c.tt)
			}
			store, err := dynamostore.New(client, table, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			rec := lambdakit.IdempotencyRecord{ID: "t#1", Status: lambdakit.StatusInProgress, Expiration: now.Add(time.Hour),
				InProgressExpiration: now.Add(time.Minute), Lease: "lease"}
			if _, acquired, err := store.Acquire(t.Context(), rec, now); err != nil || !acquired {
				t.Fatalf("Acquire = %t, %v; want acquired", acquired, err)
			}
			if err := store.Complete(t.Context(), rec); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		})
	}
	if a, b := db.NewTable(t), db.NewTable(t); a == b {
		t.Errorf("two tables named %s; want two names", a)
	}
}

// helperEnv marks a child run of the test binary, in which
// TestHelperStart calls Start on a machine without moto.
const helperEnv = "DYNAMOSTORETEST_HELPER"

func TestHelperStart(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("runs only as a child of TestStartWithoutMoto")
	}
	dynamostoretest.Start(t)
	t.Log("Start returned")
}

// Without moto_server (an empty PATH, run outside the module so that its
// .venv is not found either), Start skips the test, or fails it under CI.
func TestStartWithoutMoto(t *testing.T) {
	for _, c := range []struct {
		ci       string
		wantFail bool
		want     string
	}{
		{"", false, "--- SKIP: TestHelperStart"},
		{"true", true, "--- FAIL: TestHelperStart"},
	} {
		t.Run("CI="+c.ci, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStart$", "-test.v")
			cmd.Dir = t.TempDir()
			cmd.Env = []string{helperEnv + "=1", "PATH=" + t.TempDir(), "CI=" + c.ci, "HOME=" + t.TempDir()}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if failed := errors.As(err, &exit); failed != c.wantFail || (err != nil && !failed) {
				t.Errorf("error %v; want failed = %t\n%s", err, c.wantFail, out)
			}
			if !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "moto_server is not installed") {
				t.Errorf("output:\n%s\nwant %q and the reason", out, c.want)
			}
			if strings.Contains(string(out), "Start returned") {
				t.Errorf("Start returned without a server:\n%s", out)
			}
		})
	}
}
