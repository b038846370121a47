package esm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
)

// ErrInvalidResponse means that a function's response, though the invocation
// succeeded, fails the whole batch under Lambda's partial batch response
// rules: nothing is deleted.
var ErrInvalidResponse = errors.New("esm: the response fails the whole batch")

// FailedRecords reads a successful invocation's response as Lambda reads it
// for an event source mapping with ReportBatchItemFailures, and returns the
// IDs of the records the function reported failed, in the order it named
// them. The rest of records are to be deleted.
//
// The whole batch succeeds (nil, nil) on an empty response, null, an object
// without batchItemFailures (extra fields are ignored), and a null or empty
// batchItemFailures list. The whole batch fails (an error wrapping
// ErrInvalidResponse) when the response is not JSON, when batchItemFailures
// is not a list, and when an entry is not an object with an itemIdentifier
// that is a non-empty string naming a record of this batch.
//
// Lambda's documentation does not say what a well-formed response that is
// not an object ("ok", 42, [...]) does; it is taken as invalid here, so that
// a doubt keeps messages rather than deleting them.
func FailedRecords(response []byte, records []events.SQSMessage) ([]string, error) {
	inBatch := make(map[string]bool, len(records))
	for _, r := range records {
		inBatch[r.MessageId] = true
	}
	return itemFailures(response, func(id string) bool { return inBatch[id] })
}

// itemFailures reads a partial batch response, SQS's or a stream's alike
// (their rules are the same), and returns the identifiers it names, in its
// order; inBatch says whether an identifier names a record of the batch.
func itemFailures(response []byte, inBatch func(id string) bool) ([]string, error) {
	response = bytes.TrimSpace(response)
	if len(response) == 0 {
		return nil, nil
	}
	if !json.Valid(response) {
		return nil, fmt.Errorf("%w: it is not JSON", ErrInvalidResponse)
	}
	if bytes.Equal(response, []byte("null")) {
		return nil, nil
	}
	if response[0] != '{' {
		return nil, fmt.Errorf("%w: it is not a JSON object", ErrInvalidResponse)
	}
	// A raw map keeps the exact key: Lambda matches batchItemFailures and
	// itemIdentifier by name, where encoding/json would accept any case.
	var top map[string]json.RawMessage
	if err := json.Unmarshal(response, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidResponse, err)
	}
	list, ok := top["batchItemFailures"]
	if !ok || bytes.Equal(list, []byte("null")) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		return nil, fmt.Errorf("%w: batchItemFailures is not a list", ErrInvalidResponse)
	}
	var failed []string
	for i, raw := range items {
		var item map[string]json.RawMessage
		if err := json.Unmarshal(raw, &item); err != nil || item == nil {
			return nil, fmt.Errorf("%w: batchItemFailures[%d] is not an object", ErrInvalidResponse, i)
		}
		rawID, ok := item["itemIdentifier"]
		if !ok {
			return nil, fmt.Errorf("%w: batchItemFailures[%d] has no itemIdentifier", ErrInvalidResponse, i)
		}
		var id *string
		if err := json.Unmarshal(rawID, &id); err != nil {
			return nil, fmt.Errorf("%w: batchItemFailures[%d].itemIdentifier is not a string", ErrInvalidResponse, i)
		}
		switch {
		case id == nil:
			return nil, fmt.Errorf("%w: batchItemFailures[%d].itemIdentifier is null", ErrInvalidResponse, i)
		case *id == "":
			return nil, fmt.Errorf("%w: batchItemFailures[%d].itemIdentifier is empty", ErrInvalidResponse, i)
		case !inBatch(*id):
			return nil, fmt.Errorf("%w: batchItemFailures[%d].itemIdentifier %q is not a record of the batch", ErrInvalidResponse, i, *id)
		}
		failed = append(failed, *id)
	}
	return failed, nil
}
