package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/testenv"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

func TestPaymentIsChargedOnceAndRecorded(t *testing.T) {
	f := setup(t, nil)
	msg := lambdakittest.Message(body("pay_1", "cus_1", 1299))
	if failed := f.run(t, msg); len(failed) != 0 {
		t.Fatalf("got failures %v; want none", failed)
	}
	// The ledger row is the record: one PutItem for the lock, one
	// UpdateItem that completes it with the ledger fields, nothing else.
	if f.calls.Total() != 2 || f.calls.Count("PutItem") != 1 || f.calls.Count("UpdateItem") != 1 {
		t.Errorf("got DynamoDB calls %v; want 1 PutItem and 1 UpdateItem", f.calls.Counts())
	}
	row := f.ledger(t, "pay_1")
	if attr(row, "status") != StatusCharged || attr(row, "charge_id") == "" || attr(row, "amount") != "1299" ||
		attr(row, "currency") != "EUR" || attr(row, "order_id") != "ord_1" || attr(row, "customer_id") != "cus_1" || attr(row, "recorded_at") == "" {
		t.Errorf("got ledger row %v; want CHARGED with charge and payment fields", row)
	}

	t.Run("redelivered and resent copies never reach the gateway", func(t *testing.T) {
		f.calls.Reset()
		resent := lambdakittest.Message(body("pay_1", "cus_1", 1299))
		failed := f.run(t, lambdakittest.Redelivery(msg), resent, lambdakittest.Redelivery(resent))
		if len(failed) != 0 {
			t.Fatalf("got failures %v; want duplicates to succeed", failed)
		}
		if n := len(f.gw.Charges()); n != 1 || f.gw.Requests() != 1 {
			t.Errorf("got %d charges, %d gateway requests; want 1 and 1", n, f.gw.Requests())
		}
	})
}

// The payment ID's rule at its edges: 128 characters of every allowed
// kind are a valid ID, and each is charged under its own ID.
func TestPaymentIDsAtTheRuleEdgesAreCharged(t *testing.T) {
	f := setup(t, nil)
	ids := []string{"p", strings.Repeat("a", 118) + "Z9._:-ab-c", "A.b_C:d-0"}
	var msgs []events.SQSMessage
	for _, id := range ids {
		msgs = append(msgs, lambdakittest.Message(body(id, "cus_1", 100)))
	}
	if failed := f.run(t, msgs...); len(failed) != 0 {
		t.Fatalf("got failures %v; want none", failed)
	}
	if n := len(f.gw.Charges()); n != len(ids) {
		t.Errorf("got %d charges; want %d", n, len(ids))
	}
	for _, id := range ids {
		if row := f.ledger(t, id); attr(row, "status") != StatusCharged {
			t.Errorf("payment %q: got ledger row %v; want CHARGED", id, row)
		}
	}
}

