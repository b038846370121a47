package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

// The idempotency modes side by side: what a payment costs in DynamoDB
// requests and units with its record beside its ledger row (the sample
// before), on its own item (SetItem, the sample now), and in one request
// (StagedOnly); and each of the last two with an event, on the record
// (outbox.PublishOnRecord) and through the outbox table (Publish). The
// modes run in this process, through lambdakit's Batch and Idempotent on
// dynamostore, against the stack's moto behind its metering proxy: the
// units are computed from the requests as DynamoDB bills them (units.go).
// The handlers write the sample's ledger row, without calling the gateway:
// what they cost in Lambda, SQS and CloudWatch is the same in every mode,
// and computed from list prices (otherCostPerMillion).

// List prices for the cost per million messages, us-east-1, as AWS's
// pricing pages give them (read before this was written; this machine
// cannot reach them, so they are not checked here: change them here when
// they change). DynamoDB on-demand, Standard table class, after the
// November 2024 reduction; Lambda on arm64, first duration tier; SQS FIFO,
// first tier, one request per 64 KB chunk of a message; CloudWatch Logs
// standard ingestion.
const (
	priceWRU           = 0.625        // $ per million write request units
	priceRRU           = 0.125        // $ per million read request units
	priceLambdaRequest = 0.20         // $ per million invocations
	priceLambdaGBs     = 0.0000133334 // $ per GB-second, arm64
	priceSQSFIFO       = 0.50         // $ per million FIFO requests
	priceLogsGB        = 0.50         // $ per GB of logs ingested
)

// What a message costs outside DynamoDB, the same in every mode, for the
// sample as template.yaml deploys it: batches of 10, 256 MB, one EMF line
// of about 600 bytes per invocation and no line per message at INFO.
// billedMsPerBatch is an assumption, not a measurement: a batch of 10
// payments with a gateway call each, 10 at a time; the gateway's latency
// on AWS is not known here.
const (
	messagesPerBatch = 10
	memoryGB         = 0.25
	billedMsPerBatch = 300
	emfBytesPerBatch = 600
	// SQS requests per message: the producer's SendMessage, and the
	// mapping's ReceiveMessage and DeleteMessageBatch, each for a batch
	// (a poller's empty receives come on top, by the hour, not by message).
	sqsRequestsPerMessage = 1 + 2.0/messagesPerBatch
)

// otherCostPerMillion is what a million messages cost in Lambda, SQS and
// CloudWatch Logs at list price, by service, under the assumptions above.
func otherCostPerMillion() (lambdaRequests, lambdaDuration, sqs, logs float64) {
	batches := 1e6 / messagesPerBatch
	lambdaRequests = batches / 1e6 * priceLambdaRequest
	lambdaDuration = batches * billedMsPerBatch / 1000 * memoryGB * priceLambdaGBs
	sqs = sqsRequestsPerMessage * priceSQSFIFO
	logs = batches * emfBytesPerBatch / 1e9 * priceLogsGB
	return
}

// ModeRow is one mode's cost per message, for new messages and for each
// kind of duplicate.
type ModeRow struct {
	Mode, Handler string
	// New, Warm, Redelivered and Cold are what messages cost, summed over
	// Messages: new ones; duplicates in the container that ran them
	// (its cache answers); duplicates redelivered to a fresh container
	// (ApproximateReceiveCount 2: read ahead); duplicates sent anew to a
	// fresh container (the store answers).
	New, Warm, Redelivered, Cold Usage
	Messages                     int
	// LargestItem is the largest item of the mode's own table after the
	// new messages, in bytes as DynamoDB sizes an item for billing
	// (computed by the meter, units.go): the completed record, with its
	// messages when they ride on it.
	LargestItem int
}

// mode is one way of running the payment handler.
type mode struct {
	name, handler string
	opts          func(*lambdakit.Options)
	// handle records the payment in the mode's tables.
	handle func(ctx context.Context, env modeEnv, p map[string]string) error
}

