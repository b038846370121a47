package awsrules

import "errors"

// ErrNumber means a string is not a number DynamoDB can hold.
var ErrNumber = errors.New("awsrules: not a DynamoDB number")

// ErrSet means members are not a set DynamoDB can hold.
var ErrSet = errors.New("awsrules: not a DynamoDB set")

// Errors of the SQS rules.
var (
	// ErrGroupID means a string is not a valid message group ID.
	ErrGroupID = errors.New("awsrules: invalid SQS message group ID")
	// ErrDeduplicationID means a string is not a valid deduplication ID.
	ErrDeduplicationID = errors.New("awsrules: invalid SQS message deduplication ID")
	// ErrAttributeName means a string is not a valid message attribute
	// name.
	ErrAttributeName = errors.New("awsrules: invalid SQS message attribute name")
	// ErrNumberAttribute means a string is not a value of a Number
	// message attribute.
	ErrNumberAttribute = errors.New("awsrules: invalid SQS Number attribute value")
	// ErrText means a message body or attribute value holds a byte that
	// is not UTF-8 or a character SQS refuses.
	ErrText = errors.New("awsrules: text SQS refuses")
)
