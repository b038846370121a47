package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/lambdakit/lambdakit/dynamostore"
	"github.com/lambdakit/lambdakit/dynamostore/outbox"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// Payment is the message body. Unknown fields are ignored.
type Payment struct {
	PaymentID  string      `json:"payment_id"`
	OrderID    string      `json:"order_id"`
	CustomerID string      `json:"customer_id"`
	Amount     amountField `json:"amount"` // minor units
	Currency   string      `json:"currency"`
}

// amountField is a body's amount: n, when it is a positive integer that
// fits an int64, and otherwise its JSON text as the body has it, so that
// 12.5 and "100" are reported as such. Decoded, the usual amount keeps no
// copy of its text.
type amountField struct {
	n   int64
	raw string // "" for a valid amount, or none
}

// UnmarshalJSON takes the amount's JSON text. A field named twice is
// decoded twice, the last one kept; null too is passed here, as to a
// json.RawMessage.
func (a *amountField) UnmarshalJSON(text []byte) error {
	if n, err := strconv.ParseInt(string(text), 10, 64); err == nil && n > 0 {
		*a = amountField{n: n}
		return nil
	}
	*a = amountField{raw: string(text)}
	return nil
}

// Outcome is what a payment came to. It is the handler's result, so the
// idempotency record caches it (its data, on the ledger row) and
// duplicates get it back.
type Outcome struct {
	Status   string `json:"status"` // CHARGED or DECLINED
	ChargeID string `json:"charge_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Outcome statuses as written to the payments table.
const (
	StatusCharged  = "CHARGED"
	StatusDeclined = "DECLINED"
)

// ErrInvalidPayment means the body breaks a rule of the message format. It
// will never succeed: validate marks it permanent (lambdakit.Permanent), so
// that it goes to the dead-letter queue on its first delivery when one is
// configured, and after maxReceiveCount deliveries otherwise.
var ErrInvalidPayment = errors.New("invalid payment")

// Size limits of the fields the sample stores, in bytes of UTF-8, which is
// what DynamoDB counts: an item holds at most 400 KB, the UTF-8 bytes of
// its attribute names and string values together, and a write of a larger
// one fails with a ValidationException on every try. The ledger fields
// are written after the charge, by the update that completes the
// idempotency record on the same row, so a payment too large to store
// would be charged on every delivery and never recorded. validate refuses
// it before the charge instead, as a permanent failure.
//
// The limits are business limits, far below the item's size. The one row
// holds both the ledger fields and the record, so their sizes add up. The
// ledger fields are every field of the payment and one field chosen by
// the gateway (charge_id or decline_reason, bounded by maxAnswer): the
// fields of the body come to at most about 600 bytes, the gateway's to
// about 3 × maxAnswer as DynamoDB receives them, 48 KiB. The record adds its status, lease, validation (a
// SHA-256) and expiration, about 200 bytes, and its data: the Outcome as
// JSON, whose only free text comes from the gateway, at most about
// 6 × maxAnswer (JSON escapes), 96 KiB. So the row stays under about
// 145 KiB, well under 400 KB. TestLargestValidPaymentIsStored charges and
// stores the largest payments on moto. The charge request to the gateway
// carries the payment's fields, so it is bounded too.
const (
	// maxPaymentID bounds payment_id, 1 to 128 ASCII letters, digits and
	// ._:-. Prefixed "payment#", it is the ledger's partition key and the
	// record's ID (DynamoDB allows 2,048 bytes) and, prefixed "payment-",
	// the gateway's Idempotency-Key (Stripe allows 255 characters).
	maxPaymentID = 128
	// maxOrderID bounds order_id: room for any shop's order number, a
	// UUID or a composite "shop:region:number", without letting a body
	// put a document into the ledger.
	maxOrderID = 256
	// maxCustomerID bounds customer_id: 128, SQS's limit for a
	// MessageGroupId, because the payment queue is a FIFO queue grouped
	// by customer_id (producer.GroupFromField("customer_id")): a longer
	// one could not have been sent in its customer's group.
	maxCustomerID = awsrules.MaxIDLength
	// maxAnswer bounds the fields the gateway chooses that the ledger row
	// and the Outcome store, charge_id and decline_reason, in bytes: a
	// charge_id past it is a charge the sample cannot record (it fails
	// the payment after the charge, to reconcile); a decline_reason past
	// it is cut. The SDK sends each byte of a field that is not UTF-8 as U+FFFD
	// (three bytes), and encoding the Outcome makes a field at most six
	// times as long (a '<' becomes \u003c): both are on the one row, so
	// 16 KiB gives at most about 48 + 96 KiB.
	maxAnswer = 16 << 10
	// maxAnswerRead bounds how much of an answer is read and decoded to
	// find those fields: a real gateway's charge object, its metadata
	// included, is a few KB. (Read only up to maxAnswer, one whose
	// charge_id came after 16 KiB of other fields was cut, and its charge
	// never recorded.) A 2xx answer longer than this is a charge the
	// sample cannot record, failed after the charge, to reconcile.
	maxAnswerRead = 1 << 20
)

// validPaymentID reports whether id is 1 to maxPaymentID ASCII letters,
// digits and ._:- (a loop, not a regexp: `{1,128}` compiles into 128 copies
// of the class, about 2 ms and 1,700 allocations of every cold start).
func validPaymentID(id string) bool {
	if len(id) == 0 || len(id) > maxPaymentID {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// checkText checks that a free-text field is present and at most max bytes
// of UTF-8 (encoding/json has already made it valid UTF-8). It tells the
// size it got, never the value: a body's fields stay out of the logs.
func checkText(field, v string, max int) error {
	if v == "" || len(v) > max {
		got := ""
		if v != "" {
			got = fmt.Sprintf(", got %d bytes", len(v))
		}
		return fmt.Errorf("%w: %s must be a non-empty string of at most %d bytes%s", ErrInvalidPayment, field, max, got)
	}
	return nil
}

// validCurrency reports whether c is three ASCII upper-case letters.
func validCurrency(c string) bool {
	return len(c) == 3 && isUpper(c[0]) && isUpper(c[1]) && isUpper(c[2])
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// parsePayment decodes and checks a body, naming the rule it breaks.
func parsePayment(body string) (Payment, int64, error) {
	var p Payment
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		return p, 0, fmt.Errorf("%w: body is not a JSON payment object: %v", ErrInvalidPayment, err)
	}
	if !validPaymentID(p.PaymentID) {
		return p, 0, fmt.Errorf("%w: payment_id must be 1-%d characters of letters, digits and ._:-", ErrInvalidPayment, maxPaymentID)
	}
	if err := checkText("order_id", p.OrderID, maxOrderID); err != nil {
		return p, 0, err
	}
	if err := checkText("customer_id", p.CustomerID, maxCustomerID); err != nil {
		return p, 0, err
	}
	amount := p.Amount.n
	if amount <= 0 {
		return p, 0, fmt.Errorf("%w: amount must be a positive integer in minor units, got %s", ErrInvalidPayment, clip(orMissing(p.Amount.raw)))
	}
	if !validCurrency(p.Currency) {
		return p, 0, fmt.Errorf("%w: currency must be three upper-case letters, got %q", ErrInvalidPayment, clip(p.Currency))
	}
	return p, amount, nil
}

// maxEcho bounds how much of a field's value a validation error repeats,
// and so logs: enough to recognise the mistake, too little to copy a
// payload into the logs (an amount can be any JSON value, a whole object).
const maxEcho = 32

// clip cuts v to maxEcho bytes, at a character boundary, marking the cut.
func clip(v string) string { return clipTo(v, maxEcho) }

// clipTo cuts v to n bytes, at a character boundary, marking the cut.
func clipTo(v string, n int) string {
	if len(v) <= n {
		return v
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + "…"
}

func orMissing(raw string) string {
	if raw == "" {
		return "nothing"
	}
	return raw
}

// payments charges each payment once and records the outcome.
type payments struct {
	gateway *gatewayClient
	table   string // the payments ledger
	now     func() time.Time
	// ledgerDB, if set, writes the ledger row after the charge, for a
	// store that keeps its records elsewhere (valkeystore); unset, the
	// ledger fields go onto the record's own row (dynamostore.SetItem),
	// written by the completion.
	ledgerDB dynamostore.API
	// publish, if set, publishes payment.charged to eventsQueue: on the
	// record (outbox.PublishOnRecord) or through an outbox table. It
	// takes one message, not a variadic list: called through a func
	// value, a list would be allocated for each payment.
	publish     func(context.Context, outbox.Message) error
	eventsQueue string
	// crash, if set, is called after each charge: the fault switch
	// (E2E_CRASH_AFTER_CHARGE) ends the process there.
	crash func(ctx context.Context, paymentID string, msg *events.SQSMessage)
}

// crashExitCode is the exit status of a crash on purpose: the Lambda
// runtime reports it as Runtime.ExitError.
const crashExitCode = 86

// chargedEvent is the body of a payment.charged message.
type chargedEvent struct {
	Type       string `json:"type"`
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
	ChargeID   string `json:"charge_id"`
}

// Handle implements lambdakit.Handler, behind validation and idempotency:
// it charges the payment that validate decoded.
func (s *payments) Handle(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
	v, ok := ctx.Value(validKey{}).(valid)
	if !ok {
		return nil, errors.New("payment: Handle must run behind validate")
	}
	p, amount := v.payment, v.amount
	event, err := s.checkEvent(p, amount)
	if err != nil {
		return nil, err
	}
	out, err := s.gateway.charge(ctx, p, amount)
	if errors.Is(err, ErrChargeNotRecordable) {
		// The gateway charged, and answers every retry alike (the same
		// Idempotency-Key): released, the payment would be retried until
		// dead-lettered with no trace of the charge. Past the recovery
		// point instead, its record keeps the failure, to reconcile.
		lambdakit.EffectDone(ctx, "charge not recorded: "+err.Error())
	}
	if err != nil {
		return nil, err
	}
	if out.Status == StatusCharged {
		// The recovery point: from here on no failure releases the key,
		// since a retry would charge again. A failure now (a ledger row
		// or an event refused) completes the record with the charge ID
		// and sends the message to the dead-letter queue, to reconcile.
		lambdakit.EffectDone(ctx, "charge "+out.ChargeID)
		if s.crash != nil {
			s.crash(ctx, p.PaymentID, msg)
		}
	}
	if err := s.record(ctx, p, amount, out); err != nil {
		return nil, err
	}
	// So does the event that tells the next service, on the record or
	// through the outbox: no charge recorded, no event; a charge
	// recorded, one event.
	if s.publish != nil && out.Status == StatusCharged {
		if err := s.publish(ctx, s.chargedMessage(p, withChargeID(event, out.ChargeID))); err != nil {
			return nil, err
		}
	}
	// On the batch's line for the record, beside its outcome: one line
	// per payment, written once the payment is completed (or has failed).
	// Room for all four: AddLogAttrs copies them, so the slice stays on
	// the stack.
	attrs := append(make([]slog.Attr, 0, 4), slog.String("payment_id", p.PaymentID), slog.String("payment", logStatus(out.Status)))
	if out.ChargeID != "" {
		attrs = append(attrs, slog.String("charge_id", out.ChargeID))
	}
	if out.Reason != "" {
		attrs = append(attrs, slog.String("decline_reason", out.Reason))
	}
	lambdakit.AddLogAttrs(ctx, attrs...)
	return out.encode()
}

// encode is o's JSON, as json.Marshal writes it: for the usual outcome,
// whose charge ID or reason encoding/json writes as it is (plainJSON),
// written here directly, without reflection.
func (o Outcome) encode() ([]byte, error) {
	if !plainJSON(o.Status) || !plainJSON(o.ChargeID) || !plainJSON(o.Reason) {
		return json.Marshal(o)
	}
	b := make([]byte, 0, len(`{"status":"","charge_id":"","reason":""}`)+len(o.Status)+len(o.ChargeID)+len(o.Reason))
	b = append(append(append(b, `{"status":"`...), o.Status...), '"')
	if o.ChargeID != "" {
		b = append(append(append(b, `,"charge_id":"`...), o.ChargeID...), '"')
	}
	if o.Reason != "" {
		b = append(append(append(b, `,"reason":"`...), o.Reason...), '"')
	}
	return append(b, '}'), nil
}

// logStatus is an outcome's status as the record's log line gives it:
// lower case, without a copy for the statuses the sample knows.
func logStatus(status string) string {
	switch status {
	case StatusCharged:
		return "charged"
	case StatusDeclined:
		return "declined"
	}
	return strings.ToLower(status)
}

// checkEvent fails a payment, permanently and before the charge, whose
// payment.charged event could never be published: Publish after the
// charge would refuse it (a customer_id SQS refuses as a message group
// ID, such as "cus 42" or "cus_Zoë"), and the charge would have no record
// and no event. The event is checked as it will be sent but for its
// charge_id, which only the gateway knows and whose size maxAnswer bounds
// far below what a message holds. The ledger fields need no such check:
// their strings are any UTF-8 (DynamoDB takes them), the amount an int64
// (a number DynamoDB holds), and their sizes are bounded as above.
//
// It returns the message body of the event with an empty charge_id ("" when the
// function publishes nothing), which withChargeID completes after the
// charge: the event is encoded, and escaped for SQS, once per payment.
func (s *payments) checkEvent(p Payment, amount int64) (string, error) {
	if s.publish == nil {
		return "", nil
	}
	body, err := eventBody(p, amount)
	if err != nil {
		return "", err
	}
	if err := outbox.Check(s.chargedMessage(p, body)); err != nil {
		return "", lambdakit.Permanent(fmt.Errorf("%w: its payment.charged event could not be published: %w", ErrInvalidPayment, err))
	}
	return body, nil
}

// eventBody is the message body of p's chargedEvent without a charge ID:
// its JSON as encoding/json writes it, with the characters SQS refuses
// escaped (awsrules.EscapeJSON). Fields that encoding/json writes as they
// are, and SQS takes (plainJSON), as in the usual payment, are written
// here directly, without reflection or a second pass.
func eventBody(p Payment, amount int64) (string, error) {
	if !plainJSON(p.PaymentID) || !plainJSON(p.OrderID) || !plainJSON(p.CustomerID) || !plainJSON(p.Currency) {
		js, err := json.Marshal(chargedEvent{Type: "payment.charged", PaymentID: p.PaymentID, OrderID: p.OrderID,
			CustomerID: p.CustomerID, Amount: amount, Currency: p.Currency})
		if err != nil {
			return "", err
		}
		return awsrules.EscapeJSON(string(js)), nil
	}
	var num [20]byte
	amt := strconv.AppendInt(num[:0], amount, 10)
	var b strings.Builder
	b.Grow(len(eventHead+`","order_id":"","customer_id":"","amount":,"currency":"","charge_id":`+noChargeID) +
		len(p.PaymentID) + len(p.OrderID) + len(p.CustomerID) + len(amt) + len(p.Currency))
	b.WriteString(eventHead)
	b.WriteString(p.PaymentID)
	b.WriteString(`","order_id":"`)
	b.WriteString(p.OrderID)
	b.WriteString(`","customer_id":"`)
	b.WriteString(p.CustomerID)
	b.WriteString(`","amount":`)
	b.Write(amt)
	b.WriteString(`,"currency":"`)
	b.WriteString(p.Currency)
	b.WriteString(`","charge_id":` + noChargeID)
	return b.String(), nil
}

// eventHead is how the JSON of every chargedEvent starts.
const eventHead = `{"type":"payment.charged","payment_id":"`

// checkEventsQueue checks, when the function starts, what every
// payment.charged message to queueURL shares (the queue URL, the name,
// the attributes) by outbox.Check of one such message: a queue URL the
// outbox refuses stops the function there rather than failing every
// payment, permanently, into the dead-letter queue.
func checkEventsQueue(queueURL string) error {
	msg := outbox.Message{QueueURL: queueURL, GroupID: "g", Name: "payment.charged", Body: "{}", Attributes: chargedAttributes}
	if err := outbox.Check(msg); err != nil {
		return fmt.Errorf("EVENTS_QUEUE_URL %q: %w", queueURL, err)
	}
	return nil
}

// noChargeID is how the JSON of a chargedEvent without a charge ID ends:
// charge_id is its last field.
const noChargeID = `""}`

// withChargeID is body, the message body of a chargedEvent without a
// charge ID (checkEvent's), with chargeID as its charge_id: the JSON
// encoding/json writes for the whole event, with the characters SQS
// refuses escaped (awsrules.EscapeJSON), as the body that was checked.
// The charge ID is the gateway's, known only after the charge, and may
// hold such a character (U+FFFE, say, which encoding/json leaves as it
// is). Escaping works character by character, so the checked part needs
// no second pass.
func withChargeID(body, chargeID string) string {
	head := body[:len(body)-len(noChargeID)]
	if plainJSON(chargeID) {
		// The usual ID, such as ch_3MmlLrLkdIwHu7ix: encoding/json
		// writes it as it is, and SQS takes it.
		return head + `"` + chargeID + `"}`
	}
	id, _ := json.Marshal(chargeID) // a string always encodes
	return head + awsrules.EscapeJSON(string(id)) + "}"
}

// plainJSON reports whether encoding/json writes s as it is between its
// quotes: printable ASCII but for the quote, the backslash, and the HTML
// characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// chargedMessage is the payment.charged message of p whose body is body,
// the JSON of its chargedEvent escaped for SQS (checkEvent's, or
// withChargeID's).
func (s *payments) chargedMessage(p Payment, body string) outbox.Message {
	return outbox.Message{QueueURL: s.eventsQueue, GroupID: p.CustomerID, Name: "payment.charged",
		Body: body, Attributes: chargedAttributes}
}

// chargedAttributes are the attributes of every payment.charged message:
// one map for all, which nothing writes to (the outbox copies what it
// keeps), rather than one per payment.
var chargedAttributes = map[string]string{"type": "payment.charged"}

// record writes the payment's ledger fields. On DynamoDB they go onto
// the row that is the payment's idempotency record, written by the update
// that completes it: a completed payment always has its fields, and a row
// with them is a completed payment (an in-progress row has only the
// record's attributes). With ledgerDB the row is written now, before the
// completion: a completed payment still always has its row, but a row may
// belong to a payment whose completion failed after the charge (its record
// then holds the failure, to reconcile), or whose owner crashed before
// completing it: then a takeover after the lease charges again (the
// gateway's idempotency key answers it) and writes the row again.
func (s *payments) record(ctx context.Context, p Payment, amount int64, out Outcome) error {
	fields := s.ledgerFields(p, amount, out)
	if s.ledgerDB == nil {
		return dynamostore.SetItem(ctx, fields)
	}
	fields[ledgerKeyAttr] = &types.AttributeValueMemberS{Value: ledgerKey(p.PaymentID)}
	_, err := s.ledgerDB.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: fields})
	if err != nil {
		return fmt.Errorf("payment: ledger row: %w", err)
	}
	return nil
}

