package samtemplate_test

import (
	"testing"

	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

func TestTablesReadsTheProjectTemplate(t *testing.T) {
	tables, err := samtemplate.Tables("../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	idem, err := samtemplate.Find(tables, "IdempotencyTable")
	if err != nil {
		t.Fatal(err)
	}
	if len(idem.KeySchema) != 1 || idem.KeySchema[0].AttributeName != "id" || idem.KeySchema[0].KeyType != "HASH" {
		t.Errorf("got idempotency key schema %+v; want id HASH", idem.KeySchema)
	}
	if idem.TimeToLiveSpecification == nil || !idem.TimeToLiveSpecification.Enabled || idem.TimeToLiveSpecification.AttributeName != "expiration" {
		t.Errorf("got TTL %+v; want enabled on expiration", idem.TimeToLiveSpecification)
	}
	pay, err := samtemplate.Find(tables, "PaymentsTable")
	if err != nil {
		t.Fatal(err)
	}
	if pay.KeySchema[0].AttributeName != "payment_id" || pay.BillingMode != "PAY_PER_REQUEST" {
		t.Errorf("got payments table %+v; want payment_id, on demand", pay)
	}
	if _, err := samtemplate.Find(tables, "Nope"); err == nil {
		t.Error("Find of a missing table: got nil error")
	}
}
