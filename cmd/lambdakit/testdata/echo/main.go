// Command echo is a Lambda bootstrap for the lambdakit CLI tests. It answers
// an event with the event itself and a little of its environment (and the
// variables the event names in "env"), and fails
// when the event says {"fail": "reason"}.
package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

func handle(ctx context.Context, ev map[string]any) (map[string]any, error) {
	fmt.Println("echo: log line from the function")
	if reason, ok := ev["fail"].(string); ok {
		return nil, errors.New(reason)
	}
	// {"env": ["NAME", ...]} asks for those variables: "env" answers
	// with each one's value, or null for a variable that is not set.
	env := map[string]any{}
	names, _ := ev["env"].([]any)
	for _, n := range names {
		name, _ := n.(string)
		if v, ok := os.LookupEnv(name); ok {
			env[name] = v
		} else {
			env[name] = nil
		}
	}
	return map[string]any{
		"env":      env,
		"got":      ev,
		"function": os.Getenv("AWS_LAMBDA_FUNCTION_NAME"),
		"region":   os.Getenv("AWS_REGION"),
		"logs":     os.Getenv("AWS_LAMBDA_LOG_FORMAT"),
		"var":      os.Getenv("ECHO_VAR"),
		"global":   os.Getenv("ECHO_GLOBAL"),
		"memory":   os.Getenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"),
		"level":    os.Getenv("AWS_LAMBDA_LOG_LEVEL"),
		// Whole seconds to the invocation's deadline: its timeout, less the
		// moment it took to get here.
		"deadlineSeconds": int(math.Ceil(time.Until(deadline(ctx)).Seconds())),
	}, nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func main() {
	lambda.Start(handle)
}
