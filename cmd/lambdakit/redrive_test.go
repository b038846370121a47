package main_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// redriveEnv points the CLI's SDK at endpoint, with one attempt per call,
// so that a fault the proxy injects fails exactly the call it answers.
func redriveEnv(endpoint string) []string { return awsEnv("SQS", endpoint, "AWS_MAX_ATTEMPTS=1") }

// dlqMessage is a message as the test puts it in a dead-letter queue.
type dlqMessage struct {
	body, group, dedup string
	attrs              map[string]types.MessageAttributeValue
}

func (q publishQueue) sendAll(t *testing.T, msgs []dlqMessage) {
	t.Helper()
	for _, m := range msgs {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(m.body), MessageAttributes: m.attrs}
		if m.group != "" {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(m.group), aws.String(m.dedup)
		}
		if _, err := q.client.SendMessage(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
}

// fifoMessages are n messages in two groups, each with a deduplication ID
// and attributes of every kind.
func fifoMessages(n int) []dlqMessage {
	var out []dlqMessage
	for i := range n {
		out = append(out, dlqMessage{
			body:  fmt.Sprintf(`{"payment_id":"pay_%02d"}`, i),
			group: fmt.Sprintf("cus_%d", i%2),
			dedup: fmt.Sprintf("dedup-%02d", i),
			attrs: map[string]types.MessageAttributeValue{
				"n":     {DataType: aws.String("Number"), StringValue: aws.String(fmt.Sprint(i))},
				"label": {DataType: aws.String("String.origin"), StringValue: aws.String("checkout")},
				"raw":   {DataType: aws.String("Binary"), BinaryValue: []byte{byte(i), 0xff}},
			},
		})
	}
	return out
}

// wantMoved checks that got (received from the target, in order) are want,
// with their groups, deduplication IDs and attributes, each group in order.
func wantMoved(t *testing.T, got []types.Message, want []dlqMessage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("the queue holds %d messages; want %d", len(got), len(want))
	}
	byBody := map[string]dlqMessage{}
	for _, w := range want {
		byBody[w.body] = w
	}
	order := map[string][]string{} // group → bodies, as received
	for _, m := range got {
		body := aws.ToString(m.Body)
		w, ok := byBody[body]
		if !ok {
			t.Errorf("unexpected message %q", body)
			continue
		}
		if g, d := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]; g != w.group || d != w.dedup {
			t.Errorf("%s: group %q, dedup %q; want %q, %q", body, g, d, w.group, w.dedup)
		}
		if len(m.MessageAttributes) != len(w.attrs) {
			t.Errorf("%s: %d attributes; want %d", body, len(m.MessageAttributes), len(w.attrs))
		}
		for name, a := range w.attrs {
			g := m.MessageAttributes[name]
			if aws.ToString(g.DataType) != aws.ToString(a.DataType) || aws.ToString(g.StringValue) != aws.ToString(a.StringValue) || !bytes.Equal(g.BinaryValue, a.BinaryValue) {
				t.Errorf("%s: attribute %s = %s %q %x; want %s %q %x", body, name, aws.ToString(g.DataType), aws.ToString(g.StringValue), g.BinaryValue,
					aws.ToString(a.DataType), aws.ToString(a.StringValue), a.BinaryValue)
			}
		}
		order[w.group] = append(order[w.group], body)
	}
	for g, bodies := range order {
		if !slices.IsSorted(bodies) {
			t.Errorf("group %s arrived as %q; want the order sent", g, bodies)
		}
	}
}