// ledgerFields are the ledger row's fields of a payment, all but its key.
// Its values are made together, one allocation rather than one each:
// nothing writes to them once they are in the map.
func (s *payments) ledgerFields(p Payment, amount int64, out Outcome) map[string]types.AttributeValue {
	v := &struct {
		s [7]types.AttributeValueMemberS
		n types.AttributeValueMemberN
	}{
		s: [7]types.AttributeValueMemberS{{Value: out.Status}, {Value: p.Currency}, {Value: p.OrderID}, {Value: p.CustomerID},
			{Value: s.now().UTC().Format(time.RFC3339Nano)}, {Value: out.ChargeID}, {Value: out.Reason}},
		n: types.AttributeValueMemberN{Value: strconv.FormatInt(amount, 10)},
	}
	item := make(map[string]types.AttributeValue, 8)
	item["status"] = &v.s[0]
	item["amount"] = &v.n
	item["currency"] = &v.s[1]
	item["order_id"] = &v.s[2]
	item["customer_id"] = &v.s[3]
	item["recorded_at"] = &v.s[4]
	if out.ChargeID != "" {
		item["charge_id"] = &v.s[5]
	}
	if out.Reason != "" {
		item["decline_reason"] = &v.s[6]
	}
	return item
}

// valid is a payment that passed validate, handed down to Handle so that
// each body is decoded once.
type valid struct {
	payment Payment
	amount  int64
}

