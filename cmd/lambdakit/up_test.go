package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The sample's stack, deployed with deploy-local, runs under up: payments
// published to its queue are charged once each at the gateway, and each
// charge reaches the ledger through the payments table's stream, the relay and the
// events queue. SIGINT stops up, and none of its processes is left.
func TestUpRunsTheSampleStack(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	if runtime.GOOS != "linux" {
		t.Skip("finds up's child processes in /proc")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH to build the sample's functions")
	}
	requireTranslator(t)
	srv := moto.Server(t)
	bin, _ := binaries(t)
	stack := testenv.Name(t)
	env := motoserver.Env(srv.URL)

	// A bound, not a wait: deploy-local cross-builds three functions for
	// arm64, minutes with an empty build cache on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	deploy := exec.CommandContext(ctx, bin, "deploy-local", "-endpoint", srv.URL, "-stack-name", stack,
		"-template", "../../template.yaml", "-parameter-overrides", "PaymentGatewayUrl=https://gateway.invalid")
	deploy.Env = environ(noEndpoints())
	if out, err := deploy.CombinedOutput(); err != nil {
		t.Fatalf("deploy-local: %v\n%s", err, out)
	}

	gw := &chargeCounter{}
	hs := httptest.NewServer(gw)
	defer hs.Close()
	envFile := writeFile(t, t.TempDir(), "env.json", fmt.Sprintf(`{"Parameters": {"PAYMENT_GATEWAY_URL": %q}}`, hs.URL))
	var stdout, stderr logline.Buffer
	up := exec.Command(bin, "up", "-endpoint", srv.URL, "-stack-name", stack, "-template", "../../template.yaml",
		"-env-file", envFile, "-concurrency", "2", "-status", "500ms")
	up.Env = environ(noEndpoints())
	up.Stdout, up.Stderr = &stdout, &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- up.Wait() }()
	defer func() {
		if up.ProcessState == nil {
			up.Process.Kill()
			<-exited
		}
	}()
	// waitFor polls cond every 100ms, for limit at most.
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; up's stdout:\n%s\nstderr:\n%s", what, limit, stdout.String(), stderr.String())
			}
		}
	}
	// A bound, not a wait: up first builds the three bootstraps for this
	// machine, minutes with an empty build cache on a busy machine.
	waitFor("up runs the three mappings", 5*time.Minute, func() bool {
		return strings.Contains(stdout.String(), "Running 3 mappings")
	})
	output := func(key string) string {
		m := regexp.MustCompile(`(?m)^  ` + key + ` +(\S+)$`).FindStringSubmatch(stdout.String())
		if m == nil {
			t.Fatalf("up's stdout has no %s:\n%s", key, stdout.String())
		}
		return m[1]
	}
	if q := output("PaymentQueueUrl"); !strings.HasPrefix(q, srv.URL+"/") {
		t.Errorf("PaymentQueueUrl %s; want it at the local AWS, %s", q, srv.URL)
	}

	if r := lambdakit(t, env, "publish", "-queue", output("PaymentQueueUrl"), "-key-field", "payment_id", "-group-field", "customer_id",
		"../../events/payments-queue.jsonl"); r.code != 0 {
		t.Fatalf("publish: exit status %d\n%s", r.code, r.stderr)
	}
	// pay_6099 can never succeed: the function sends it to the DLQ, and
	// the four others are charged.
	want := []string{"pay_6001", "pay_6002", "pay_6003", "pay_6004"}
	db := dynamodb.NewFromConfig(moto.Config(t))
	ids := func(table, attr, prefix string, keep func(map[string]types.AttributeValue) bool) []string {
		out, err := db.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, item := range out.Items {
			if v, ok := item[attr].(*types.AttributeValueMemberS); ok && keep(item) {
				got = append(got, strings.TrimPrefix(v.Value, prefix))
			}
		}
		slices.Sort(got)
		return got
	}
	charged := func() []string {
		return ids(output("PaymentsTableName"), "payment_id", "payment#", func(item map[string]types.AttributeValue) bool {
			s, ok := item["status"].(*types.AttributeValueMemberS)
			return ok && s.Value == "CHARGED"
		})
	}
	entries := func() []string {
		return ids(output("LedgerTableName"), "id", "entry#", func(map[string]types.AttributeValue) bool { return true })
	}
	waitFor("four charged ledger rows and their four ledger entries", 30*time.Second, func() bool {
		return slices.Equal(charged(), want) && slices.Equal(entries(), want)
	})
	paid := gw.paid()
	if !slices.Equal(paid, want) {
		t.Errorf("the gateway charged %v; want each of %v once", paid, want)
	}
	waitFor("a status line per mapping with its work done", 10*time.Second, func() bool {
		s := stderr.String()
		return strings.Contains(s, "PaymentFunction <- queue "+stack+"-queue.fifo: 0 batches in flight, 5 done") &&
			strings.Contains(s, "RelayFunction <- dynamodb stream") && strings.Contains(s, "LedgerFunction <- queue "+stack+"-events.fifo: 0 batches in flight, 4 done")
	})

	children := childPIDs(t, up.Process.Pid)
	if len(children) < 3 {
		t.Errorf("up has %d child processes %v; want a function process per mapping at least", len(children), children)
	}
	if err := up.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("up after SIGINT: %v; want exit status 0\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(40 * time.Second): // a long poll in flight (20 s) ends first
		t.Fatalf("up still runs 40s after SIGINT; stderr:\n%s", stderr.String())
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("up's child process %d is left after up exited (kill 0: %v)", pid, err)
		}
	}
}