// A payment is one log line: the batch's line for the record, with the
// payment's own fields beside its outcome, not a second line (a second
// write) of the function's own.
func TestPaymentIsOneLogLine(t *testing.T) {
	f := setup(t, nil)
	charged := lambdakittest.Message(body("pay_line", "cus_1", 100))
	if failed := f.run(t, charged); len(failed) != 0 {
		t.Fatalf("got failures %v; want none", failed)
	}
	var mine []map[string]any
	for _, l := range f.logs.Lines(t) {
		if l["messageId"] == charged.MessageId {
			mine = append(mine, l)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("got %d lines for the record %v; want 1", len(mine), mine)
	}
	l := mine[0]
	if l["msg"] != "message done" || l["outcome"] != "processed" || l["payment_id"] != "pay_line" ||
		l["payment"] != "charged" || l["charge_id"] != attr(f.ledger(t, "pay_line"), "charge_id") {
		t.Errorf("got line %v; want message done, processed, with payment_id, payment charged and the charge's ID", l)
	}
}

func TestPaymentDeclineIsRecordedNotRetried(t *testing.T) {
	f := setup(t, nil)
	msg := lambdakittest.Message(body("pay_d", gateway.DeclinedCustomerPrefix+"_1", 500))
	if failed := f.run(t, msg); len(failed) != 0 {
		t.Fatalf("got failures %v; want a decline to succeed", failed)
	}
	row := f.ledger(t, "pay_d")
	if attr(row, "status") != StatusDeclined || attr(row, "decline_reason") != "card_declined" || attr(row, "charge_id") != "" {
		t.Errorf("got ledger row %v; want DECLINED with reason card_declined", row)
	}
	if failed := f.run(t, lambdakittest.Redelivery(msg)); len(failed) != 0 || f.gw.Requests() != 1 {
		t.Errorf("duplicate of a decline: got failures %v, %d gateway requests; want none and 1", failed, f.gw.Requests())
	}
}

func TestPaymentTransientGatewayFailureIsRetried(t *testing.T) {
	f := setup(t, nil)
	f.gw.FailNext(1)
	msg := lambdakittest.Message(body("pay_t", "cus_1", 100))
	if failed := f.run(t, msg); !failed[msg.MessageId] {
		t.Fatal("got success on a 503; want the record to fail")
	}
	if row := f.ledger(t, "pay_t"); row != nil {
		t.Errorf("got ledger row %v after a transient failure; want none", row)
	}
	if n := f.idempotencyRecords(t); n != 0 {
		t.Errorf("got %d idempotency records; want the lock released", n)
	}
	if failed := f.run(t, lambdakittest.Redelivery(msg)); len(failed) != 0 {
		t.Fatalf("retry: got failures %v; want success", failed)
	}
	if n := len(f.gw.Charges()); n != 1 || attr(f.ledger(t, "pay_t"), "status") != StatusCharged {
		t.Errorf("got %d charges; want 1 and a CHARGED row", n)
	}
}

// A gateway that answers with a redirect is not followed: the charge
// request, with the payment's fields and its Idempotency-Key, goes to the
// configured URL only, never to a host the answer names (a 307 or 308
// would send the same POST there; a 302 a GET whose answer could pass for
// a charge). The payment fails as rejected, naming the redirect, and
// nothing is charged or recorded.
func TestPaymentGatewayRedirectIsNotFollowed(t *testing.T) {
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var elsewhere atomic.Int32
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				elsewhere.Add(1)
				fmt.Fprint(w, `{"charge_id":"ch_elsewhere"}`)
			}))
			defer other.Close()
			f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other.URL+"/charges", code)
			}))
			msg := lambdakittest.Message(body("pay_redirect", "cus_1", 100))
			if failed := f.run(t, msg); !failed[msg.MessageId] {
				t.Fatal("got success; want the record to fail")
			}
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("the host the redirect named got %d requests; want none", n)
			}
			if line := findLog(t, f.logs, "message failed"); !strings.Contains(line, ErrGatewayRejected.Error()) || !strings.Contains(line, "redirect") {
				t.Errorf("got log %s; want the payment rejected, naming the redirect", line)
			}
			if row := f.ledger(t, "pay_redirect"); row != nil {
				t.Errorf("got ledger row %v; want nothing recorded", row)
			}
		})
	}
}

// A redirect whose answer carries a charge_id (a 303 See Other after the
// charge, as some APIs answer a POST) says the gateway charged: it is not
// followed, so the charge cannot be confirmed and recorded, and the
// payment fails after its charge, kept to reconcile, not released to be
// retried until dead-lettered with no trace of the charge.
func TestPaymentGatewayRedirectAfterAChargeIsKeptToReconcile(t *testing.T) {
	f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/charges/ch_303")
		w.WriteHeader(http.StatusSeeOther)
		fmt.Fprint(w, `{"charge_id":"ch_303"}`)
	}))
	msg := lambdakittest.Message(body("pay_303", "cus_1", 100))
	failed := f.run(t, msg)
	recs := f.records(t)
	if !failed[msg.MessageId] || len(recs) != 1 || !strings.HasPrefix(attr(recs[0], "effect"), "charge not recorded: ") {
		t.Fatalf("failures %v, %d records; want the record failed after its charge, its effect the charge not recorded", failed, len(recs))
	}
	if row := f.ledger(t, "pay_303"); attr(row, "status") == StatusCharged {
		t.Errorf("got ledger status %q; want no charge recorded as CHARGED", attr(row, "status"))
	}
}

