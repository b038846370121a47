// Command bare is the floor the benchmark compares the payment function
// with (package floor): the same job done with aws-lambda-go and the AWS
// SDK alone, no lambdakit, run as a Lambda function.
//
// Environment: PAYMENTS_TABLE, PAYMENT_GATEWAY_URL, EVENTS_QUEUE_URL
// (optional), and the AWS SDK's own (AWS_ENDPOINT_URL, credentials,
// region).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/internal/floor"
)

func main() {
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
	// The SDK's HTTP client, with as many connections kept as records
	// run at once, as dynamostore.WithLambdaDefaults keeps them: with the
	// SDK's 10 idle, a batch of more than 10 records would close and
	// reopen connections all the time.
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxConnsPerHost, t.MaxIdleConnsPerHost, t.MaxIdleConns = floor.MaxInFlight, floor.MaxInFlight, floor.MaxInFlight
	})
	events := os.Getenv("EVENTS_QUEUE_URL")
	if u, err := url.Parse(events); events != "" && (err != nil || u.Scheme == "" || u.Host == "") {
		fmt.Fprintln(os.Stderr, "bare: EVENTS_QUEUE_URL is not a queue URL:", events)
		os.Exit(1)
	}
	lambda.Start(floor.New(floor.Config{
		DB:         dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = httpClient }),
		HTTP:       &http.Client{Timeout: 5 * time.Second, Transport: floor.GatewayTransport()},
		Table:      os.Getenv("PAYMENTS_TABLE"),
		GatewayURL: os.Getenv("PAYMENT_GATEWAY_URL"),
		EventsURL:  events,
		Logger:     slog.New(slog.NewJSONHandler(os.Stdout, nil)),
	}))
}
