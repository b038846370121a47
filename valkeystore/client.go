package valkeystore

import (
	"time"

	"github.com/valkey-io/valkey-go"
)

// Defaults of WithLambdaDefaults, for a client inside a Lambda function:
// one client per container, made at init, that runs a batch's records
// concurrently over a few long-lived connections.
const (
	// DefaultDialTimeout bounds connecting, TLS and AUTH included. A node
	// in the same VPC answers within milliseconds; one that does not
	// within seconds is down, and the record is better failed and retried
	// than the invocation spent waiting.
	DefaultDialTimeout = 2 * time.Second
	// DefaultConnWriteTimeout bounds how long a connection may wait for an
	// answer before the client takes it for dead, closes it and fails the
	// commands on it. A context deadline that comes sooner wins.
	DefaultConnWriteTimeout = 3 * time.Second
	// DefaultBufferSize is the read and the write buffer of each
	// connection. The client's own default (0.5 MiB each) suits servers
	// with thousands of commands in flight; a function with a 128 MB
	// memory size does better with less, and a larger record still goes
	// through, in several reads.
	DefaultBufferSize = 64 << 10
	// DefaultBlockingPoolSize bounds the connections for commands that
	// cannot share one (the store sends none; the bound keeps a caller's
	// own use of the client small too).
	DefaultBlockingPoolSize = 4
)

// WithLambdaDefaults returns o with the settings a Store needs in a Lambda
// function wherever o leaves them zero:
//
//	client, err := valkey.NewClient(valkeystore.WithLambdaDefaults(valkey.ClientOption{
//		InitAddress: []string{addr},
//	}))
//
// Commands share a pipelined connection per node (auto-pipelining): 64
// records acquiring at once held two connections to one server in a test
// (the pipeline and one the client opens at start), not 64, so
// the function stays far below its file descriptor limit and an IAM
// authenticated connection is made once, not per record. The client's
// local cache is off (the store reads nothing twice, and it needs CLIENT
// TRACKING, which not every managed server allows); buffers are small;
// connecting and waiting for an answer are bounded (DefaultDialTimeout,
// DefaultConnWriteTimeout). Leave DisableRetry false: the store's scripts
// are safe to resend on a new connection when one breaks (see doc.go),
// and the client does so within the call's context.
//
// Set TLSConfig for a server with encryption in transit (ElastiCache
// requires it for IAM authentication), and Username and Password, or
// AuthCredentialsFn (see IAMAuth), for AUTH.
func WithLambdaDefaults(o valkey.ClientOption) valkey.ClientOption {
	if o.Dialer.Timeout == 0 {
		o.Dialer.Timeout = DefaultDialTimeout
	}
	if o.ConnWriteTimeout == 0 {
		o.ConnWriteTimeout = DefaultConnWriteTimeout
	}
	if o.ReadBufferEachConn == 0 {
		o.ReadBufferEachConn = DefaultBufferSize
	}
	if o.WriteBufferEachConn == 0 {
		o.WriteBufferEachConn = DefaultBufferSize
	}
	if o.BlockingPoolSize == 0 {
		o.BlockingPoolSize = DefaultBlockingPoolSize
	}
	// Not a zero-means-default field: the client's zero is the cache on.
	o.DisableCache = true
	return o
}