// A gateway's charge object may be larger than the fields the ledger
// keeps (metadata, say): the charge_id is found after 40 KiB of other
// fields, and the charge recorded, not retried for ever as an answer
// without one. A charge the ledger cannot keep, its charge_id over the
// bound or its answer over what is read (the charge_id before the cut),
// is failed after the charge, its record kept to reconcile: released, it
// would be retried until dead-lettered with no trace of the charge, since
// the gateway answers every retry alike (the same Idempotency-Key).
func TestPaymentGatewayAnswerLargerThanTheFieldsKept(t *testing.T) {
	metadata := func(n int) string { return fmt.Sprintf(`{"metadata":%q,"charge_id":"ch_big"}`, strings.Repeat("m", n)) }
	for _, c := range []struct {
		name, answer string
		charged      bool
	}{
		{"a charge_id after 40 KiB of metadata", metadata(40 << 10), true},
		{"a charge_id over the ledger's bound", fmt.Sprintf(`{"charge_id":%q}`, strings.Repeat("c", maxAnswer+1)), false},
		{"a charge_id before the cut of an answer over the bytes read", `{"charge_id":"ch_big","metadata":"` + strings.Repeat("m", maxAnswerRead) + `"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, c.answer)
			}))
			f.handler = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, f.logs.Logger()) // 1 MiB, under load
			msg := lambdakittest.Message(body("pay_bigansw", "cus_1", 100))
			failed := f.run(t, msg)
			row := f.ledger(t, "pay_bigansw")
			if c.charged {
				if len(failed) != 0 || attr(row, "charge_id") != "ch_big" {
					t.Fatalf("failures %v, ledger charge_id %q; want the charge recorded with ch_big", failed, attr(row, "charge_id"))
				}
				return
			}
			recs := f.records(t)
			if !failed[msg.MessageId] || row == nil || len(recs) != 1 || !strings.HasPrefix(attr(recs[0], "effect"), "charge not recorded: ") {
				t.Fatalf("failures %v, %d records (effect %q); want the record failed after its charge, its effect the charge not recorded",
					failed, len(recs), attr(row, "effect"))
			}
			if line := findLog(t, f.logs, "message failed"); !strings.Contains(line, ErrChargeNotRecordable.Error()) {
				t.Errorf("got log %.400s; want the charge not recorded", line)
			}
			if attr(row, "status") == StatusCharged || attr(row, "charge_id") != "" {
				t.Errorf("got ledger status %q; want no charge recorded as CHARGED", attr(row, "status"))
			}
		})
	}
}

func TestPaymentGatewayAnswers(t *testing.T) {
	cases := []struct {
		name   string
		status int
		answer string
		want   error
	}{
		{"409 is transient", http.StatusConflict, `{"error":"request in flight"}`, ErrGatewayTransient},
		{"429 is transient", http.StatusTooManyRequests, `{"error":"slow down"}`, ErrGatewayTransient},
		{"500 is transient", http.StatusInternalServerError, `oops`, ErrGatewayTransient},
		{"400 is rejected with the gateway's reason", http.StatusBadRequest, `{"error":"currency not supported"}`, ErrGatewayRejected},
		{"2xx without charge_id is transient", http.StatusOK, `{}`, ErrGatewayTransient},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.answer)
			}))
			msg := lambdakittest.Message(body("pay_x", "cus_1", 100))
			if failed := f.run(t, msg); !failed[msg.MessageId] {
				t.Fatal("got success; want the record to fail")
			}
			line := findLog(t, f.logs, "message failed")
			if !strings.Contains(line, c.want.Error()) {
				t.Errorf("got log %s; want reason %q", line, c.want)
			}
			if c.want == ErrGatewayRejected && !strings.Contains(line, "currency not supported") {
				t.Errorf("got log %s; want the gateway's reason", line)
			}
			if row := f.ledger(t, "pay_x"); row != nil {
				t.Errorf("got ledger row %v; want nothing recorded", row)
			}
			if n := f.idempotencyRecords(t); n != 0 {
				t.Errorf("got %d idempotency records; want the lock released", n)
			}
		})
	}
	t.Run("timeout is transient", func(t *testing.T) {
		release := make(chan struct{})
		f := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}))
		defer close(release)
		msg := lambdakittest.Message(body("pay_slow", "cus_1", 100))
		if failed := f.run(t, msg); !failed[msg.MessageId] {
			t.Fatal("got success; want the record to fail")
		}
		if line := findLog(t, f.logs, "message failed"); !strings.Contains(line, ErrGatewayTransient.Error()) {
			t.Errorf("got log %s; want a transient failure", line)
		}
	})
}

func TestPaymentPayloadMismatchChargesNothing(t *testing.T) {
	f := setup(t, nil)
	if failed := f.run(t, lambdakittest.Message(body("pay_m", "cus_1", 100))); len(failed) != 0 {
		t.Fatal(failed)
	}
	for _, changed := range []string{
		body("pay_m", "cus_1", 999),
		body("pay_m", "cus_2", 100),
		strings.Replace(body("pay_m", "cus_1", 100), "EUR", "USD", 1),
		strings.Replace(body("pay_m", "cus_1", 100), "ord_1", "ord_2", 1),
	} {
		msg := lambdakittest.Message(changed)
		if failed := f.run(t, msg); !failed[msg.MessageId] {
			t.Errorf("%s: got success; want a payload mismatch failure", changed)
		}
	}
	// An extra field is not part of the payment.
	if failed := f.run(t, lambdakittest.Message(strings.Replace(body("pay_m", "cus_1", 100), "{", `{"note":"resent",`, 1))); len(failed) != 0 {
		t.Errorf("extra field: got failures %v; want a duplicate", failed)
	}
	if f.gw.Requests() != 1 || attr(f.ledger(t, "pay_m"), "amount") != "100" {
		t.Errorf("got %d gateway requests; want 1 and the original amount kept", f.gw.Requests())
	}
	if n := strings.Count(f.logs.String(), "different payload"); n != 4 {
		t.Errorf("got %d payload mismatch log lines; want 4", n)
	}
}

func TestPaymentInvalidBodiesFailBeforeAnyCall(t *testing.T) {
	valid := body("pay_v", "cus_1", 100)
	cases := map[string]struct{ body, rule string }{
		"not JSON":          {`{"payment_id": "pay_v"`, "not a JSON payment object"},
		"missing id":        {strings.Replace(valid, `"payment_id":"pay_v",`, "", 1), "payment_id must be"},
		"id too long":       {strings.Replace(valid, "pay_v", strings.Repeat("x", 129), 1), "payment_id must be"},
		"id bad characters": {strings.Replace(valid, "pay_v", "pay v", 1), "payment_id must be"},
		"id non-ASCII":      {strings.Replace(valid, "pay_v", "pay_é", 1), "payment_id must be"},
		"id slash":          {strings.Replace(valid, "pay_v", "pay/v", 1), "payment_id must be"},
		"no order":          {strings.Replace(valid, `"ord_1"`, `""`, 1), "order_id must be"},
		"no customer":       {strings.Replace(valid, `"cus_1"`, `""`, 1), "customer_id must be"},
		"negative amount":   {strings.Replace(valid, "100", "-5", 1), "amount must be a positive integer"},
		"zero amount":       {strings.Replace(valid, "100", "0", 1), "amount must be a positive integer"},
		"fractional amount": {strings.Replace(valid, "100", "12.5", 1), "amount must be a positive integer"},
		"string amount":     {strings.Replace(valid, "100", `"100"`, 1), "amount must be a positive integer"},
		"missing amount":    {strings.Replace(valid, `"amount":100,`, "", 1), "amount must be a positive integer"},
		"lower currency":    {strings.Replace(valid, "EUR", "eur", 1), "currency must be three upper-case letters"},
		"long currency":     {strings.Replace(valid, "EUR", "EURO", 1), "currency must be three upper-case letters"},
		"short currency":    {strings.Replace(valid, "EUR", "EU", 1), "currency must be three upper-case letters"},
		"currency digit":    {strings.Replace(valid, "EUR", "EU1", 1), "currency must be three upper-case letters"},
	}
	f := setup(t, nil)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f.logs.Reset()
			f.calls.Reset()
			msg := lambdakittest.Message(c.body)
			ok := lambdakittest.Message(body("pay_ok_"+strings.ReplaceAll(name, " ", "_"), "cus_1", 1))
			failed := f.run(t, msg, ok)
			if !failed[msg.MessageId] || failed[ok.MessageId] {
				t.Fatalf("got failures %v; want only the invalid record", failed)
			}
			if line := findLog(t, f.logs, "message failed"); !strings.Contains(line, c.rule) || !strings.Contains(line, msg.MessageId) {
				t.Errorf("got log %s; want the rule %q and the messageId", line, c.rule)
			}
			if n := f.calls.Total(); n != 2 { // the valid record's lock and completion
				t.Errorf("got %d DynamoDB calls; want only the valid record's 2", n)
			}
		})
	}
	if n := f.gw.Requests(); n != len(cases) {
		t.Errorf("got %d gateway requests; want %d (the valid records only)", n, len(cases))
	}
}

func TestPaymentFIFOGroupStopsAtFailure(t *testing.T) {
	f := setup(t, nil)
	a1 := lambdakittest.Message(body("pay_a1", "cus_A", 100), lambdakittest.InGroup("cus_A"))
	a2 := lambdakittest.Message(`not json`, lambdakittest.InGroup("cus_A"))
	a3 := lambdakittest.Message(body("pay_a3", "cus_A", 300), lambdakittest.InGroup("cus_A"))
	b1 := lambdakittest.Message(body("pay_b1", "cus_B", 100), lambdakittest.InGroup("cus_B"))
	failed := f.run(t, a1, b1, a2, a3)
	if len(failed) != 2 || !failed[a2.MessageId] || !failed[a3.MessageId] {
		t.Errorf("got failures %v; want the poison record and the one after it in its group", failed)
	}
	if f.ledger(t, "pay_a3") != nil || f.ledger(t, "pay_a1") == nil || f.ledger(t, "pay_b1") == nil {
		t.Error("want pay_a1 and pay_b1 recorded, pay_a3 not attempted")
	}
}

func TestPaymentConcurrentDuplicatesChargeOnce(t *testing.T) {
	// Ten function instances (each its own warm container) get the same
	// payment at once; those that find it in progress fail and come back.
	f := setup(t, nil)
	instances := make([]func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), 10)
	for i := range instances {
		instances[i] = mustHandler(t, f.cfg, f.db, &http.Client{Timeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	}
	msg := lambdakittest.Message(body("pay_c", "cus_1", 700))
	pending := instances
	for round := 0; len(pending) > 0; round++ {
		if round == 20 {
			t.Fatalf("%d instances still failing after 20 rounds", len(pending))
		}
		var mu sync.Mutex
		var again []func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)
		var wg sync.WaitGroup
		for _, h := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				resp, _ := h(ctx, lambdakittest.Event(lambdakittest.Redelivery(msg)))
				if len(resp.BatchItemFailures) > 0 {
					mu.Lock()
					again = append(again, h)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		pending = again
	}
	if n := len(f.gw.Charges()); n != 1 {
		t.Errorf("got %d charges; want 1", n)
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example"}
	c, err := configFromEnv(func(k string) string { return env[k] })
	if err != nil || c.PaymentsTable != "pay" || c.GatewayURL != "https://gw.example" {
		t.Fatalf("got %+v, %v; want the environment read", c, err)
	}
	_, err = configFromEnv(func(k string) string {
		return map[string]string{"PAYMENT_GATEWAY_URL": "ftp://x"}[k]
	})
	for _, want := range []string{"PAYMENTS_TABLE is not set", "not an http(s) URL"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v; want it to say %q", err, want)
		}
	}
}

// findLog returns the one log line whose msg is msg, as JSON text.
func findLog(tb testing.TB, logs *lambdakittest.LogBuffer, msg string) string {
	tb.Helper()
	var found []string
	for _, l := range logs.Lines(tb) {
		if l["msg"] == msg {
			b, _ := json.Marshal(l)
			found = append(found, string(b))
		}
	}
	if len(found) != 1 {
		tb.Fatalf("got %d %q log lines in %s; want 1", len(found), msg, logs.String())
	}
	return found[0]
}

// A body that names a field twice, in different case, could be locked under
// one payment and charged as another (encoding/json decodes the variant
// into the struct). It fails before any lock or charge; the genuine payment
// is charged later as usual.
func TestPaymentFieldNamedTwiceInOtherCaseFails(t *testing.T) {
	f := setup(t, nil)
	for _, tricky := range []string{
		`{"payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":100,"currency":"EUR","PAYMENT_ID":"pay_2"}`,
		`{"payment_id":"pay_1","order_id":"ord_1","customer_id":"cus_1","amount":100,"currency":"EUR","AMOUNT":999999}`,
	} {
		msg := lambdakittest.Message(tricky)
		if failed := f.run(t, msg); !failed[msg.MessageId] {
			t.Errorf("%s: got success; want the record to fail", tricky)
		}
	}
	if n := f.gw.Requests(); n != 0 {
		t.Errorf("got %d gateway requests; want none", n)
	}
	genuine := lambdakittest.Message(body("pay_1", "cus_1", 100))
	if failed := f.run(t, genuine); len(failed) != 0 {
		t.Fatalf("genuine payment: got failures %v", failed)
	}
	if c := f.gw.Charges(); len(c) != 1 || c[0].PaymentID != "pay_1" || c[0].Amount != 100 {
		t.Errorf("got charges %+v; want pay_1 once, 100", c)
	}
}

// Two payments with one payment_id, for different customers, each followed
// by "customer_id":null. parsePayment (encoding/json into Payment) sees
// cus_A and cus_B, both valid, though a map would see customer_id null in
// both. The second must not be taken for a duplicate of the first and
// answered with its charge (cus_B never charged, no mismatch raised): it
// fails as a reused key with a different payload (ErrPayloadMismatch), as it
// does without the nulls, or the first is already refused for naming a
// field twice.
func TestPaymentForAnotherCustomerIsNotTakenForADuplicate(t *testing.T) {
	f := setup(t, nil)
	first := lambdakittest.Message(`{"payment_id":"pay_n","order_id":"ord_1","customer_id":"cus_A","customer_id":null,"amount":100,"currency":"EUR"}`)
	second := lambdakittest.Message(`{"payment_id":"pay_n","order_id":"ord_1","customer_id":"cus_B","customer_id":null,"amount":100,"currency":"EUR"}`)
	for _, m := range []string{first.Body, second.Body} {
		p, _, err := parsePayment(m)
		if err != nil {
			t.Fatalf("premise: %s is refused: %v", m, err)
		}
		t.Logf("handler decodes customer %q", p.CustomerID)
	}
	// A field named twice is refused by payload validation, so the first
	// already fails, charging nothing; if it went through, the second must
	// fail as a mismatch. Either way cus_B is never answered with cus_A's
	// charge.
	if failed := f.run(t, first); len(failed) != 0 {
		if n := len(f.gw.Charges()); n != 0 {
			t.Fatalf("first payment failed after %d charges; want a refusal before any", n)
		}
	}
	failed := f.run(t, second)
	charges := f.gw.Charges()
	if !failed[second.MessageId] {
		t.Errorf("payment for cus_B reported done with %d gateway charge(s) %+v, the ledger row says customer %q; want it failed as a payload mismatch",
			len(charges), charges, attr(f.ledger(t, "pay_n"), "customer_id"))
	}
}

func TestConfigBackoffNeedsQueueAndVisibility(t *testing.T) {
	base := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example"}
	env := func(extra map[string]string) func(string) string { return envWith(base, extra) }
	c, err := configFromEnv(env(map[string]string{"SOURCE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q.fifo", "QUEUE_VISIBILITY_TIMEOUT": "360"}))
	if err != nil || c.Visibility != 360*time.Second {
		t.Errorf("got %v, visibility %v; want 360s", err, c.Visibility)
	}
	for _, extra := range []map[string]string{{"SOURCE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q.fifo"}, {"QUEUE_VISIBILITY_TIMEOUT": "360"},
		{"SOURCE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q.fifo", "QUEUE_VISIBILITY_TIMEOUT": "6m"}} {
		if _, err := configFromEnv(env(extra)); err == nil {
			t.Errorf("%v: got no error; want a refusal", extra)
		}
	}
}

// The fault switch of the end-to-end story (E2E_CRASH_AFTER_CHARGE) ends
// the process right after the gateway charged the payment it names, on
// that payment's first delivery only: a redelivery, and other payments,
// run as usual.
func TestCrashSwitchEndsTheProcessAfterTheChargeOnFirstDeliveryOnly(t *testing.T) {
	f := setup(t, nil)
	var exits []string // the charges made when exit was called, and its code
	handler := func(crashAfter string) {
		c := f.cfg
		c.CrashAfterCharge = crashAfter
		c.exit = func(code int) {
			exits = append(exits, fmt.Sprintf("exit %d after %d charges", code, len(f.gw.Charges())))
		}
		f.handler = mustHandler(t, c, f.db, &http.Client{Timeout: time.Second}, f.logs.Logger())
	}
	handler("pay_again")
	f.run(t, lambdakittest.Message(body("pay_other", "cus_1", 100)))
	f.run(t, lambdakittest.Redelivery(lambdakittest.Message(body("pay_again", "cus_2", 100))))
	if len(exits) != 0 {
		t.Fatalf("exit called (%v) for another payment or a redelivery; want neither", exits)
	}
	handler("pay_crash")
	f.run(t, lambdakittest.Message(body("pay_crash", "cus_3", 100)))
	if want := []string{"exit 86 after 3 charges"}; !slices.Equal(exits, want) {
		t.Errorf("got %v; want %v: once, after the gateway charged the payment", exits, want)
	}
}

// The switch fires only in the function it names: naming another, or
// holding no payment ID, is a configuration error.
func TestConfigCrashSwitchNamesThisFunction(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"lambdakit-e2e-PaymentFunction-x1:pay_9", ""},
		{"prod-PaymentFunction-y2:pay_9", `names function "prod-PaymentFunction-y2", not this one`},
		{"lambdakit-e2e-PaymentFunction-x1", "want <function name>:<payment_id>"},
		{"lambdakit-e2e-PaymentFunction-x1:pay 9", "want <function name>:<payment_id>"},
	} {
		env := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example",
			"AWS_LAMBDA_FUNCTION_NAME": "lambdakit-e2e-PaymentFunction-x1", "E2E_CRASH_AFTER_CHARGE": tc.value}
		c, err := configFromEnv(func(k string) string { return env[k] })
		if tc.want == "" {
			if err != nil || c.CrashAfterCharge != "pay_9" {
				t.Errorf("%s: got %q, %v; want pay_9", tc.value, c.CrashAfterCharge, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tc.want) || c.CrashAfterCharge != "" {
			t.Errorf("%s: got %q, %v; want no switch and an error saying %q", tc.value, c.CrashAfterCharge, err, tc.want)
		}
	}
}

// PAYMENT_GATEWAY_URL may carry a path, a trailing slash and a query (the
// template accepts "https://gw/v1?region=eu"): the charge goes to the path's
// /charges, with the query. Appended as text, "/charges" would land in the
// query ("/v1?region=eu/charges") or after a double slash ("/v1//charges").
func TestPaymentGatewayURLWithPathAndQueryPostsToItsCharges(t *testing.T) {
	var got []string // the path and query of each request
	var f *fixture
	f = setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path+"?"+r.URL.RawQuery)
		http.StripPrefix("/v1", f.gw).ServeHTTP(w, r)
	}))
	base := f.cfg.GatewayURL
	for i, tc := range []struct{ suffix, want string }{
		{"/v1?region=eu", "/v1/charges?region=eu"},
		{"/v1/", "/v1/charges?"},
		{"/v1/?region=eu&x=1", "/v1/charges?region=eu&x=1"},
	} {
		got = nil
		c := f.cfg
		c.GatewayURL = base + tc.suffix
		f.handler = mustHandler(t, c, f.db, &http.Client{Timeout: time.Second}, f.logs.Logger())
		id := fmt.Sprintf("pay_url_%d", i)
		failed := f.run(t, lambdakittest.Message(body(id, "cus_1", 100)))
		if len(failed) != 0 || len(got) != 1 || got[0] != tc.want || attr(f.ledger(t, id), "status") != StatusCharged {
			t.Errorf("%s: got requests %q, failed %v, ledger %v; want one to %s and CHARGED", tc.suffix, got, failed, f.ledger(t, id), tc.want)
		}
	}
}

// A setting the function would act on only after a charge is refused at
// start: a table name DynamoDB refuses (with the records on Valkey, the
// ledger row is written after the charge), a queue given by name or with a
// stray space (the event is committed with the charge, sent later), or a
// gateway URL with a fragment or credentials.
func TestConfigRefusesSettingsThatFailOnlyAfterTheCharge(t *testing.T) {
	base := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example/v1"}
	env := func(extra map[string]string) func(string) string { return envWith(base, extra) }
	queue := "https://sqs.eu-west-1.amazonaws.com/123456789012/payments-events.fifo"
	for name, tc := range map[string]struct {
		extra map[string]string
		want  string
	}{
		"table with a space, Valkey": {map[string]string{"PAYMENTS_TABLE": "payments ", "IDEMPOTENCY_VALKEY_ADDR": "a:6379"}, "PAYMENTS_TABLE"},
		"table name too short":       {map[string]string{"PAYMENTS_TABLE": "p"}, "PAYMENTS_TABLE"},
		"outbox table with a slash":  {map[string]string{"OUTBOX_TABLE": "out/box", "EVENTS_QUEUE_URL": queue}, "OUTBOX_TABLE"},
		"events queue by name":       {map[string]string{"EVENTS_QUEUE_URL": "payments-events.fifo"}, "EVENTS_QUEUE_URL"},
		"events queue by ARN":        {map[string]string{"EVENTS_QUEUE_URL": "arn:aws:sqs:eu-west-1:123456789012:payments-events.fifo"}, "EVENTS_QUEUE_URL"},
		"events queue with a space":  {map[string]string{"EVENTS_QUEUE_URL": queue + " "}, "EVENTS_QUEUE_URL"},
		"source queue by name":       {map[string]string{"SOURCE_QUEUE_URL": "payments.fifo", "QUEUE_VISIBILITY_TIMEOUT": "360"}, "SOURCE_QUEUE_URL"},
		"gateway URL with fragment":  {map[string]string{"PAYMENT_GATEWAY_URL": "https://gw.example/v1#charges"}, "fragment"},
		"gateway URL with user":      {map[string]string{"PAYMENT_GATEWAY_URL": "https://key:secret@gw.example/v1"}, "credentials"},
	} {
		_, err := configFromEnv(env(tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v; want an error naming %s", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error %q repeats the credentials", name, err)
		}
	}
	for _, table := range []string{"pay", "lambdakit-PaymentsTable-1A2B3C.v2_x", "arn:aws:dynamodb:eu-west-1:123456789012:table/payments"} {
		if _, err := configFromEnv(env(map[string]string{"PAYMENTS_TABLE": table, "EVENTS_QUEUE_URL": queue})); err != nil {
			t.Errorf("PAYMENTS_TABLE %q: got %v; want it accepted", table, err)
		}
	}
}

// Without a region every AWS call fails, and with the records on Valkey
// the first DynamoDB write comes after the charge: the function refuses to
// start instead. Lambda always sets AWS_REGION; a copy run elsewhere may not.
func TestFunctionWithoutRegionRefusesToStart(t *testing.T) {
	bootstrap := testenv.Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bootstrap)
	dir := t.TempDir()
	cmd.Env = []string{"PAYMENTS_TABLE=pay", "PAYMENT_GATEWAY_URL=https://gw.example", "HOME=" + dir,
		"AWS_CONFIG_FILE=" + dir + "/none", "AWS_SHARED_CREDENTIALS_FILE=" + dir + "/none",
		"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no AWS region") {
		t.Errorf("got %v and %q; want exit 1 saying no AWS region", err, out)
	}
}

// Handle's result, which the record caches and duplicates get back, is
// the JSON encoding/json writes for the Outcome, byte for byte, whether
// encode writes it itself (a plain charge ID or reason) or not.
func TestOutcomeEncodesAsJSONMarshal(t *testing.T) {
	var outcomes []Outcome
	for _, v := range []string{"", "ch_3MmlLrLkdIwHu7ix", "card_declined: insufficient funds", `"q"\`, "<a&b>", "\t\x1f\x7f", "é", "\u2028", "\ufffe", "\xff"} {
		outcomes = append(outcomes, Outcome{Status: StatusCharged, ChargeID: v}, Outcome{Status: StatusDeclined, Reason: v},
			Outcome{Status: "ODD<", ChargeID: v, Reason: v})
	}
	for _, o := range outcomes {
		want, _ := json.Marshal(o)
		if got, err := o.encode(); err != nil || string(got) != string(want) {
			t.Errorf("%+v: got %s (%v); want %s", o, got, err, want)
		}
	}
}
