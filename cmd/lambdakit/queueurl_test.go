package main_test

// Where a queue URL's calls go, for URLs near the edges of the endpoint
// rule, and redrive keeping every message whatever its deduplication ID.
// Every test stays on loopback: a request for a host that is not loopback
// goes to connectRecorder, a proxy on 127.0.0.1 that records the host asked
// for and forwards nothing.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// connectRecorder is an HTTP(S) proxy on loopback that records the host of
// every request it is asked to carry (CONNECT host:port for https, the
// absolute URL's host for http) and answers 403 to each: nothing leaves
// 127.0.0.1.
type connectRecorder struct {
	URL   string
	mu    sync.Mutex
	hosts []string
}

func newConnectRecorder(t *testing.T) *connectRecorder {
	t.Helper()
	rec := &connectRecorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if r.Method != http.MethodConnect && r.URL.Host != "" {
			host = r.URL.Host
		}
		rec.mu.Lock()
		rec.hosts = append(rec.hosts, host)
		rec.mu.Unlock()
		http.Error(w, "the test's recording proxy forwards nothing", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

// Hosts returns the distinct hosts asked for so far.
func (rec *connectRecorder) Hosts() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := slices.Clone(rec.hosts)
	slices.Sort(out)
	return slices.Compact(out)
}

// TestQueueURLHostIsWhereCallsGo: "The queue URL says where the queue
// is, and the calls go there" (docs/local-tooling.md), and "A URL under an AWS
// domain that is not SQS's is refused" (endpoint.go). Each URL below is
// either refused (exit 2) or its calls go to the host it names; the test
// fails when a call goes to any other host.
func TestQueueURLHostIsWhereCallsGo(t *testing.T) {
	_, echo := binaries(t)
	for _, c := range []struct {
		name, queue string
		mustRefuse  bool // an AWS host that is not SQS's: the rule says refuse
	}{
		// The user names SQS's FIPS endpoint; the calls go to the
		// non-FIPS sqs.us-east-1.amazonaws.com.
		{"a FIPS queue URL", "https://sqs-fips.us-east-1.amazonaws.com/123456789012/orders", false},
		// The dual-stack endpoint is named; the IPv4-only one is called.
		{"a dual-stack queue URL", "https://sqs.us-east-1.api.aws/123456789012/orders", false},
		// An AWS host that is not SQS's, with the trailing dot of a fully
		// qualified name: not refused, and the SQS calls go to DynamoDB.
		{"a non-SQS AWS host with a trailing dot", "https://dynamodb.us-east-1.amazonaws.com./123456789012/orders", true},
		// An S3 virtual-hosted bucket named x.sqs.us-east-1: any "sqs"
		// label followed by another makes a "VPC endpoint", so the S3
		// host gets the SQS calls (message bodies included) instead of a
		// refusal.
		{"an S3 bucket host with an sqs label", "https://x.sqs.us-east-1.s3.amazonaws.com/123456789012/orders", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := url.Parse(c.queue)
			if err != nil {
				t.Fatal(err)
			}
			pointed := u.Hostname()
			for _, args := range [][]string{
				{"publish", "-queue", c.queue},
				{"redrive", "-from", c.queue + "-dlq", "-to", c.queue},
				{"run", "-live", "-queue", c.queue, "-until-empty", "-timeout", "5s", echo},
			} {
				rec := newConnectRecorder(t)
				env := noEndpoints("AWS_MAX_ATTEMPTS=1", "AWS_REGION=us-east-1",
					"HTTPS_PROXY="+rec.URL, "HTTP_PROXY="+rec.URL) // later entries win over offline's dead proxy
				r := cli(t, env, "", args...)
				if r.code == 2 && len(rec.Hosts()) == 0 {
					continue // refused before any request
				}
				if c.mustRefuse {
					t.Errorf("%s: exit status %d, calls sent to %v; want exit 2, refused as an AWS host that is not SQS's\nstderr:\n%s", args[0], r.code, rec.Hosts(), r.stderr)
					continue
				}
				for _, h := range rec.Hosts() {
					if host, _, _ := strings.Cut(h, ":"); host != pointed {
						t.Errorf("%s: exit status %d; the calls went to %s, but the queue URL names %s and the command did not refuse (exit 2)\nstderr:\n%s",
							args[0], r.code, h, pointed, r.stderr)
					}
				}
				if len(rec.Hosts()) == 0 {
					t.Errorf("%s: exit status %d, no request recorded: the test's premise is broken\n%s", args[0], r.code, r.stderr)
				}
			}
		})
	}
}

