package testenv_test

import (
	"errors"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

func TestRunSetsTheEnvironment(t *testing.T) {
	srv := moto.Server(t)
	for k, want := range map[string]string{
		"AWS_ACCESS_KEY_ID":         "test",
		"AWS_SECRET_ACCESS_KEY":     "test",
		"AWS_REGION":                "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true",
		"AWS_ENDPOINT_URL":          srv.URL,
	} {
		if got := os.Getenv(k); got != want {
			t.Errorf("%s = %q; want %q", k, got, want)
		}
	}
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Errorf("URL = %q; want a loopback URL", srv.URL)
	}
}

func TestStopEndsTheServer(t *testing.T) {
	srv, err := motoserver.Start()
	if errors.Is(err, motoserver.ErrNotInstalled) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer srv.Stop()
	if srv.PID <= 0 {
		t.Errorf("PID = %d; want a process id", srv.PID)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Get(srv.URL + "/moto-api/")
	if err != nil {
		t.Fatalf("GET before Stop: %v; want an answer", err)
	}
	resp.Body.Close()

	srv.Stop()
	srv.Stop() // a second Stop must be harmless
	if resp, err := client.Get(srv.URL + "/moto-api/"); err == nil {
		resp.Body.Close()
		t.Errorf("GET after Stop: status %s; want no answer", resp.Status)
	}
	if _, err := os.Stat("/proc/1"); err == nil { // Linux: check the process is gone
		if _, err := os.Stat("/proc/" + strconv.Itoa(srv.PID)); err == nil {
			t.Errorf("process %d still exists after Stop; want it gone", srv.PID)
		}
	}
}

func TestCounterCountsCallsByOperation(t *testing.T) {
	var calls, other testenv.Counter
	cfg := moto.Config(t)
	cfg.APIOptions = append(cfg.APIOptions, other.APIOption)
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, calls.APIOption)
	})
	for range 2 {
		if _, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
			t.Fatalf("ListTables: %v", err)
		}
	}
	_, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(testenv.Name(t))})
	if err == nil {
		t.Fatal("DescribeTable of a missing table: got no error; want one")
	}
	if got := calls.Count("ListTables"); got != 2 {
		t.Errorf("Count(ListTables) = %d; want 2", got)
	}
	if got := calls.Count("DescribeTable"); got != 1 {
		t.Errorf("Count(DescribeTable) = %d; want 1", got)
	}
	if got := calls.Total(); got != 3 {
		t.Errorf("Total() = %d; want 3 (counts %v)", got, calls.Counts())
	}
	if got := other.Total(); got != 3 {
		t.Errorf("second counter Total() = %d; want 3", got)
	}
	calls.Reset()
	if got := calls.Total(); got != 0 {
		t.Errorf("Total() after Reset = %d; want 0", got)
	}
}

func TestNameIsUniqueAndValid(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{3,75}$`)
	seen := map[string]bool{}
	for _, name := range []string{"a", "with spaces/and#slashes", strings.Repeat("long", 50)} {
		t.Run(name, func(t *testing.T) {
			for range 3 {
				got := testenv.Name(t)
				if !valid.MatchString(got) {
					t.Errorf("Name() = %q; want it to match %v", got, valid)
				}
				if seen[got] {
					t.Errorf("Name() = %q twice; want unique names", got)
				}
				seen[got] = true
			}
		})
	}
}