// modeEnv is what a mode's handler writes to: its table (the ledger rows
// beside it in table-ledger), an outbox table, and the queue its events
// are for. No event is sent: the relay would, from a stream, at no cost
// to the completion.
type modeEnv struct {
	table  string
	outbox *outbox.Outbox
	queue  string
}

// chargedEvent is the payment.charged message of p as functions/payment
// builds it (its body's fields, its group, name and attribute), so that
// the item it rides on has the sample's size.
func chargedEvent(queue string, p map[string]string) outbox.Message {
	body := `{"type":"payment.charged","payment_id":"` + p["payment_id"] + `","order_id":"` + p["order_id"] +
		`","customer_id":"` + p["customer_id"] + `","amount":` + p["amount"] + `,"currency":"` + p["currency"] +
		`","charge_id":"ch_` + p["payment_id"] + `"}`
	return outbox.Message{QueueURL: queue, GroupID: p["customer_id"], Name: "payment.charged", Body: body,
		Attributes: map[string]string{"type": "payment.charged"}}
}

// entryEvent is the downstream event of a ledger entry, ledger.recorded,
// as functions/ledger publishes it with LEDGER_EVENTS_QUEUE_URL set (its
// body's fields, group, name and attribute).
func entryEvent(queue string, p map[string]string) outbox.Message {
	body := `{"type":"ledger.recorded","payment_id":"` + p["payment_id"] + `","customer_id":"` + p["customer_id"] +
		`","amount":` + p["amount"] + `,"currency":"` + p["currency"] + `","charge_id":"ch_` + p["payment_id"] + `"}`
	return outbox.Message{QueueURL: queue, GroupID: p["customer_id"], Name: "ledger.recorded", Body: body,
		Attributes: map[string]string{"type": "ledger.recorded"}}
}

// eventModes are the modes of who (its options) whose handler sets its
// item's attributes (set) and publishes event: on the record
// (outbox.PublishOnRecord), and through the outbox table (Publish).
func eventModes(who string, opts func(*lambdakit.Options), set func(context.Context, modeEnv, map[string]string) error,
	event func(queue string, p map[string]string) outbox.Message) []mode {
	name := event("", map[string]string{}).Name
	publish := func(onRecord bool) func(context.Context, modeEnv, map[string]string) error {
		return func(ctx context.Context, env modeEnv, p map[string]string) error {
			if err := set(ctx, env, p); err != nil {
				return err
			}
			if onRecord {
				return outbox.PublishOnRecord(ctx, event(env.queue, p))
			}
			return env.outbox.Publish(ctx, event(env.queue, p))
		}
	}
	return []mode{
		{name: who + ", " + name + " on the record", handler: "SetItem + PublishOnRecord(" + name + ")", opts: opts, handle: publish(true)},
		{name: who + ", " + name + " through the outbox table", handler: "SetItem + Publish(" + name + ")", opts: opts, handle: publish(false)},
	}
}

// setLedgerItem puts the ledger attributes on the record's item.
func setLedgerItem(ctx context.Context, _ modeEnv, p map[string]string) error {
	return dynamostore.SetItem(ctx, ledgerAttrs(p, "payment_status"))
}

// setEntryItem puts the attributes of functions/ledger's entry on the
// record's item.
func setEntryItem(ctx context.Context, _ modeEnv, p map[string]string) error {
	attrs := ledgerAttrs(p, "payment_status")
	delete(attrs, "payment_status")
	delete(attrs, "recorded_at")
	return dynamostore.SetItem(ctx, attrs)
}

// The options of the sample's payment (its record on its item, kept) and
// of the ledger's entry (the same, in one request).
var (
	paymentOpts = func(o *lambdakit.Options) { o.ReadableIDs, o.TTL = true, lambdakit.NeverExpire }
	entryOpts   = func(o *lambdakit.Options) { o.ReadableIDs, o.TTL, o.StagedOnly = true, lambdakit.NeverExpire, true }
)

