package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// publish runs 'lambdakit publish args...' with stdin as its standard
// input.
func publish(t *testing.T, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	return cli(t, env, stdin, append([]string{"publish"}, args...)...)
}

type publishQueue struct {
	client *sqs.Client
	url    string
}

func newPublishQueue(t *testing.T, client *sqs.Client, fifo bool, attrs map[string]string) publishQueue {
	t.Helper()
	return publishQueue{client, testenv.Queue(t, client, fifo, attrs)}
}

// drain takes every message off the queue, in order.
func (q publishQueue) drain(t *testing.T) []types.Message {
	t.Helper()
	return testenv.Drain(t, q.client, q.url)
}

// count is the number of messages on the queue.
func (q publishQueue) count(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		t.Fatalf("ApproximateNumberOfMessages: %v", err)
	}
	return n
}

func paymentLine(id, customer string) string {
	return fmt.Sprintf(`{"payment_id":%q,"customer_id":%q,"amount":1299,"currency":"EUR"}`, id, customer)
}

func wantSummary(t *testing.T, r cliResult, lines, sent, dups, failed int) {
	t.Helper()
	noun := "lines"
	if lines == 1 {
		noun = "line"
	}
	want := fmt.Sprintf("lambdakit publish: %d %s: sent %d, duplicates in the input %d, failed %d\n", lines, noun, sent, dups, failed)
	if !strings.HasSuffix(r.stderr, want) {
		t.Errorf("stderr does not end with the summary %q:\n%s", want, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q; want nothing", r.stdout)
	}
}

func TestPublish(t *testing.T) {
	srv := moto.Server(t)
	client := sqs.NewFromConfig(moto.Config(t))
	env := awsEnv("SQS", srv.URL)
	dir := t.TempDir()

	t.Run("FIFO lines are sent with dedup and group IDs: exit 0", func(t *testing.T) {
		q := newPublishQueue(t, client, true, nil)
		var lines []string
		for i := range 25 {
			lines = append(lines, paymentLine(fmt.Sprintf("pay_%02d", i), fmt.Sprintf("cus_%d", i%2)))
		}
		file := writeFile(t, dir, "fifo.jsonl", strings.Join(lines, "\n")+"\n")
		r := publish(t, env, "", "-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", file)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		wantSummary(t, r, 25, 25, 0, 0)
		got := q.drain(t)
		if len(got) != 25 {
			t.Fatalf("received %d messages; want 25", len(got))
		}
		byBody := map[string]types.Message{}
		for _, m := range got {
			byBody[aws.ToString(m.Body)] = m
		}
		for i, line := range lines {
			m, ok := byBody[line]
			if !ok {
				t.Errorf("line %d not received", i+1)
				continue
			}
			if dedup, want := m.Attributes["MessageDeduplicationId"], producer.DedupID(fmt.Sprintf("pay_%02d", i)); dedup != want {
				t.Errorf("line %d: dedup ID %q; want %q", i+1, dedup, want)
			}
			if g := m.Attributes["MessageGroupId"]; g != fmt.Sprintf("cus_%d", i%2) {
				t.Errorf("line %d: group %q; want cus_%d", i+1, g, i%2)
			}
		}
	})

	t.Run("bad lines are reported by number and skipped, the rest sent: exit 1", func(t *testing.T) {
		q := newPublishQueue(t, client, true, map[string]string{"MaximumMessageSize": "1024"})
		big := paymentLine("pay_7", "cus_A")
		big = big[:len(big)-1] + `,"note":"` + strings.Repeat("x", 2000-len(big)-10) + `"}`
		if len(big) != 2000 {
			t.Fatalf("test line is %d bytes; want 2000", len(big))
		}
		input := strings.Join([]string{
			paymentLine("pay_1", "cus_A"),
			`{"payment_id": "pay_2", "customer_id": `, // cut short
			`["pay_3"]`,
			`{"customer_id":"cus_A"}`,
			`{"payment_id":"pay_5"}`,
			paymentLine("pay_6", "cus_A"),
			big,
			"",
			paymentLine("pay_9", "cus_B"),
		}, "\n")
		r := publish(t, env, input, "-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", "-")
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		for _, want := range []string{
			"lambdakit publish: line 2: not a JSON object\n",
			"lambdakit publish: line 3: not a JSON object\n",
			"lambdakit publish: line 4: key field \"payment_id\" (-key-field) missing",
			"lambdakit publish: line 5: group field \"customer_id\" (-group-field) missing",
			"lambdakit publish: line 7: producer: message is 2000 bytes; the queue accepts at most 1024\n",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
		wantSummary(t, r, 8, 3, 0, 5)
		got := q.drain(t)
		var bodies []string
		for _, m := range got {
			bodies = append(bodies, aws.ToString(m.Body))
		}
		slices.Sort(bodies)
		if want := []string{paymentLine("pay_1", "cus_A"), paymentLine("pay_6", "cus_A"), paymentLine("pay_9", "cus_B")}; !slices.Equal(bodies, want) {
			t.Errorf("received %q; want %q", bodies, want)
		}
	})

	t.Run("duplicates in the input are sent once: exit 0", func(t *testing.T) {
		q := newPublishQueue(t, client, true, nil)
		input := paymentLine("pay_1", "cus_A") + "\n" + paymentLine("pay_2", "cus_A") + "\r\n" + paymentLine("pay_1", "cus_A") + "\n"
		r := publish(t, env, input, "-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id")
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, `lambdakit publish: line 3: duplicate of line 1 (key "pay_1"): not sent again`) {
			t.Errorf("stderr does not report line 3 as a duplicate of line 1:\n%s", r.stderr)
		}
		wantSummary(t, r, 3, 2, 1, 0)
		if got := q.drain(t); len(got) != 2 {
			t.Errorf("received %d messages; want 2", len(got))
		}
	})

	t.Run("the same key with another body is not sent: exit 1", func(t *testing.T) {
		q := newPublishQueue(t, client, false, nil)
		input := paymentLine("pay_1", "cus_A") + "\n" + strings.Replace(paymentLine("pay_1", "cus_A"), "1299", "9999", 1) + "\n"
		r := publish(t, env, input, "-queue", q.url, "-key-field", "payment_id")
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, `lambdakit publish: line 2: same key as line 1 ("pay_1") but a different body: not sent`) {
			t.Errorf("stderr does not report the conflict:\n%s", r.stderr)
		}
		wantSummary(t, r, 2, 1, 0, 1)
		if got := q.drain(t); len(got) != 1 {
			t.Errorf("received %d messages; want 1", len(got))
		}
	})

	t.Run("a standard queue needs no key or group", func(t *testing.T) {
		q := newPublishQueue(t, client, false, nil)
		r := publish(t, env, `{"a":1}`+"\n"+`{"a":1}`+"\n", "-queue", q.url)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		wantSummary(t, r, 2, 2, 0, 0)
		// -max-size replaces the queue's limit (and its GetQueueAttributes).
		long := `{"a":"` + strings.Repeat("x", 100) + `"}`
		r = publish(t, env, `{"a":1}`+"\n"+long+"\n", "-queue", q.url, "-max-size", "100")
		if r.code != 1 || !strings.Contains(r.stderr, "line 2: producer: message is 108 bytes; the queue accepts at most 100\n") {
			t.Errorf("exit status %d; want 1 and line 2 refused at 108 bytes\n%s", r.code, r.stderr)
		}
		wantSummary(t, r, 2, 1, 0, 1)
		got := q.drain(t)
		if len(got) != 3 {
			t.Fatalf("received %d messages; want 3 (no key: no deduplication)", len(got))
		}
		for _, m := range got {
			if m.Attributes["MessageGroupId"] != "" || m.Attributes["MessageDeduplicationId"] != "" {
				t.Errorf("message attributes %v; want no group or dedup ID", m.Attributes)
			}
		}
	})

	t.Run("long inputs report progress", func(t *testing.T) {
		// Duplicates keep it quick: moto slows down as a queue grows.
		q := newPublishQueue(t, client, false, nil)
		var b strings.Builder
		for i := range 2500 {
			fmt.Fprintf(&b, `{"n":%d}`+"\n", i%5)
		}
		r := publish(t, env, b.String(), "-queue", q.url, "-key-field", "n")
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		for _, want := range []string{
			"lambdakit publish: progress: 1000 lines: sent 5, duplicates in the input 995, failed 0\n",
			"lambdakit publish: progress: 2000 lines: sent 5, duplicates in the input 1995, failed 0\n",
		} {
			if n := strings.Count(r.stderr, want); n != 1 {
				t.Errorf("%q appears %d times; want once", want, n)
			}
		}
		if n := strings.Count(r.stderr, "progress:"); n != 2 {
			t.Errorf("%d progress lines; want 2", n)
		}
		wantSummary(t, r, 2500, 5, 2495, 0)
		if got := q.count(t); got != 5 {
			t.Errorf("%d messages on the queue; want 5", got)
		}
	})

	t.Run("FILE that cannot be read: exit 2", func(t *testing.T) {
		q := newPublishQueue(t, client, false, nil)
		r := publish(t, env, "", "-queue", q.url, dir)
		if r.code != 2 || !strings.Contains(r.stderr, "reading input") {
			t.Errorf("exit status %d; want 2 and the reason\n%s", r.code, r.stderr)
		}
	})

	t.Run("an interrupt ends a read from an open pipe: exit 130", func(t *testing.T) {
		q := newPublishQueue(t, client, false, nil)
		cli, _ := binaries(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, "publish", "-queue", q.url, "-key-field", "n")
		cmd.Env = append(os.Environ(), env...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A full chunk is sent at once; the 101st line waits in the chunk.
		for i := range 101 {
			fmt.Fprintf(stdin, `{"n":%d}`+"\n", i)
		}
		for range 200 {
			if q.count(t) == 100 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got := q.count(t); got != 100 {
			t.Fatalf("%d messages on the queue before the interrupt; want 100", got)
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) || exitErr.ExitCode() != 130 {
			t.Fatalf("lambdakit publish: %v; want exit status 130\n%s", err, stderr.String())
		}
		// Line 101 may or may not have been taken in when the interrupt
		// came; if it was, it is reported as not sent.
		out := stderr.String()
		taken := strings.Contains(out, "lambdakit publish: 101 lines: sent 100, duplicates in the input 0, failed 1\n") &&
			strings.Contains(out, "lambdakit publish: line 101: producer: not sent: context canceled\n")
		notTaken := strings.Contains(out, "lambdakit publish: 100 lines: sent 100, duplicates in the input 0, failed 0\n")
		if !taken && !notTaken || !strings.HasSuffix(out, "lambdakit publish: interrupted\n") {
			t.Errorf("stderr:\n%s\nwant a summary of 100 sent (and line 101 not sent, if read), then interrupted", out)
		}
		if got := q.count(t); got != 100 {
			t.Errorf("%d messages on the queue after the interrupt; want 100", got)
		}
	})

	// A queue that does not exist is the tool unable to do its job, exit
	// status 3, as in run and redrive; failed lines are exit status 1.
	t.Run("a queue that does not exist: exit 3, told once", func(t *testing.T) {
		missing := srv.URL + "/123456789012/no-such-queue"
		input := `{"a":1}` + "\n" + `{"a":2}` + "\n"
		for _, args := range [][]string{
			{"-queue", missing},                      // found reading its attributes
			{"-queue", missing, "-max-size", "1000"}, // found by the first send
		} {
			r := publish(t, env, input, args...)
			if r.code != 3 || !strings.Contains(r.stderr, "cannot read the queue "+missing+": it does not exist") {
				t.Errorf("publish %q: exit status %d; want 3 and the queue named\n%s", args, r.code, r.stderr)
			}
			if strings.Contains(r.stderr, "line 1:") {
				t.Errorf("publish %q: the missing queue is told per line; want once:\n%s", args, r.stderr)
			}
		}
	})

	t.Run("a line without the key or group field names that field and its flag: exit 1", func(t *testing.T) {
		q := newPublishQueue(t, client, true, nil)
		input := strings.Join([]string{
			paymentLine("pay_1", "cus_A"),
			`{"payment_id":"pay_2"}`,
			`{"customer_id":"cus_A"}`,
			`{"payment_id":"pay_4","customer_id":""}`,
		}, "\n")
		r := publish(t, env, input, "-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id")
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		for _, want := range []string{
			"lambdakit publish: line 2: group field \"customer_id\" (-group-field) missing",
			"lambdakit publish: line 3: key field \"payment_id\" (-key-field) missing",
			"lambdakit publish: line 4: group field \"customer_id\" (-group-field) is empty",
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
		for _, l := range strings.Split(r.stderr, "\n") {
			if strings.Contains(l, "group field") && strings.Contains(l, "idempotency key") {
				t.Errorf("a missing group field is told as a missing idempotency key: %s", l)
			}
		}
		wantSummary(t, r, 4, 1, 0, 3)
	})

	t.Run("a JSON array is told once as not JSON Lines, nothing sent: exit 2", func(t *testing.T) {
		q := newPublishQueue(t, client, true, nil)
		pretty := "[\n  {\n    \"payment_id\": \"pay_1\",\n    \"customer_id\": \"cus_A\"\n  },\n  {\n    \"payment_id\": \"pay_2\",\n    \"customer_id\": \"cus_A\"\n  }\n]\n"
		file := writeFile(t, dir, "payments.json", pretty)
		oneLine := "\n  [" + paymentLine("pay_1", "cus_A") + "," + paymentLine("pay_2", "cus_A") + "]\n"
		for _, c := range []struct {
			name, stdin, file string
		}{
			{"pretty-printed file", "", file},
			{"one line on standard input", oneLine, "-"},
		} {
			r := publish(t, env, c.stdin, "-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", c.file)
			if r.code != 2 {
				t.Errorf("%s: exit status %d; want 2\n%s", c.name, r.code, r.stderr)
			}
			for _, want := range []string{"JSON array", "JSON Lines", "one JSON object per line", "jq -c '.[]'"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("%s: stderr lacks %q:\n%s", c.name, want, r.stderr)
				}
			}
			if n := strings.Count(r.stderr, "\n"); n != 1 || strings.Contains(r.stderr, "not a JSON object") {
				t.Errorf("%s: %d lines on stderr; want the one that says what to do:\n%s", c.name, n, r.stderr)
			}
		}
		if n := q.count(t); n != 0 {
			t.Errorf("%d messages on the queue; want none", n)
		}
	})

	t.Run("one line is 1 line", func(t *testing.T) {
		q := newPublishQueue(t, client, false, nil)
		r := publish(t, env, `{"a":1}`+"\n", "-queue", q.url)
		if want := "lambdakit publish: 1 line: sent 1, duplicates in the input 0, failed 0\n"; r.code != 0 || !strings.HasSuffix(r.stderr, want) {
			t.Errorf("exit status %d; want 0 and the summary %q\n%s", r.code, want, r.stderr)
		}
	})

	t.Run("usage errors exit 2 and send nothing", func(t *testing.T) {
		q := newPublishQueue(t, client, true, nil)
		file := writeFile(t, dir, "one.jsonl", paymentLine("pay_1", "cus_A")+"\n")
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"no queue", []string{file}, "-queue is required"},
			{"not a URL", []string{"-queue", "payments.fifo", file}, "want a queue URL"},
			{"FIFO without key", []string{"-queue", q.url, "-group-field", "customer_id", file}, "-key-field and -group-field are required"},
			{"FIFO without group", []string{"-queue", q.url, "-key-field", "payment_id", file}, "-key-field and -group-field are required"},
			{"flags after the file", []string{"-queue", q.url, "-key-field", "payment_id", file, "-group-field", "customer_id"}, "flag -group-field after the arguments"},
			{"two files", []string{"-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", file, file}, "one FILE at most"},
			{"empty path segment", []string{"-queue", q.url, "-key-field", "payment..id", "-group-field", "customer_id", file}, "single dots"},
			{"negative size", []string{"-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", "-max-size", "-1", file}, "-max-size"},
			{"unknown flag", []string{"-queue", q.url, "-key", "payment_id", file}, "flag provided but not defined"},
			{"missing file", []string{"-queue", q.url, "-key-field", "payment_id", "-group-field", "customer_id", dir + "/nope.jsonl"}, "no such file"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := publish(t, env, "", tc.args...)
				if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
					t.Errorf("exit status %d; want 2 and %q\n%s", r.code, tc.want, r.stderr)
				}
				if tc.name != "missing file" && tc.name != "unknown flag" && !strings.Contains(r.stderr, "Usage: lambdakit publish") && !strings.Contains(r.stderr, "lambdakit publish -h") {
					t.Errorf("no pointer to the usage:\n%s", r.stderr)
				}
			})
		}
		if got := q.drain(t); len(got) != 0 {
			t.Errorf("received %d messages after usage errors; want none", len(got))
		}
	})

	t.Run("-h documents the command", func(t *testing.T) {
		r := publish(t, nil, "", "-h")
		if r.code != 0 {
			t.Errorf("exit status %d; want 0", r.code)
		}
		for _, want := range []string{"Usage: lambdakit publish [flags] [FILE]", "-queue URL", "-key-field path", "-group-field path",
			"standard input", "line number", "5 minutes", "<prefix>#<deduplication ID>", "duplicate", "Exit status", "  2    usage error",
			"JSON Lines", "jq -c '.[]'", "-live", "docs/local-tooling.md", "  3    the queue does not exist or cannot be read"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("-h lacks %q", want)
			}
		}
	})
}
