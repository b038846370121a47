package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/producer"
)

// Publishing payments to the FIFO queue of the sample consumer, which is
// idempotent on payment_id under the prefix "payment".
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx) // AWS_ENDPOINT_URL_SQS, AWS_REGION, ...
	if err != nil {
		log.Fatal(err)
	}
	queueURL := "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo"
	p, err := producer.NewFromQueue(ctx, sqs.NewFromConfig(cfg), queueURL, func(o *producer.Options) {
		o.Key = lambdakit.KeyFromField("payment_id") // the consumer's KeyFunc
		o.Group = producer.GroupFromField("customer_id")
	})
	if err != nil {
		log.Fatal(err)
	}
	results, err := p.Send(ctx, []producer.Message{
		{Body: `{"payment_id":"pay_1001","customer_id":"cus_A","amount":1299,"currency":"EUR"}`},
	})
	for _, r := range results {
		if r.Err != nil {
			log.Printf("payment %s not sent: %v", r.Key, r.Err)
			continue
		}
		// The consumer's idempotency record of this message:
		fmt.Println("sent", r.MessageID, "record payment#"+r.DedupID)
	}
	if errors.Is(err, producer.ErrFailed) {
		log.Fatal(err)
	}
}
