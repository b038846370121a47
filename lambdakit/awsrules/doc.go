// Package awsrules holds the rules DynamoDB and SQS apply to what they are
// sent, written once, so that lambdakit refuses before the work what the
// service would refuse after it: a number DynamoDB cannot hold, a message
// group ID or an attribute name SQS rejects, a message, item or
// transaction over its size limit.
//
// Each rule is the service's documented one, cited where it is defined.
// The package imports no SDK, so that the core (package lambdakit), the
// stores and the producer can share it, and so that users can run the same
// checks on their own data before an external effect (a card charged) that
// must not happen for work that cannot then be recorded.
package awsrules
