package rie

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/lambdakit/lambdakit/internal/runtimeapi"
)

// Diff compares what one event gave under lambdakit's emulator (ours, from
// a runtimeapi.Runner) and under aws-lambda-rie (theirs, from
// Response.Result), and says what differs, or "" when they agree: the same
// outcome; on success, payloads equal as JSON (byte for byte when either is
// not JSON); on a failure, the same errorType and errorMessage once each
// result's own request ID is replaced by a placeholder, since each emulator
// draws its own.
func Diff(ours, theirs runtimeapi.Result) string {
	var d []string
	if ours.Outcome != theirs.Outcome {
		d = append(d, fmt.Sprintf("outcome: ours %v, aws-lambda-rie %v", ours.Outcome, theirs.Outcome))
	}
	if ours.Outcome == runtimeapi.OutcomeSuccess && theirs.Outcome == runtimeapi.OutcomeSuccess {
		if !SamePayload(ours.Payload, theirs.Payload) {
			d = append(d, fmt.Sprintf("response:\n  ours           %s\n  aws-lambda-rie %s", ours.Payload, theirs.Payload))
		}
	}
	if ours.Error != nil && theirs.Error != nil {
		if ours.Error.Type != theirs.Error.Type {
			d = append(d, fmt.Sprintf("errorType: ours %q, aws-lambda-rie %q", ours.Error.Type, theirs.Error.Type))
		}
		om, tm := withoutID(ours.Error.Message, ours.RequestID), withoutID(theirs.Error.Message, theirs.RequestID)
		if om != tm {
			d = append(d, fmt.Sprintf("errorMessage:\n  ours           %q\n  aws-lambda-rie %q", om, tm))
		}
	}
	return strings.Join(d, "\n")
}

// SamePayload reports whether a and b are equal JSON documents, or, when
// either is not JSON, equal bytes.
func SamePayload(a, b []byte) bool {
	var av, bv any
	if json.Unmarshal(a, &av) != nil || json.Unmarshal(b, &bv) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(av, bv)
}

// withoutID replaces the request ID in msg with a placeholder.
func withoutID(msg, id string) string {
	if id == "" {
		return msg
	}
	return strings.ReplaceAll(msg, id, "<request-id>")
}