// chargeCounter stands in for the payment gateway the sample's function
// calls: it charges every payment it is asked to and records which. (The
// sample's own sandbox gateway is the sample's: the CLI's tests do not
// import it.)
type chargeCounter struct {
	mu      sync.Mutex
	charges []string
}

func (g *chargeCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var c struct {
		PaymentID string `json:"payment_id"`
		Amount    int64  `json:"amount"`
		Currency  string `json:"currency"`
	}
	if r.Method != http.MethodPost || r.URL.Path != "/charges" || json.NewDecoder(r.Body).Decode(&c) != nil {
		http.Error(w, `{"error":"want POST /charges with a JSON payment"}`, http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	g.charges = append(g.charges, c.PaymentID)
	n := len(g.charges)
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"charge_id": fmt.Sprintf("ch_%06d", n), "amount": c.Amount, "currency": c.Currency})
}

// paid is the payment IDs charged, sorted.
func (g *chargeCounter) paid() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(slices.Values(g.charges))
}

// childPIDs returns the processes whose parent is pid, from /proc.
func childPIDs(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// Without a stack name or a local endpoint, up stops before any call.
func TestUpUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-endpoint", "http://127.0.0.1:1"}, "-stack-name: want the name of a stack"},
		{[]string{"-stack-name", "s"}, "no -endpoint and no AWS_ENDPOINT_URL"},
		{[]string{"-stack-name", "s", "-endpoint", "https://cloudformation.us-east-1.amazonaws.com"}, "want the local AWS's URL"},
		{[]string{"-stack-name", "s", "-endpoint", "http://127.0.0.1:1", "-status", "0s"}, "-status 0s: want a positive duration"},
	} {
		r := lambdakit(t, noEndpoints(), append([]string{"up"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("up %v: exit status %d, stderr:\n%s\nwant 2 and %q", c.args, r.code, r.stderr, c.want)
		}
		checkShortUsage(t, r, "up")
	}
}

// A stack that is not deployed is told before anything starts, exit 3.
func TestUpWithoutTheStack(t *testing.T) {
	srv := moto.Server(t)
	r := lambdakit(t, noEndpoints(), "up", "-endpoint", srv.URL, "-stack-name", testenv.Name(t))
	if r.code != 3 || !strings.Contains(r.stderr, "no such stack") || !strings.Contains(r.stderr, "deploy-local") {
		t.Errorf("exit status %d, stderr:\n%s\nwant 3, no such stack, and deploy-local named", r.code, r.stderr)
	}
}