type validKey struct{}

// validate fails records whose body breaks the message rules before they
// take an idempotency lock: they can never succeed, so the failure is
// permanent.
func validate(next lambdakit.Handler) lambdakit.Handler {
	return lambdakit.HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
		p, amount, err := parsePayment(msg.Body)
		if err != nil {
			return nil, lambdakit.Permanent(err)
		}
		return next.Handle(context.WithValue(ctx, validKey{}, valid{p, amount}), msg)
	})
}

// ErrGatewayTransient means the gateway could not answer now; the record is
// retried. ErrGatewayRejected means it refused the request as malformed;
// retrying will not help.
var (
	ErrGatewayTransient = errors.New("payment gateway unavailable")
	ErrGatewayRejected  = errors.New("payment gateway rejected the request")
	// ErrChargeNotRecordable means the gateway charged (a 2xx, or a
	// redirect whose answer carries a charge_id) but its answer cannot be
	// recorded: a charge_id over maxAnswer, an answer over maxAnswerRead,
	// cut before its end, or a redirect, which is not followed. Handle
	// fails the payment after its charge, to reconcile.
	ErrChargeNotRecordable = errors.New("payment gateway charged, but its answer cannot be recorded")
)

// chargeRequest is the body of POST {base}/charges: a struct, which
// encoding/json encodes without the sorting and boxing a map costs.
type chargeRequest struct {
	PaymentID  string `json:"payment_id"`
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Amount     int64  `json:"amount"`
	Currency   string `json:"currency"`
}

