// Package valkeystore keeps lambdakit idempotency records in Valkey or
// Redis (a single server, or a cluster; ElastiCache, MemoryDB or your
// own): it implements lambdakit.Store, and lambdakit.BatchGetter for the
// read ahead. It talks through a valkey-go client, which
// WithLambdaDefaults configures for a Lambda function.
//
// Each record is one hash under one key (Options.KeyPrefix and the record
// ID), so that in a cluster each call goes to the node that owns the key.
// Every Store method is one Lua script, run with EVALSHA (EVAL when the
// server does not have it yet), atomic on the server: Acquire creates the
// record unless a live one holds the key and returns the live one
// otherwise, with the same rules as dynamostore, to the millisecond;
// Complete and Release act only while the record carries the caller's
// lease, so a worker whose lease lapsed can never overwrite or delete its
// successor's record. The scripts compare times with the caller's clock
// (the now passed to Acquire), never the server's, so that every store
// agrees on when a record stops counting. Run again with the same record
// after a lost answer, each script does what the first run did: an
// Acquire finds the caller's own lease, a Complete completes again, a
// Release finds nothing to delete (or a successor's record, which it
// refuses with lambdakit.ErrLeaseLost, and lambdakit takes for a release
// that landed). So the client resends a script whose
// connection broke (a restart, a failover), within the call's context,
// instead of failing the record.
//
// The key expires (PEXPIREAT) Options.ExpiryGrace after the record stops
// counting, so the server forgets records as DynamoDB's TTL does, and a
// server clock somewhat ahead of the caller's never drops a live record.
//
// What Redis does not promise, and DynamoDB does: a write acknowledged by
// a primary can be lost when a replica that had not received it takes
// over (replication is asynchronous; MemoryDB's durable log is not), and
// a server whose maxmemory-policy is not noeviction may evict records
// (Check asks). Staged writes (lambdakit.Stage) cannot commit atomically
// with a completion here: Stage refuses them (CheckStaging), before the
// rest of the work, with lambdakit.ErrStagingUnsupported, and so does
// Complete. See docs/valkey.md.
//
// IAMAuth authenticates to ElastiCache with IAM: a short-lived token,
// signed with SigV4, as the password of each new connection.
package valkeystore
