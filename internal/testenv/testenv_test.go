package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

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

// Tests that ask for one package at once share one build, which runs.
func TestBuildBuildsOncePerPackage(t *testing.T) {
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i] = testenv.Build(t, "./testdata/hello")
		}()
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("Build returned %q and %q; want one build", paths[0], p)
		}
	}
	if filepath.Base(paths[0]) != "hello" {
		t.Errorf("binary %s; want it named after its package, hello", paths[0])
	}
	out, err := exec.Command(paths[0]).Output()
	if err != nil || string(out) != "hello from a built binary\n" {
		t.Errorf("the binary said %q (%v); want its greeting", out, err)
	}
	if again := testenv.Build(t, "testdata/../testdata/hello"); again != paths[0] {
		t.Errorf("the same package by another path built again: %s", again)
	}
}

// With a shared folder set (as make test does), test processes of one run
// share a binary: the second process finds the first's and builds nothing.
func TestBuildSharesBinariesAcrossProcesses(t *testing.T) {
	if dir := os.Getenv(buildChildEnv); dir != "" {
		// The child: say where the binary is.
		fmt.Println(testenv.Build(t, "./testdata/hello"))
		return
	}
	shared := t.TempDir()
	var paths []string
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBuildSharesBinariesAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), testenv.SharedBuildsEnv+"="+shared, buildChildEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		paths = append(paths, strings.SplitN(string(out), "\n", 2)[0])
	}
	if paths[0] != paths[1] || !strings.HasPrefix(paths[0], shared+string(filepath.Separator)) {
		t.Fatalf("the two processes got %q and %q; want one binary under %s", paths[0], paths[1], shared)
	}
	if out, err := exec.Command(paths[0]).Output(); err != nil || string(out) != "hello from a built binary\n" {
		t.Errorf("the shared binary said %q (%v); want its greeting", out, err)
	}
}

// buildChildEnv marks TestBuildSharesBinariesAcrossProcesses's children.
const buildChildEnv = "TESTENV_BUILD_CHILD"

// Queue makes a FIFO queue that wants deduplication IDs, Drain takes every
// message off it, each group in order, and leaves it empty.
func TestQueueAndDrain(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	url := testenv.Queue(t, client, true, map[string]string{"VisibilityTimeout": "7"})
	attrs, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if a := attrs.Attributes; a["FifoQueue"] != "true" || a["ContentBasedDeduplication"] != "false" || a["VisibilityTimeout"] != "7" {
		t.Errorf("queue attributes %v; want FIFO, no content-based deduplication, visibility 7", a)
	}
	const n = 25 // more than one receive takes
	for i := range n {
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(fmt.Sprintf("m%02d", i)),
			MessageGroupId: aws.String(fmt.Sprint(i % 2)), MessageDeduplicationId: aws.String(fmt.Sprint(i)),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := testenv.Drain(t, client, url)
	last := map[string]string{}
	for _, m := range got {
		g, body := m.Attributes["MessageGroupId"], aws.ToString(m.Body)
		if body <= last[g] {
			t.Errorf("group %s: %s after %s; want the order sent", g, body, last[g])
		}
		last[g] = body
	}
	if len(got) != n {
		t.Errorf("drained %d messages; want %d", len(got), n)
	}
	if again := testenv.Drain(t, client, url); len(again) != 0 {
		t.Errorf("a second drain got %d messages; want none", len(again))
	}
}

func TestReachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if !testenv.Reachable(addr) {
		t.Errorf("Reachable(%s) = false with a listener; want true", addr)
	}
	l.Close()
	if testenv.Reachable(addr) {
		t.Errorf("Reachable(%s) = true after the listener closed; want false", addr)
	}
}