// gatewayClient calls POST {base}/charges at url (chargesURL).
type gatewayClient struct {
	url  string
	http *http.Client
}

// noRedirects is client, or a copy of it, that does not follow redirects:
// the charge request, with the payment's fields and its Idempotency-Key,
// goes to the configured gateway only. Followed, a 307 or 308 would send
// the same POST to whatever host the answer names, and a 302 a GET whose
// answer could pass for a charge. charge fails such an answer as
// rejected instead (a configuration to mend, not to retry).
func noRedirects(client *http.Client) *http.Client {
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

func (g *gatewayClient) charge(ctx context.Context, p Payment, amount int64) (Outcome, error) {
	body, err := json.Marshal(chargeRequest{PaymentID: p.PaymentID, OrderID: p.OrderID, CustomerID: p.CustomerID,
		Amount: amount, Currency: p.Currency})
	if err != nil {
		return Outcome{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
	if err != nil {
		return Outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	// The same key on every retry of this payment, so the gateway itself
	// never charges twice either.
	req.Header.Set("Idempotency-Key", "payment-"+p.PaymentID)
	resp, err := g.http.Do(req)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %v", ErrGatewayTransient, err)
	}
	defer resp.Body.Close()
	// One byte more than is decoded, to tell an answer cut short.
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerRead+1))
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: reading answer: %v", ErrGatewayTransient, err)
	}
	cut := len(answer) > maxAnswerRead
	answer = answer[:min(len(answer), maxAnswerRead)]
	var parsed struct {
		ChargeID string `json:"charge_id"`
		Error    string `json:"error"`
	}
	_ = json.Unmarshal(answer, &parsed) // a body that is not JSON leaves the fields empty
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if cut {
			return Outcome{}, fmt.Errorf("%w: %d answer of more than %d bytes", ErrChargeNotRecordable, code, maxAnswerRead)
		}
		if parsed.ChargeID == "" {
			return Outcome{}, fmt.Errorf("%w: %d answer without charge_id", ErrGatewayTransient, code)
		}
		if len(parsed.ChargeID) > maxAnswer {
			return Outcome{}, fmt.Errorf("%w: %d answer with a charge_id of %d bytes (%s), over the %d the ledger keeps",
				ErrChargeNotRecordable, code, len(parsed.ChargeID), clip(parsed.ChargeID), maxAnswer)
		}
		return Outcome{Status: StatusCharged, ChargeID: parsed.ChargeID}, nil
	case code >= 300 && code < 400 && parsed.ChargeID != "":
		// A 303 after the charge, say: the gateway charged, and the
		// redirect that would confirm it is not followed.
		return Outcome{}, fmt.Errorf("%w: HTTP %d, a redirect to %q whose answer carries charge_id %s; redirects are not followed",
			ErrChargeNotRecordable, code, resp.Header.Get("Location"), clip(parsed.ChargeID))
	case code >= 300 && code < 400:
		return Outcome{}, fmt.Errorf("%w: HTTP %d, a redirect to %q, which is not followed: set PAYMENT_GATEWAY_URL to the gateway itself", ErrGatewayRejected, code, resp.Header.Get("Location"))
	case code == http.StatusPaymentRequired:
		return Outcome{Status: StatusDeclined, Reason: reason(parsed.Error, answer)}, nil
	case code >= 500, code == http.StatusConflict, code == http.StatusTooManyRequests, code == http.StatusRequestTimeout:
		return Outcome{}, fmt.Errorf("%w: HTTP %d: %s", ErrGatewayTransient, code, reason(parsed.Error, answer))
	default:
		return Outcome{}, fmt.Errorf("%w: HTTP %d: %s", ErrGatewayRejected, code, reason(parsed.Error, answer))
	}
}

// reason is the gateway's reason for an answer: its error field, or the
// answer itself, cut to maxAnswer bytes (and the mark of the cut).
func reason(parsed string, raw []byte) string {
	if parsed == "" {
		parsed = string(bytes.TrimSpace(raw))
	}
	return clipTo(parsed, maxAnswer)
}