// ledgerAttrs are the attributes of the sample's ledger row for p, as
// functions/payment writes it, the status renamed where the record has
// its own.
func ledgerAttrs(p map[string]string, status string) map[string]dbtypes.AttributeValue {
	return map[string]dbtypes.AttributeValue{
		status:        &dbtypes.AttributeValueMemberS{Value: "CHARGED"},
		"amount":      &dbtypes.AttributeValueMemberN{Value: p["amount"]},
		"currency":    &dbtypes.AttributeValueMemberS{Value: p["currency"]},
		"order_id":    &dbtypes.AttributeValueMemberS{Value: p["order_id"]},
		"customer_id": &dbtypes.AttributeValueMemberS{Value: p["customer_id"]},
		"recorded_at": &dbtypes.AttributeValueMemberS{Value: "2026-01-01T00:00:00.123456789Z"},
		"charge_id":   &dbtypes.AttributeValueMemberS{Value: "ch_" + p["payment_id"]},
	}
}

var modes = slices.Concat([]mode{
	{
		name: "two-step, record beside the ledger row (the sample before)", handler: "Stage(Put ledger row)",
		opts: func(*lambdakit.Options) {},
		handle: func(ctx context.Context, env modeEnv, p map[string]string) error {
			row := ledgerAttrs(p, "status")
			row["payment_id"] = &dbtypes.AttributeValueMemberS{Value: p["payment_id"]}
			return dynamostore.Stage(ctx, dbtypes.TransactWriteItem{Put: &dbtypes.Put{TableName: aws.String(env.table + "-ledger"), Item: row}})
		},
	},
	{
		name: "record on the payment item (SetItem; the sample now)", handler: "SetItem(ledger attributes)",
		opts: paymentOpts, handle: setLedgerItem,
	},
}, eventModes("record on the payment item", paymentOpts, setLedgerItem, chargedEvent), []mode{
	{
		name: "StagedOnly, record on the item (DynamoDB-only effects; the ledger's entry)", handler: "SetItem(entry attributes)",
		opts: entryOpts, handle: setEntryItem,
	},
}, eventModes("StagedOnly, the ledger's entry", entryOpts, setEntryItem, entryEvent), []mode{
	{
		name: "StagedOnly, record and a staged balance update", handler: "SetItem + Stage(Update balance)",
		opts: entryOpts,
		handle: func(ctx context.Context, env modeEnv, p map[string]string) error {
			if err := setLedgerItem(ctx, env, p); err != nil {
				return err
			}
			return dynamostore.Stage(ctx, dbtypes.TransactWriteItem{Update: &dbtypes.Update{
				TableName:                 aws.String(env.table),
				Key:                       map[string]dbtypes.AttributeValue{"id": &dbtypes.AttributeValueMemberS{Value: "balance#" + p["customer_id"]}},
				UpdateExpression:          aws.String("ADD balance :amount"),
				ExpressionAttributeValues: map[string]dbtypes.AttributeValue{":amount": &dbtypes.AttributeValueMemberN{Value: p["amount"]}},
			}})
		},
	},
})

