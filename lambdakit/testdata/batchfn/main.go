// Command batchfn is a Lambda bootstrap for the lambdakit tests that need a
// real aws-lambda-go runtime loop, such as the errorType Lambda reports for
// the errors Batch returns. Each record's body decides its fate: a body with
// "fail": true fails, any other body succeeds. Records are idempotent on
// "id", in memory.
package main

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/lambdakittest"
)

type record struct {
	ID   string `json:"id"`
	Fail bool   `json:"fail"`
}

func main() {
	h := lambdakit.Typed(func(ctx context.Context, r record) error {
		if r.Fail {
			return errors.New("batchfn: asked to fail")
		}
		return nil
	})
	idem := lambdakit.Idempotent(&lambdakittest.MemoryStore{}, lambdakit.KeyFromField("id"))
	lambda.Start(lambdakit.Batch(idem(h)))
}
