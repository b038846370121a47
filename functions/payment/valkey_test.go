package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
	"github.com/lambdakit/lambdakit/valkeystore"
)

// The sample with its idempotency records on a real redis-server (the
// ledger stays on DynamoDB): every payment is charged once, has its ledger
// row, and its duplicates, resent or redelivered, charge nothing.
func TestPaymentsOnValkey(t *testing.T) {
	f := setup(t, nil)
	srv := redisserver.ForTest(t)
	c := f.cfg
	c.ValkeyAddrs = []string{srv.Addr}
	vk, err := newValkey(t.Context(), c, aws.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vk.Close)
	h, err := newHandler(c, f.db, vk, &http.Client{Timeout: 300 * time.Millisecond}, f.logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	f.handler = h
	var msgs []events.SQSMessage
	for i := range 5 {
		msgs = append(msgs, lambdakittest.Message(body(fmt.Sprintf("pay_vk_%d", i), "cus_1", 100+i)))
	}
	if failed := f.run(t, msgs...); len(failed) != 0 {
		t.Fatalf("first delivery: failed %v\n%s", failed, f.logs.String())
	}
	resent := lambdakittest.Message(msgs[0].Body) // the producer sent it twice
	again := []events.SQSMessage{resent}
	for _, m := range msgs {
		again = append(again, lambdakittest.Redelivery(m))
	}
	if failed := f.run(t, again...); len(failed) != 0 {
		t.Fatalf("duplicates: failed %v", failed)
	}
	if n := len(f.gw.Charges()); n != 5 || f.gw.Requests() != 5 {
		t.Errorf("got %d charges, %d gateway requests; want 5 and 5", n, f.gw.Requests())
	}
	for i := range 5 {
		if row := f.ledger(t, fmt.Sprintf("pay_vk_%d", i)); attr(row, "status") != StatusCharged {
			t.Errorf("ledger row of pay_vk_%d: %v; want charged", i, row)
		}
	}
	if n := f.idempotencyRecords(t); n != 0 {
		t.Errorf("%d idempotency records on the DynamoDB ledger; want 0, they are on Valkey", n)
	}
	if n, err := srv.Do("DBSIZE"); err != nil || n != "5" {
		t.Errorf("Valkey holds %s keys, %v; want 5 records", n, err)
	}
}

// At init, the function refuses a server that may evict its records.
func TestValkeyThatMayEvictIsRefused(t *testing.T) {
	srv := redisserver.ForTest(t)
	if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := newValkey(ctx, config{ValkeyAddrs: []string{srv.Addr}}, aws.Config{}); !errors.Is(err, valkeystore.ErrMayEvict) {
		t.Errorf("got %v; want ErrMayEvict", err)
	}
}

func TestValkeyConfigFromEnv(t *testing.T) {
	base := map[string]string{"PAYMENTS_TABLE": "pay", "PAYMENT_GATEWAY_URL": "https://gw.example", "IDEMPOTENCY_VALKEY_ADDR": "a:6379, b:6379"}
	env := func(extra map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return base[k]
		}
	}
	c, err := configFromEnv(env(nil))
	if err != nil || strings.Join(c.ValkeyAddrs, " ") != "a:6379 b:6379" || c.ValkeyTLS {
		t.Errorf("got %+v, %v; want the two addresses, no TLS", c, err)
	}
	c, err = configFromEnv(env(map[string]string{"IDEMPOTENCY_VALKEY_IAM_CACHE": "payments", "IDEMPOTENCY_VALKEY_IAM_USER": "fn"}))
	if err != nil || !c.ValkeyTLS {
		t.Errorf("IAM: got %+v, %v; want TLS on", c, err)
	}
	for name, tc := range map[string]struct {
		extra map[string]string
		want  string
	}{
		"outbox":      {map[string]string{"OUTBOX_TABLE": "o", "EVENTS_QUEUE_URL": "https://sqs.example/1/q"}, "need the idempotency records on the ledger"},
		"on record":   {map[string]string{"EVENTS_QUEUE_URL": "https://sqs.example/1/q"}, "need the idempotency records on the ledger"},
		"bad address": {map[string]string{"IDEMPOTENCY_VALKEY_ADDR": "nohost"}, `"nohost" is not host:port`},
		"bad TLS":     {map[string]string{"IDEMPOTENCY_VALKEY_TLS": "yes"}, "want true or false"},
		"half of IAM": {map[string]string{"IDEMPOTENCY_VALKEY_IAM_USER": "fn"}, "go together"},
	} {
		if _, err := configFromEnv(env(tc.extra)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v; want an error saying %q", name, err, tc.want)
		}
	}
}
