package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// The real relay bootstrap, run by the stream's event source mapping
// (internal/esm, as `lambdakit run -stream` runs it) on moto_server: three
// committed payments make three downstream messages, in order, even though
// the relay's first send took effect and never came back (its deadline
// guard gives the record up, and the batch is read again from it): the
// second send of that item carries the same deduplication ID, and the FIFO
// queue drops it.
func TestRelaySendWhoseAnswerNeverCame(t *testing.T) {
	srv := moto.Server(t)
	cfg := moto.Config(t)
	ctx := t.Context()
	bootstrap := testenv.Build(t, ".")
	db, sqsc := dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg)

	// Three payments of one customer, each committed with its
	// "payment.charged" outbox item.
	idem := testenv.Name(t) + "-idem"
	if err := dynamostore.CreateTable(ctx, db, idem); err != nil {
		t.Fatal(err)
	}
	table, streamARN := testenv.StreamTable(t, db, "-outbox", "pk", "id")
	queue := testenv.Queue(t, sqsc, true, nil)
	store, err := dynamostore.New(db, idem)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(table)
	if err != nil {
		t.Fatal(err)
	}
	once := lambdakit.NewOnce(store, func(o *lambdakit.Options) { o.Logger = lambdakittest.Logger(t) })
	for i := range 3 {
		id := fmt.Sprintf("pay_%d", i)
		if _, err := once.Do(ctx, id, nil, func(ctx context.Context) ([]byte, error) {
			return nil, ob.Publish(ctx, outbox.Message{QueueURL: queue, GroupID: "cus_A", Name: "payment.charged", Body: `{"payment_id":"` + id + `"}`})
		}); err != nil {
			t.Fatal(err)
		}
	}

	// The relay reaches SQS through a proxy that lets its first
	// SendMessage through and never answers it.
	proxy := testenv.NewProxy(t, srv.URL)
	proxy.LoseAnswerAndHang("SendMessage", 1)
	out := &logline.Buffer{}
	runner, err := runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = "relay"
		o.Timeout = 2 * time.Second
		o.Env = append(motoserver.Env(srv.URL), "AWS_ENDPOINT_URL_SQS="+proxy.URL, "AWS_MAX_ATTEMPTS=1")
		o.Stdout, o.Stderr = out, out
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		runner.Close()
		if t.Failed() {
			t.Logf("relay output:\n%s", out.String())
		}
	})
	var batches []esm.StreamBatchResult
	m, err := esm.NewStream(dynamodbstreams.NewFromConfig(cfg), streamARN, runner, func(o *esm.StreamOptions) {
		o.ReportBatchItemFailures = true
		o.UntilEmpty = true
		o.OnBatch = func(b esm.StreamBatchResult) { batches = append(batches, b) }
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sum, err := m.Run(runCtx)
	if err != nil || !sum.Empty {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	// The relay's deadline guard answers before Lambda's timeout would
	// kill it, naming the record whose send never came back; either way
	// the batch is read again from that record.
	if len(batches) < 2 || batches[0].RetryFrom != batches[0].Records[0].Change.SequenceNumber {
		t.Fatalf("first batch: %s, read again from %q; want it read again from its first record, whose send never came back", batches[0].Result.Outcome, batches[0].RetryFrom)
	}
	if n := proxy.Count("SendMessage"); n != 4 {
		t.Errorf("%d sends reached SQS; want 4: the first item twice, the others once", n)
	}

	got := testenv.Drain(t, sqsc, queue)
	var bodies []string
	for _, msg := range got {
		bodies = append(bodies, aws.ToString(msg.Body))
	}
	want := []string{`{"payment_id":"pay_0"}`, `{"payment_id":"pay_1"}`, `{"payment_id":"pay_2"}`}
	if !slices.Equal(bodies, want) {
		t.Errorf("downstream %v; want each payment once, in order: %v", bodies, want)
	}
	for _, msg := range got {
		if !strings.HasPrefix(aws.ToString(msg.MessageAttributes[outbox.IDAttribute].StringValue), "outbox#") {
			t.Errorf("message %s has no %s", aws.ToString(msg.Body), outbox.IDAttribute)
		}
	}
}