// TestRedriveKeepsEveryMessageWhateverItsDedupID puts FIFO messages whose dedup IDs sit
// on the edges of redriveDedupID (101, 102, 128 characters, a '~' inside,
// a tail that looks like an earlier redrive's) in a DLQ, sends each once
// through dedupProxy first (so SQS "remembers" every old ID), and redrives
// them with a lost SendMessage answer, with and without SDK retries, and
// then once more. Every message must be in -to at least once, or still in
// the DLQ.
func TestRedriveKeepsEveryMessageWhateverItsDedupID(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	direct := sqs.NewFromConfig(moto.Config(t))
	dp := newDedupProxy(t, srv.URL)
	viaProxy := sqs.NewFromConfig(motoserver.Config(dp.URL))
	b32 := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	dedups := []string{
		strings.Repeat("a", 101), strings.Repeat("b", 102), strings.Repeat("c", 128),
		"d~e", "f~" + b32, strings.Repeat("g", 101) + "~" + b32, "~" + b32, strings.Repeat("h", 100) + "~~" + b32[:25],
	}
	for _, attempts := range []string{"AWS_MAX_ATTEMPTS=1", "AWS_MAX_ATTEMPTS=3"} {
		t.Run(attempts, func(t *testing.T) {
			dlq, target := newPublishQueue(t, direct, true, nil), newPublishQueue(t, direct, true, nil)
			var msgs []dlqMessage
			for i, d := range dedups {
				msgs = append(msgs, dlqMessage{body: fmt.Sprintf("m%02d", i), group: fmt.Sprintf("g%d", i%3), dedup: d})
			}
			// The target "saw" every old ID within 5 minutes.
			publishQueue{viaProxy, target.url}.sendAll(t, msgs)
			target.drain(t)
			publishQueue{viaProxy, dlq.url}.sendAll(t, msgs)

			lostProxy := testenv.NewProxy(t, dp.URL)
			lostProxy.LoseAnswer("SendMessage", 1, 500, `{"__type":"com.amazonaws.sqs#InternalError","message":"answer lost by the test proxy"}`)
			lost := lostProxy.URL
			env := awsEnv("SQS", lost, attempts)
			r1 := cli(t, env, "", "redrive", "-from", at(lost, dlq.url), "-to", at(lost, target.url))
			r2 := cli(t, redriveEnv(dp.URL), "", "redrive", "-from", at(dp.URL, dlq.url), "-to", at(dp.URL, target.url))
			t.Logf("first run %d: %s; second run %d: %s", r1.code, lastLine(r1.stderr), r2.code, lastLine(r2.stderr))
			got := map[string]int{}
			for _, m := range append(target.drain(t), dlq.drain(t)...) {
				got[aws.ToString(m.Body)]++
				if d := m.Attributes["MessageDeduplicationId"]; len(d) > 128 {
					t.Errorf("%s: dedup ID of %d characters", aws.ToString(m.Body), len(d))
				}
			}
			for _, m := range msgs {
				if got[m.body] == 0 {
					t.Errorf("%s (dedup %q) is lost: in neither queue\nfirst run (%d):\n%s%s\nsecond run (%d):\n%s%s",
						m.body, m.dedup, r1.code, r1.stdout, r1.stderr, r2.code, r2.stdout, r2.stderr)
				}
			}
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