// Modes runs n new payments through each mode in batches of batchSize,
// then each kind of duplicate of them, and returns what each cost.
func (s *Stack) Modes(ctx context.Context, n, batchSize int) ([]ModeRow, error) {
	var rows []ModeRow
	for i, m := range modes {
		table := "bench-modes-" + strconv.Itoa(i)
		for _, t := range []struct{ name, key string }{{table, "id"}, {table + "-ledger", "payment_id"}} {
			if err := s.createTable(ctx, t.name, t.key); err != nil {
				return nil, err
			}
		}
		if err := s.OutboxTable(ctx, table+"-outbox"); err != nil {
			return nil, err
		}
		store, err := dynamostore.New(s.DB, table)
		if err != nil {
			return nil, err
		}
		ob, err := outbox.New(table + "-outbox")
		if err != nil {
			return nil, err
		}
		// A FIFO queue's URL, only named: nothing here sends to it.
		env := modeEnv{table: table, outbox: ob, queue: s.Moto.URL + "/123456789012/bench-events.fifo"}
		container := func() lambdakit.BatchFunc {
			quiet := slog.New(slog.DiscardHandler)
			h := lambdakit.Idempotent(store, lambdakit.KeyFromField("payment_id"), m.opts, func(o *lambdakit.Options) {
				o.Prefix, o.CacheSize, o.Logger = "payment", 1000, quiet
			})(lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
				p, err := paymentFields(msg.Body)
				if err != nil {
					return nil, err
				}
				if err := m.handle(ctx, env, p); err != nil {
					return nil, err
				}
				return []byte(`{"status":"CHARGED","charge_id":"ch_` + p["payment_id"] + `"}`), nil
			}))
			return lambdakit.Batch(h, func(o *lambdakit.BatchOptions) { o.Logger = quiet })
		}
		msgs := NewPayments(fmt.Sprintf("M%d", i)).Take(n)
		redelivered := make([]events.SQSMessage, len(msgs))
		for j, msg := range msgs {
			redelivered[j] = lambdakittest.Redelivery(msg)
		}
		row := ModeRow{Mode: m.name, Handler: m.handler, Messages: n}
		warm := container()
		s.Meter.Take()
		for _, step := range []struct {
			usage *Usage
			run   lambdakit.BatchFunc
			msgs  []events.SQSMessage
		}{
			{&row.New, warm, msgs},
			{&row.Warm, warm, msgs},
			{&row.Redelivered, container(), redelivered},
			{&row.Cold, container(), msgs},
		} {
			for _, batch := range InBatches(step.msgs, batchSize) {
				resp, err := step.run(ctx, events.SQSEvent{Records: batch})
				if err == nil && len(resp.BatchItemFailures) > 0 {
					err = fmt.Errorf("%d records failed", len(resp.BatchItemFailures))
				}
				if err != nil {
					return nil, fmt.Errorf("bench: mode %q: %w", m.name, err)
				}
			}
			*step.usage = s.Meter.Take()
			if step.usage == &row.New {
				row.LargestItem = s.Meter.LargestItem(table)
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// headroom is how many bytes an item of size bytes can grow before a
// write of it costs one more unit.
func headroom(size int) int {
	return int(writeUnits(size))*writeUnitBytes - size
}

// paymentFields reads the string and number fields of a payment body.
func paymentFields(body string) (map[string]string, error) {
	var p struct {
		PaymentID  string `json:"payment_id"`
		OrderID    string `json:"order_id"`
		CustomerID string `json:"customer_id"`
		Amount     int64  `json:"amount"`
		Currency   string `json:"currency"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return nil, err
	}
	return map[string]string{"payment_id": p.PaymentID, "order_id": p.OrderID, "customer_id": p.CustomerID,
		"amount": strconv.FormatInt(p.Amount, 10), "currency": p.Currency}, nil
}

// createTable creates an on-demand table keyed by the string key, through
// the proxy, so that the meter learns its key.
func (s *Stack) createTable(ctx context.Context, name, key string) error {
	_, err := s.DB.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		KeySchema:            []dbtypes.KeySchemaElement{{AttributeName: aws.String(key), KeyType: dbtypes.KeyTypeHash}},
		AttributeDefinitions: []dbtypes.AttributeDefinition{{AttributeName: aws.String(key), AttributeType: dbtypes.ScalarAttributeTypeS}},
		BillingMode:          dbtypes.BillingModePayPerRequest,
	})
	return err
}

// PrintModes prints the modes' rows: requests and units per message, and
// their cost per million messages at list price.
func PrintModes(w io.Writer, moto string, batchSize int, rows []ModeRow) {
	fmt.Fprintf(w, "### Idempotency modes: DynamoDB per payment\n\n")
	n := 0
	if len(rows) > 0 {
		n = rows[0].Messages
	}
	fmt.Fprintf(w, "%d payments per mode in batches of %d, through lambdakit's Batch and Idempotent on dynamostore in the bench process, against %s behind the metering proxy; "+
		"each payment writes the sample's ledger row (no gateway call). Requests are counted at the proxy; write units (WRU) and read units (RRU) are computed from each request "+
		"as DynamoDB bills on-demand tables: 1 WRU per started KB of the larger of the item before and after, doubled for each write of a transaction, the same for a write whose condition fails; "+
		"1 RRU per started 4 KB of a strongly consistent read. "+
		"Cost per million messages at list price: $%.3f per million WRU, $%.3f per million RRU (DynamoDB on-demand, Standard table class, us-east-1, https://aws.amazon.com/dynamodb/pricing/on-demand/). "+
		"Lambda, SQS and CloudWatch are the same in every mode: see the table after this one (an event's own SendMessage by the relay, the same for both kinds of outbox, is not in it).\n\n", n, batchSize, moto, priceWRU, priceRRU)
	fmt.Fprintln(w, "| mode | handler | new: requests, WRU | $ per million new | largest item: bytes (bytes to its next WRU) | warm duplicate: requests | redelivered duplicate, fresh container: requests, RRU, WRU | resent duplicate, fresh container: requests, WRU |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		per := func(v float64) string { return num(v/float64(r.Messages), 2) }
		req := func(u Usage) string { return per(float64(u.Total())) }
		cost := (r.New.WriteUnits*priceWRU + r.New.ReadUnits*priceRRU) / float64(r.Messages)
		fmt.Fprintf(w, "| %s | %s | %s (%s), %s | $%s | %s (%s) | %s | %s, %s, %s | %s (%s), %s |\n", r.Mode, r.Handler,
			req(r.New), r.New.Ops(), per(r.New.WriteUnits), num(cost, 3),
			num(float64(r.LargestItem), 0), num(float64(headroom(r.LargestItem)), 0),
			req(r.Warm),
			req(r.Redelivered), per(r.Redelivered.ReadUnits), per(r.Redelivered.WriteUnits),
			req(r.Cold), r.Cold.Ops(), per(r.Cold.WriteUnits))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The item sizes are computed by the meter with DynamoDB's rules (each attribute's name and value), not measured: moto bills no units (it reports 0.5 for any small write). "+
		"A write is billed by the larger of the item before and after it, in started units of %d bytes, so a record's completion costs one unit more once its item passes a multiple of %d bytes: "+
		"with the event on the record, a new payment costs a third unit once its completed item passes %d bytes, and a StagedOnly entry a second one; "+
		"the bytes to the next unit are how much the item (its event's body, say) can grow first.\n\n", writeUnitBytes, writeUnitBytes, writeUnitBytes)
	lr, ld, sq, lg := otherCostPerMillion()
	fmt.Fprintf(w, "A million new payments at list price, us-east-1, by service. DynamoDB from the units measured above; the rest is the same in every mode and computed, not measured: "+
		"Lambda arm64 at $%.2f per million invocations and $%.10f per GB-second, one invocation per %d messages, %.0f MB, %d ms billed per batch (an assumption: the gateway's latency on AWS is not known here); "+
		"SQS FIFO at $%.2f per million requests, %.1f requests per message (SendMessage, and a ReceiveMessage and a DeleteMessageBatch per batch); "+
		"CloudWatch Logs at $%.2f per GB ingested, one metrics line of about %d bytes per invocation (lambdakit writes no line per message at INFO). "+
		"CloudWatch metrics are billed per metric and month, not per message: the sample's alarm metrics are a handful per function and queue.\n\n",
		priceLambdaRequest, priceLambdaGBs, messagesPerBatch, memoryGB*1024, billedMsPerBatch, priceSQSFIFO, sqsRequestsPerMessage, priceLogsGB, emfBytesPerBatch)
	fmt.Fprintln(w, "| mode | DynamoDB | Lambda requests | Lambda duration | SQS | CloudWatch Logs | total per million |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		db := (r.New.WriteUnits*priceWRU + r.New.ReadUnits*priceRRU) / float64(r.Messages)
		fmt.Fprintf(w, "| %s | $%s | $%s | $%s | $%s | $%s | $%s |\n", r.Mode, num(db, 3), num(lr, 3), num(ld, 3), num(sq, 3), num(lg, 3), num(db+lr+ld+sq+lg, 3))
	}
	fmt.Fprintln(w)
}
