package main

// Helpers shared by the package's tests: one moto_server for all of them,
// and a fixture that runs the function against its own tables and gateway.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// moto is the package's moto_server, started once by TestMain.
var moto testenv.Moto

func TestMain(m *testing.M) { moto.Run(m) }

// templatePath is the SAM template the function is deployed with.
const templatePath = "../../template.yaml"

// mustHandler is newHandler for a configuration that must be valid.
func mustHandler(tb testing.TB, c config, db dynamostore.API, client *http.Client, logger *slog.Logger, batchOpts ...func(*lambdakit.BatchOptions)) lambdakit.BatchFunc {
	tb.Helper()
	h, err := newHandler(c, db, nil, client, logger, batchOpts...)
	if err != nil {
		tb.Fatalf("newHandler: %v", err)
	}
	return h
}

// fixture is one function instance with its own tables (created from
// template.yaml) and gateway.
type fixture struct {
	db      *dynamodb.Client
	calls   *testenv.Counter
	gw      *gateway.Gateway
	cfg     config
	handler func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
	logs    *lambdakittest.LogBuffer
}

// run sends one batch and returns the IDs of the failed records.
func (f *fixture) run(tb testing.TB, msgs ...events.SQSMessage) map[string]bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := f.handler(ctx, lambdakittest.Event(msgs...))
	if err != nil && len(resp.BatchItemFailures) != len(msgs) {
		tb.Fatalf("batch error %v with %d of %d failed", err, len(resp.BatchItemFailures), len(msgs))
	}
	failed := map[string]bool{}
	for _, x := range resp.BatchItemFailures {
		failed[x.ItemIdentifier] = true
	}
	return failed
}

// ledger is the ledger row of the payment id (key ledgerKey(id)), nil
// when there is none.
func (f *fixture) ledger(tb testing.TB, id string) map[string]types.AttributeValue {
	tb.Helper()
	out, err := f.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(f.cfg.PaymentsTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{ledgerKeyAttr: &types.AttributeValueMemberS{Value: ledgerKey(id)}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out.Item
}

// records are the idempotency records on the payments table: the rows
// that have the record's status. The ledger rows written beside a Valkey
// store have none.
func (f *fixture) records(tb testing.TB) []map[string]types.AttributeValue {
	tb.Helper()
	out, err := f.db.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.cfg.PaymentsTable), ConsistentRead: aws.Bool(true)})
	if err != nil {
		tb.Fatal(err)
	}
	var recs []map[string]types.AttributeValue
	for _, item := range out.Items {
		if _, ok := item[recordStatusAttr]; ok {
			recs = append(recs, item)
		}
	}
	return recs
}

func (f *fixture) idempotencyRecords(tb testing.TB) int {
	tb.Helper()
	return len(f.records(tb))
}

// setup starts a fixture whose gateway is served by gatewayHandler, or by
// the fixture's fake gateway (f.gw) when nil.
func setup(tb testing.TB, gatewayHandler http.Handler) *fixture {
	tb.Helper()
	f := &fixture{calls: &testenv.Counter{}, gw: &gateway.Gateway{}, logs: &lambdakittest.LogBuffer{}}
	if gatewayHandler == nil {
		gatewayHandler = f.gw
	}
	srv := httptest.NewServer(gatewayHandler)
	tb.Cleanup(srv.Close)
	f.db = dynamodb.NewFromConfig(moto.Config(tb), func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, f.calls.APIOption)
	})
	f.cfg = config{GatewayURL: srv.URL}
	f.cfg.PaymentsTable = f.createTable(tb, "PaymentsTable", "-pay")
	client := &http.Client{Timeout: 300 * time.Millisecond}
	f.handler = mustHandler(tb, f.cfg, f.db, client, f.logs.Logger()) // DEBUG: a line per message
	f.calls.Reset()
	return f
}

// body is the JSON body of a payment of amount (minor units, EUR).
func body(id, customer string, amount int) string {
	return fmt.Sprintf(`{"payment_id":%q,"order_id":"ord_1","customer_id":%q,"amount":%d,"currency":"EUR"}`, id, customer, amount)
}

// attr is the string or number attribute name of item as text; empty when
// item has no such attribute.
func attr(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return ""
}

// createTable creates the template's table logical on moto, named for tb
// with suffix, and returns its name.
func (f *fixture) createTable(tb testing.TB, logical, suffix string) string {
	tb.Helper()
	tables, err := samtemplate.Tables("../../template.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	t, err := samtemplate.Find(tables, logical)
	if err != nil {
		tb.Fatal(err)
	}
	name := testenv.Name(tb) + suffix
	if err := t.Create(context.Background(), f.db, name); err != nil {
		tb.Fatal(err)
	}
	return name
}

// envWith is a getenv of base with extra's values over it.
func envWith(base, extra map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := extra[k]; ok {
			return v
		}
		return base[k]
	}
}
