package dynamostore_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
)

// Bad input through Batch and Idempotent on DynamoDB (moto): the rows of the
// bad-input table of docs/batch-processing.md that are not about the payment sample, each on
// a table of its own, scanned after every batch for locks left behind.
func TestBadInput(t *testing.T) {
	storetest.RunBadInput(t, func(t *testing.T) storetest.BadInputTarget {
		f := setup(t)
		return storetest.BadInputTarget{
			Store:    f.store,
			Statuses: f.statuses,
			// Items hold 400 KB, and the store keeps strings only.
			MaxResult:       390_000,
			TextResultsOnly: true,
		}
	})
}

// statuses scans the table: the status of every record, by ID.
func (f *fixture) statuses(t *testing.T) map[string]lambdakit.IdempotencyStatus {
	t.Helper()
	out := map[string]lambdakit.IdempotencyStatus{}
	p := dynamodb.NewScanPaginator(f.db, &dynamodb.ScanInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true)})
	for pages := 0; p.HasMorePages(); pages++ {
		if pages == 100 {
			t.Fatal("scan: more than 100 pages")
		}
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		for _, item := range page.Items {
			out[str(t, item, "id")] = lambdakit.IdempotencyStatus(str(t, item, "status"))
		}
	}
	return out
}
