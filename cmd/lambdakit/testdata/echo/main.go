// Command echo is a Lambda bootstrap for the lambdakit CLI tests. It answers
// an event with the event itself and a little of its environment, and fails
// when the event says {"fail": "reason"}.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
)

func handle(_ context.Context, ev map[string]any) (map[string]any, error) {
	fmt.Println("echo: log line from the function")
	if reason, ok := ev["fail"].(string); ok {
		return nil, errors.New(reason)
	}
	return map[string]any{
		"got":      ev,
		"function": os.Getenv("AWS_LAMBDA_FUNCTION_NAME"),
		"region":   os.Getenv("AWS_REGION"),
		"logs":     os.Getenv("AWS_LAMBDA_LOG_FORMAT"),
		"var":      os.Getenv("ECHO_VAR"),
		"global":   os.Getenv("ECHO_GLOBAL"),
	}, nil
}

func main() {
	lambda.Start(handle)
}
