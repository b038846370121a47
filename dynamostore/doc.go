// Package dynamostore keeps lambdakit idempotency records in a DynamoDB
// table: it implements lambdakit.Store.
//
// The items follow the schema of the Powertools for AWS Lambda idempotency
// tables (id, status, expiration in epoch seconds, in_progress_expiration
// in epoch milliseconds, validation, data), plus a lease attribute that
// fences completion and release, so one table can serve Python, TypeScript
// and Go functions. The attribute names are configurable through Options.
//
// Every Store method is exactly one request: Acquire is a conditional
// PutItem that, when the key is taken, gets the live record back from the
// failed condition itself; Complete is a conditional UpdateItem (or one
// TransactWriteItems with the writes a handler staged through Stage);
// Release is a conditional DeleteItem. Conditional failures come back as
// the lambdakit sentinels (lambdakit.ErrLeaseLost), so callers never
// inspect DynamoDB errors; so does throttling (lambdakit.ErrThrottled),
// once the client's retries are spent.
//
// WithLambdaDefaults configures a DynamoDB client for a Store in a Lambda
// function: a bounded number of attempts with short, jittered backoff, a
// timeout per attempt, and a bounded connection pool.
//
// Records is for operators, not functions: it reads one record (GetItem),
// lists records by prefix with a filtered Scan (which reads the whole
// table), and deletes a record provided it is still as read. The lambdakit
// CLI's records command uses it; a function's role needs none of its
// actions.
//
// CreateTable creates a table with this schema, on demand, with TTL on the
// expiration attribute; templates that create the table themselves need it
// only for local runs and tests. For tests, package dynamostoretest starts a
// local DynamoDB (moto_server) and creates such tables.
package dynamostore