func TestRedrive(t *testing.T) {
	srv := moto.Server(t)
	client := sqs.NewFromConfig(moto.Config(t))
	env := redriveEnv(srv.URL)
	fifoPair := func(t *testing.T) (dlq, target publishQueue) {
		return newPublishQueue(t, client, true, nil), newPublishQueue(t, client, true, nil)
	}
	standardPair := func(t *testing.T) (dlq, target publishQueue) {
		return newPublishQueue(t, client, false, nil), newPublishQueue(t, client, false, nil)
	}

	t.Run("FIFO: groups, dedup IDs and attributes kept, each group in order: exit 0", func(t *testing.T) {
		dlq, target := fifoPair(t)
		msgs := fifoMessages(23)
		dlq.sendAll(t, msgs)
		r := cli(t, env, "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if n := strings.Count(r.stdout, "moved "); n != 23 {
			t.Errorf("%d moved lines on stdout; want 23:\n%s", n, r.stdout)
		}
		if want := fmt.Sprintf("(group cus_0, dedup dedup-00, %d bytes, 3 attributes)\n", len(msgs[0].body)); !strings.Contains(r.stdout, want) {
			t.Errorf("stdout does not describe the messages:\n%s", r.stdout)
		}
		if !strings.HasSuffix(r.stderr, "lambdakit redrive: received 23: moved 23, failed 0, held back 0, not deleted 0\n") {
			t.Errorf("stderr does not end with the summary:\n%s", r.stderr)
		}
		wantMoved(t, target.drain(t), msgs)
		if got := dlq.drain(t); len(got) != 0 {
			t.Errorf("the DLQ still holds %d messages; want none", len(got))
		}
	})

	t.Run("-dry-run lists, and moves and deletes nothing: exit 0", func(t *testing.T) {
		dlq, target := standardPair(t)
		msgs := []dlqMessage{{body: "a"}, {body: "b"}, {body: "c"}}
		dlq.sendAll(t, msgs)
		r := cli(t, env, "", "redrive", "-dry-run", "-from", dlq.url, "-to", target.url)
		if r.code != 0 {
			t.Fatalf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if n := strings.Count(r.stdout, "would move "); n != 3 {
			t.Errorf("%d 'would move' lines; want 3:\n%s", n, r.stdout)
		}
		if !strings.HasSuffix(r.stderr, "lambdakit redrive: dry run: received 3: would move 3\n") {
			t.Errorf("stderr does not end with the summary:\n%s", r.stderr)
		}
		if n := target.count(t); n != 0 {
			t.Errorf("the target holds %d messages; want none", n)
		}
		// Visible again at once, not after the command's visibility
		// timeout.
		if n := dlq.count(t); n != 3 {
			t.Errorf("the DLQ shows %d visible messages; want 3", n)
		}
	})

	t.Run("-max takes that many: exit 0", func(t *testing.T) {
		dlq, target := fifoPair(t)
		msgs := fifoMessages(5)
		dlq.sendAll(t, msgs)
		r := cli(t, env, "", "redrive", "-max", "2", "-from", dlq.url, "-to", target.url)
		if r.code != 0 || !strings.HasSuffix(r.stderr, "received 2: moved 2, failed 0, held back 0, not deleted 0\n") {
			t.Fatalf("exit status %d; want 0 and 2 moved\n%s", r.code, r.stderr)
		}
		got := target.drain(t)
		if len(got) != 2 {
			t.Fatalf("the target holds %d messages; want 2", len(got))
		}
		// The rest, moved by a second run, keeps each group in order.
		r = cli(t, env, "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 0 || !strings.Contains(r.stderr, "moved 3,") {
			t.Fatalf("second run: exit status %d; want 0 and 3 moved\n%s", r.code, r.stderr)
		}
		wantMoved(t, append(got, target.drain(t)...), msgs)
	})

	t.Run("a failed send leaves the message and holds its group back: exit 1", func(t *testing.T) {
		dlq, target := fifoPair(t)
		msgs := fifoMessages(6) // cus_0: 0 2 4; cus_1: 1 3 5
		dlq.sendAll(t, msgs)
		proxy := testenv.NewProxy(t, srv.URL)
		proxy.Answer("SendMessage", 1, 500, `{"__type":"com.amazonaws.sqs#InternalError","message":"injected by the test proxy"}`)
		r := cli(t, redriveEnv(proxy.URL), "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 1 {
			t.Fatalf("exit status %d; want 1\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stderr, "lambdakit redrive: failed ") || strings.Count(r.stderr, "held back ") != 3 ||
			!strings.HasSuffix(r.stderr, "received 6: moved 3, failed 1, held back 2, not deleted 0\n") {
			t.Errorf("stderr:\n%s\nwant the first message failed, its group's 2 others held back, the other group moved", r.stderr)
		}
		moved := target.drain(t)
		groups := map[string]int{}
		for _, m := range moved {
			groups[m.Attributes["MessageGroupId"]]++
		}
		if len(groups) != 1 {
			t.Errorf("moved messages by group %v; want one group whole, the one without a failure", groups)
		}
		// Nothing was deleted that was not sent: a second run moves the
		// rest, in order.
		r = cli(t, env, "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 0 || !strings.Contains(r.stderr, "received 3: moved 3,") {
			t.Fatalf("second run: exit status %d; want 0 and 3 moved\n%s", r.code, r.stderr)
		}
		wantMoved(t, append(moved, target.drain(t)...), msgs)
	})

	t.Run("a message sent but not deleted is reported: exit 1", func(t *testing.T) {
		dlq, target := standardPair(t)
		dlq.sendAll(t, []dlqMessage{{body: "only"}})
		proxy := testenv.NewProxy(t, srv.URL)
		proxy.Answer("DeleteMessageBatch", 1, 500, `{"__type":"com.amazonaws.sqs#InternalError","message":"injected by the test proxy"}`)
		r := cli(t, redriveEnv(proxy.URL), "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 1 || !strings.Contains(r.stderr, "not deleted ") || !strings.HasSuffix(r.stderr, "received 1: moved 1, failed 0, held back 0, not deleted 1\n") {
			t.Errorf("exit status %d; want 1 and the message reported not deleted\n%s", r.code, r.stderr)
		}
		if n := target.count(t); n != 1 {
			t.Errorf("the target holds %d messages; want 1", n)
		}
		if n := dlq.count(t); n != 1 {
			t.Errorf("the DLQ holds %d messages; want 1 still (and visible at once)", n)
		}
	})

	t.Run("an empty DLQ: exit 0", func(t *testing.T) {
		dlq, target := standardPair(t)
		r := cli(t, env, "", "redrive", "-from", dlq.url, "-to", target.url)
		if r.code != 0 || !strings.HasSuffix(r.stderr, "received 0: moved 0, failed 0, held back 0, not deleted 0\n") || r.stdout != "" {
			t.Errorf("exit status %d, stdout %q; want 0, nothing moved\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a queue that cannot be read: exit 3, nothing touched", func(t *testing.T) {
		dlq, _ := standardPair(t)
		dlq.sendAll(t, []dlqMessage{{body: "x"}})
		r := cli(t, env, "", "redrive", "-from", dlq.url, "-to", srv.URL+"/123456789012/no-such-queue")
		if r.code != 3 || !strings.Contains(r.stderr, "cannot read the queue "+srv.URL+"/123456789012/no-such-queue") {
			t.Errorf("exit status %d; want 3 and the queue named\n%s", r.code, r.stderr)
		}
		if n := dlq.count(t); n != 1 {
			t.Errorf("the DLQ shows %d visible messages; want 1, untouched", n)
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		dlq, target := fifoPair(t)
		std, _ := standardPair(t)
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"no -from", []string{"-to", target.url}, "-from is required"},
			{"no -to", []string{"-from", dlq.url}, "-to is required"},
			{"not a URL", []string{"-from", "payments-dlq.fifo", "-to", target.url}, "want a queue URL"},
			{"same queue", []string{"-from", dlq.url, "-to", dlq.url}, "the same queue"},
			{"FIFO to standard", []string{"-from", dlq.url, "-to", std.url}, "must both be FIFO queues"},
			{"negative -max", []string{"-max", "-1", "-from", dlq.url, "-to", target.url}, "-max -1"},
			{"an argument", []string{"-from", dlq.url, "-to", target.url, "extra"}, "no arguments"},
			{"unknown flag", []string{"-queue", dlq.url}, "flag provided but not defined"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := cli(t, env, "", append([]string{"redrive"}, tc.args...)...)
				if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
					t.Errorf("exit status %d; want 2 and %q\n%s", r.code, tc.want, r.stderr)
				}
				if !strings.Contains(r.stderr, "lambdakit redrive -h") && !strings.Contains(r.stderr, "Usage: lambdakit redrive") {
					t.Errorf("no pointer to the usage:\n%s", r.stderr)
				}
			})
		}
	})

	t.Run("-h documents the command: exit 0", func(t *testing.T) {
		r := cli(t, nil, "", "redrive", "-h")
		if r.code != 0 {
			t.Errorf("exit status %d; want 0", r.code)
		}
		for _, want := range []string{"Usage: lambdakit redrive [flags] -from DLQ_URL -to QUEUE_URL", "-dry-run", "-max messages",
			"MessageDeduplicationId", "deleted from -from only after", "idempotency TTL", "5\nminutes", "AWS_ENDPOINT_URL_SQS", "Exit status"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("-h lacks %q", want)
			}
		}
	})
}
