package main_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
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

// redrivenDedup is what a redriven FIFO message's deduplication ID is: the
// old one, "~" and 26 random base32 characters (see redriveDedupID).
var redrivenDedup = regexp.MustCompile(`^(.*)~[A-Z2-7]{26}$`)

// wantMoved checks that got (received from the target, in order) are want,
// with their groups and attributes, each group in order, and each with a
// deduplication ID of its own that starts with its old one.
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
	dedups := map[string]bool{}
	for _, m := range got {
		body := aws.ToString(m.Body)
		w, ok := byBody[body]
		if !ok {
			t.Errorf("unexpected message %q", body)
			continue
		}
		g, d := m.Attributes["MessageGroupId"], m.Attributes["MessageDeduplicationId"]
		if old := redrivenDedup.FindStringSubmatch(d); g != w.group || w.dedup != "" && (old == nil || old[1] != w.dedup || dedups[d]) {
			t.Errorf("%s: group %q, dedup %q; want %q, and a new dedup ID %q~ and 26 characters", body, g, d, w.group, w.dedup)
		}
		dedups[d] = true
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
	t.Parallel() // its own names, processes and servers: it waits mostly
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
		if want := regexp.MustCompile(fmt.Sprintf(`\(group cus_0, dedup dedup-00 as dedup-00~[A-Z2-7]{26}, %d bytes, 3 attributes\)\n`, len(msgs[0].body))); !want.MatchString(r.stdout) {
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
		// One byte is a byte.
		if n := strings.Count(r.stdout, " (1 byte, 0 attributes)\n"); n != 3 {
			t.Errorf("%d lines say (1 byte, 0 attributes); want 3:\n%s", n, r.stdout)
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
		r := cli(t, redriveEnv(proxy.URL), "", "redrive", "-from", at(proxy.URL, dlq.url), "-to", at(proxy.URL, target.url))
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
		r := cli(t, redriveEnv(proxy.URL), "", "redrive", "-from", at(proxy.URL, dlq.url), "-to", at(proxy.URL, target.url))
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

	t.Run("the same queue under another spelling of its URL: exit 2, nothing sent", func(t *testing.T) {
		dlq, _ := standardPair(t)
		sent, err := client.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(dlq.url), MessageBody: aws.String("only")})
		if err != nil {
			t.Fatal(err)
		}
		// One queue, two URLs, as AWS's regional and legacy hosts of a
		// region (sqs.us-east-1.amazonaws.com, us-east-1.queue.amazonaws.com)
		// are; here, a scheme in capitals. Redriven into itself, a message
		// would go round under a new ID each round, counted moved, never
		// leaving the DLQ; -max bounds the rounds should the command not
		// see it.
		proxy := newSchemeProxy(t, srv.URL)
		from := at(proxy, dlq.url)
		to := "HTTP" + strings.TrimPrefix(from, "http")
		r := cli(t, redriveEnv(proxy), "", "redrive", "-max", "3", "-from", from, "-to", to)
		if r.code != 2 || !strings.Contains(r.stderr, "the same queue") {
			t.Errorf("exit status %d; want 2 and the same queue named\n%s", r.code, r.stderr)
		}
		got := dlq.drain(t)
		if len(got) != 1 || aws.ToString(got[0].MessageId) != aws.ToString(sent.MessageId) {
			t.Errorf("the DLQ holds %d messages; want 1, the one sent (%s), untouched", len(got), aws.ToString(sent.MessageId))
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
			"new deduplication ID", "deleted from -from only after", "for 5 minutes", "-live", "docs/operations.md", "Exit status"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("-h lacks %q", want)
			}
		}
	})
}

