package awsrules_test

import (
	"errors"
	"fmt"

	"github.com/lambdakit/lambdakit/lambdakit/awsrules"
)

// A customer ID used as a FIFO message group ID is checked before the
// work that will publish it: SQS refuses a space.
func ExampleCheckGroupID() {
	err := awsrules.CheckGroupID("cus 42")
	fmt.Println(errors.Is(err, awsrules.ErrGroupID))
	fmt.Println(awsrules.CheckGroupID("cus_42"))
	// Output:
	// true
	// <nil>
}

// DynamoDB holds magnitudes up to 9.99…E+125.
func ExampleCheckNumber() {
	fmt.Println(awsrules.CheckNumber("1e200"))
	fmt.Println(awsrules.CheckNumber("-12.50"))
	// Output:
	// awsrules: not a DynamoDB number: "1e200" is larger in magnitude than 9.99…E+125
	// <nil>
}
