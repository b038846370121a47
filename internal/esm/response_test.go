package esm_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/lambdakit/lambdakit/internal/esm"
)

func TestFailedRecords(t *testing.T) {
	batch := []events.SQSMessage{{MessageId: "m1"}, {MessageId: "m2"}, {MessageId: "m3"}}
	tests := []struct {
		name     string
		response string
		want     []string // nil: every record succeeded
		invalid  bool     // the whole batch fails
	}{
		{name: "empty response succeeds", response: ``},
		{name: "blank response succeeds", response: " \n"},
		{name: "null succeeds", response: `null`},
		{name: "empty object succeeds", response: `{}`},
		{name: "object without batchItemFailures succeeds", response: `{"statusCode": 200, "body": "done"}`},
		{name: "null list succeeds", response: `{"batchItemFailures": null}`},
		{name: "empty list succeeds", response: `{"batchItemFailures": []}`},
		{name: "named records fail", response: `{"batchItemFailures": [{"itemIdentifier": "m3"}, {"itemIdentifier": "m1"}]}`, want: []string{"m3", "m1"}},
		{name: "extra fields in an entry are ignored", response: `{"batchItemFailures": [{"itemIdentifier": "m2", "reason": "x"}]}`, want: []string{"m2"}},
		{name: "a key in other case is not batchItemFailures", response: `{"BatchItemFailures": [{"itemIdentifier": "m2"}]}`},
		{name: "not JSON fails the batch", response: `OK`, invalid: true},
		{name: "truncated JSON fails the batch", response: `{"batchItemFailures": [`, invalid: true},
		{name: "a JSON string fails the batch", response: `"ok"`, invalid: true},
		{name: "a JSON list fails the batch", response: `[{"itemIdentifier": "m1"}]`, invalid: true},
		{name: "a list that is not one fails the batch", response: `{"batchItemFailures": {"itemIdentifier": "m1"}}`, invalid: true},
		{name: "an entry that is not an object fails the batch", response: `{"batchItemFailures": ["m1"]}`, invalid: true},
		{name: "a null entry fails the batch", response: `{"batchItemFailures": [null]}`, invalid: true},
		{name: "empty itemIdentifier fails the batch", response: `{"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": ""}]}`, invalid: true},
		{name: "null itemIdentifier fails the batch", response: `{"batchItemFailures": [{"itemIdentifier": null}]}`, invalid: true},
		{name: "missing itemIdentifier fails the batch", response: `{"batchItemFailures": [{"messageId": "m1"}]}`, invalid: true},
		{name: "itemIdentifier in other case fails the batch", response: `{"batchItemFailures": [{"ItemIdentifier": "m1"}]}`, invalid: true},
		{name: "numeric itemIdentifier fails the batch", response: `{"batchItemFailures": [{"itemIdentifier": 1}]}`, invalid: true},
		{name: "unknown itemIdentifier fails the batch", response: `{"batchItemFailures": [{"itemIdentifier": "m1"}, {"itemIdentifier": "m9"}]}`, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := esm.FailedRecords([]byte(tt.response), batch)
			if tt.invalid {
				if !errors.Is(err, esm.ErrInvalidResponse) || got != nil {
					t.Errorf("FailedRecords(%s) = %q, %v; want nil, ErrInvalidResponse", tt.response, got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("FailedRecords(%s) = %q, %v; want %q, nil", tt.response, got, err, tt.want)
			}
		})
	}
}