// newSchemeProxy starts a real HTTP server in front of moto_server that
// finds a queue whatever the case of its URL's scheme, as AWS finds one by
// the account and name its URL gives: moto 5.2 takes a QueueUrl for a URL
// only when it starts with a lower-case "http://" (else it reads the whole
// string as a queue name), so the proxy lowers the scheme of the QueueUrl
// before moto reads it. It returns the server's URL.
func newSchemeProxy(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		body, err := io.ReadAll(pr.In.Body)
		if err != nil {
			body = nil // moto answers the empty request with an error
		}
		body = bytes.ReplaceAll(body, []byte(`"QueueUrl":"HTTP://`), []byte(`"QueueUrl":"http://`))
		pr.Out.Body, pr.Out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

// dedupProxy is a real HTTP server in front of moto_server that answers
// SendMessage on FIFO queues as real SQS does, where moto 5 does not.
//
// SQS keeps a message's MessageDeduplicationId for 5 minutes after it
// accepted the message, even once that message was received, moved to a
// dead-letter queue or deleted; a SendMessage with an ID it keeps is
// answered as sent, with a MessageId, and the message is not enqueued
// ("accepted successfully but aren't delivered during the 5-minute
// deduplication interval": the SQS Developer Guide on
// MessageDeduplicationId, and the SendMessage API reference). moto 5.2
// compares the ID with the messages still in the queue only
// (moto/sqs/models.py, Queue.add_message), so it forgets the ID of a
// message as soon as the redrive policy moves it to the DLQ, and a redrive
// that resends the ID gets the message enqueued: the test would pass on
// code that loses the message on AWS.
//
// The proxy keeps the deduplication IDs of the SendMessage calls moto
// accepted, per queue name (the host of a queue URL differs between the
// test's client and the CLI), with the MessageId and SequenceNumber moto
// gave. A SendMessage with an ID it keeps from the last 5 minutes it
// answers itself, 200 with that MessageId and SequenceNumber and the MD5 of
// the body (which the SDK checks), and forwards nothing. SendMessageBatch
// and every other operation are forwarded as they are: neither the CLI's
// redrive nor these tests send batches through it.
type dedupProxy struct {
	URL string

	mu      sync.Mutex
	seen    map[string]dedupSeen // queue name + " " + dedup ID
	dropped int                  // sends answered without enqueuing
}

type dedupSeen struct {
	at         time.Time
	messageID  string
	sequenceNo string
}

// sqsDedupWindow is how long SQS keeps a FIFO deduplication ID.
const sqsDedupWindow = 5 * time.Minute

func newDedupProxy(t *testing.T, target string) *dedupProxy {
	t.Helper()
	if !strings.HasPrefix(target, "http://127.0.0.1:") {
		t.Fatalf("newDedupProxy(%q): want moto_server on http://127.0.0.1", target)
	}
	p := &dedupProxy{seen: map[string]dedupSeen{}}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second} // straight to moto
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var in struct {
			QueueUrl, MessageBody, MessageDeduplicationId string
		}
		key := ""
		if testenv.Operation(r) == "SendMessage" && json.Unmarshal(body, &in) == nil && in.MessageDeduplicationId != "" {
			key = path.Base(in.QueueUrl) + " " + in.MessageDeduplicationId
		}
		if key != "" {
			p.mu.Lock()
			s, ok := p.seen[key]
			if ok && time.Since(s.at) < sqsDedupWindow {
				p.dropped++
			}
			p.mu.Unlock()
			if ok && time.Since(s.at) < sqsDedupWindow {
				sum := md5.Sum([]byte(in.MessageBody))
				out, _ := json.Marshal(map[string]string{"MessageId": s.messageID, "SequenceNumber": s.sequenceNo, "MD5OfMessageBody": hex.EncodeToString(sum[:])})
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.Write(out)
				return
			}
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		respBody, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if key != "" && resp.StatusCode == http.StatusOK {
			var out struct{ MessageId, SequenceNumber string }
			if json.Unmarshal(respBody, &out) == nil && out.MessageId != "" {
				p.mu.Lock()
				p.seen[key] = dedupSeen{at: time.Now(), messageID: out.MessageId, sequenceNo: out.SequenceNumber}
				p.mu.Unlock()
			}
		}
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(respBody)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Dropped is how many sends the proxy answered without enqueuing.
func (p *dedupProxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// TestRedriveFIFODedupWindow: a FIFO message that
// reaches the DLQ and is redriven within 5 minutes of its first send must
// not be lost to SQS's deduplication. Real SQS's answer is simulated by
// dedupProxy (see there); moto alone would not show the loss.
func TestRedriveFIFODedupWindow(t *testing.T) {
	t.Parallel() // its own names, processes and servers: it waits mostly
	srv := moto.Server(t)
	direct := sqs.NewFromConfig(moto.Config(t)) // to moto, bypassing the proxy: for setup and checks only
	dp := newDedupProxy(t, srv.URL)
	viaProxy := sqs.NewFromConfig(motoserver.Config(dp.URL)) // the producer, the consumer: as on AWS

	// pair makes a FIFO DLQ and a FIFO queue whose redrive policy moves a
	// message there after 1 receive. The URLs name moto's host.
	pair := func(t *testing.T) (dlq, queue publishQueue) {
		dlq = newPublishQueue(t, direct, true, nil)
		attrs, err := direct.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(dlq.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		if err != nil {
			t.Fatal(err)
		}
		policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"1"}`, attrs.Attributes["QueueArn"])
		return dlq, newPublishQueue(t, direct, true, map[string]string{"RedrivePolicy": policy})
	}
	// failOnce has the consumer receive every message of queue and fail it
	// (leave it, visible at once); the next receive finds the receive count
	// spent, and moto's redrive policy moves the messages to the DLQ, as
	// SQS does.
	failOnce := func(t *testing.T, queue, dlq publishQueue, n int) {
		t.Helper()
		for range 2 {
			out, err := viaProxy.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue.url), MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				if _, err := viaProxy.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
					QueueUrl: aws.String(queue.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0,
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := dlq.count(t); got != n {
			t.Fatalf("the DLQ holds %d messages after the failures; want %d", got, n)
		}
	}
	// The CLI goes through the proxy: its queue URLs name the proxy.
	onProxy := func(u string) string { return at(dp.URL, u) }
	env := redriveEnv(dp.URL)
	msg := dlqMessage{body: `{"payment_id":"pay_dedup"}`, group: "cus_dedup", dedup: producer.DedupID("pay_dedup")}

	// wantKept checks that the message is in queue, or at worst still in
	// the DLQ, and not lost; it returns the copies in queue.
	wantKept := func(t *testing.T, queue, dlq publishQueue) []types.Message {
		t.Helper()
		inQueue, inDLQ := queue.drain(t), dlq.drain(t)
		if len(inQueue)+len(inDLQ) == 0 {
			t.Fatalf("the message is lost: neither the queue nor the DLQ holds it (the proxy answered %d sends without enqueuing)", dp.Dropped())
		}
		if len(inDLQ) != 0 {
			t.Errorf("the DLQ still holds %d messages; want them moved", len(inDLQ))
		}
		for _, m := range inQueue {
			if aws.ToString(m.Body) != msg.body || m.Attributes["MessageGroupId"] != msg.group {
				t.Errorf("the queue holds %q in group %q; want %q in %q", aws.ToString(m.Body), m.Attributes["MessageGroupId"], msg.body, msg.group)
			}
		}
		return inQueue
	}

	t.Run("redriven within 5 minutes of its first send: moved, not lost", func(t *testing.T) {
		dlq, queue := pair(t)
		viaProxy := publishQueue{viaProxy, queue.url}
		viaProxy.sendAll(t, []dlqMessage{msg})
		failOnce(t, queue, dlq, 1)
		// The premise: SQS (the proxy) still holds the dedup ID, though
		// the message left the queue.
		before := dp.Dropped()
		viaProxy.sendAll(t, []dlqMessage{msg})
		if dp.Dropped() != before+1 || queue.count(t) != 0 {
			t.Fatalf("the proxy enqueued a resend of a dedup ID it saw; the test's simulation of SQS is broken")
		}

		r := cli(t, env, "", "redrive", "-from", onProxy(dlq.url), "-to", onProxy(queue.url))
		if r.code != 0 {
			t.Errorf("exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if got := wantKept(t, queue, dlq); len(got) != 1 {
			t.Errorf("the queue holds %d copies; want 1\nstdout:\n%s\nstderr:\n%s", len(got), r.stdout, r.stderr)
		}
	})

	t.Run("back in the DLQ and redriven again within 5 minutes: moved again", func(t *testing.T) {
		dlq, queue := pair(t)
		publishQueue{viaProxy, queue.url}.sendAll(t, []dlqMessage{msg})
		failOnce(t, queue, dlq, 1)
		r := cli(t, env, "", "redrive", "-from", onProxy(dlq.url), "-to", onProxy(queue.url))
		if r.code != 0 {
			t.Fatalf("first redrive: exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if n := queue.count(t); n != 1 {
			t.Fatalf("the queue holds %d messages after the first redrive; want 1 (the proxy answered %d sends without enqueuing)", n, dp.Dropped())
		}
		// The cause was not fixed after all: the redriven message fails
		// and is in the DLQ again, and the operator redrives once more.
		failOnce(t, queue, dlq, 1)
		r = cli(t, env, "", "redrive", "-from", onProxy(dlq.url), "-to", onProxy(queue.url))
		if r.code != 0 {
			t.Errorf("second redrive: exit status %d; want 0\n%s", r.code, r.stderr)
		}
		if got := wantKept(t, queue, dlq); len(got) != 1 {
			t.Errorf("the queue holds %d copies; want 1\nstdout:\n%s\nstderr:\n%s", len(got), r.stdout, r.stderr)
		}
	})

	t.Run("sent, not deleted, redriven again: in the queue, a duplicate at worst", func(t *testing.T) {
		dlq, queue := pair(t)
		publishQueue{viaProxy, queue.url}.sendAll(t, []dlqMessage{msg})
		failOnce(t, queue, dlq, 1)
		faults := testenv.NewProxy(t, dp.URL)
		faults.Answer("DeleteMessageBatch", 1, 500, `{"__type":"com.amazonaws.sqs#InternalError","message":"injected by the test proxy"}`)
		r := cli(t, redriveEnv(faults.URL), "", "redrive", "-from", at(faults.URL, dlq.url), "-to", at(faults.URL, queue.url))
		if r.code != 1 || !strings.HasSuffix(r.stderr, "received 1: moved 1, failed 0, held back 0, not deleted 1\n") {
			t.Fatalf("first redrive: exit status %d; want 1, sent and not deleted\n%s", r.code, r.stderr)
		}
		r = cli(t, env, "", "redrive", "-from", onProxy(dlq.url), "-to", onProxy(queue.url))
		if r.code != 0 {
			t.Errorf("second redrive: exit status %d; want 0\n%s", r.code, r.stderr)
		}
		// Each run sends with a deduplication ID of its own, so the copy
		// of the second run is enqueued too: the consumer's idempotency
		// record makes it a duplicate that does no work.
		if got := wantKept(t, queue, dlq); len(got) < 1 || len(got) > 2 {
			t.Errorf("the queue holds %d copies; want 1 or 2", len(got))
		}
	})
}
