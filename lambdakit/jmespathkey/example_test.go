package jmespathkey_test

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/jmespathkey"
)

// A Powertools function's event_key_jmespath and
// payload_validation_jmespath, kept as they were.
func Example() {
	key, err := jmespathkey.KeyFromJMESPath("powertools_json(body).[customer_id, order_id]")
	if err != nil {
		panic(err) // a bad expression fails at start, not on a message
	}
	payload, err := jmespathkey.PayloadFromJMESPath("powertools_json(body).amount")
	if err != nil {
		panic(err)
	}
	_ = func(store lambdakit.Store) lambdakit.Middleware {
		return lambdakit.Idempotent(store, key, func(o *lambdakit.Options) { o.Payload = payload })
	}

	msg := events.SQSMessage{Body: `{"customer_id":"c-7","order_id":"o-1","amount":12.5}`}
	k, _ := key(&msg)
	fmt.Println(k)
	// Output: ["c-7","o-1"]
}
