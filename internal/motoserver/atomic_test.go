package motoserver_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/lambdakit/lambdakit/internal/motoserver"
)

// A conditional write is atomic in DynamoDB: of several writers racing to
// put one key with attribute_not_exists, exactly one wins. Plain moto
// checks the condition and writes without a lock, so two can win; the
// launcher serves DynamoDB requests one at a time. (The race is rare: this
// test did not catch plain moto in five runs here; the chaos run found it
// with six processes through their fault proxies.)
func TestConditionalPutsHaveOneWinner(t *testing.T) {
	moto.Server(t) // skips, or fails under CI, without moto
	// A server of its own: thousands of requests would push the shared
	// server's first lines out of the output the other tests read.
	srv, err := motoserver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	db := dynamodb.NewFromConfig(srv.AWSConfig())
	table := createTable(t, db, false, false)
	const keys, writers = 200, 8
	wins := make([]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for k := range keys {
				_, err := db.PutItem(t.Context(), &dynamodb.PutItemInput{
					TableName:           aws.String(table),
					Item:                map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: fmt.Sprintf("k%d", k)}, "v": &types.AttributeValueMemberS{Value: fmt.Sprint(w)}},
					ConditionExpression: aws.String("attribute_not_exists(id)"),
				})
				var failed *types.ConditionalCheckFailedException
				switch {
				case err == nil:
					mu.Lock()
					wins[k]++
					mu.Unlock()
				case !errors.As(err, &failed):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, n := range wins {
		if n != 1 {
			t.Errorf("key k%d: %d writers won; want exactly 1", k, n)
		}
	}
}
