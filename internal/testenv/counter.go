package testenv

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/aws/smithy-go/middleware"
)

// Counter counts calls by name: AWS SDK operation calls by operation name
// ("PutItem", "GetItem", ...), and whatever else a test counts with Add,
// such as the runs of a handler's side effect by key. It counts calls, not
// retry attempts, so a transient retry does not change what a test
// observes. Install it by appending its APIOption method to
// aws.Config.APIOptions or to a client's Options.APIOptions:
//
//	var calls testenv.Counter
//	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
//		o.APIOptions = append(o.APIOptions, calls.APIOption)
//	})
//
// The zero value is ready to use; a Counter is safe for concurrent use and
// must not be copied after first use.
type Counter struct {
	mu    sync.Mutex
	calls map[string]int
}

// APIOption adds the counting middleware to an operation's stack.
func (c *Counter) APIOption(stack *middleware.Stack) error {
	op := stack.ID()
	// The ID names the counter, so that two counters can watch one client.
	id := fmt.Sprintf("testenv.Counter/%p", c)
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc(id,
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.Add(op)
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// Add counts one call of name.
func (c *Counter) Add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = make(map[string]int)
	}
	c.calls[name]++
}

// Count returns how many times op was called since the last Reset.
func (c *Counter) Count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

// Total returns how many calls were counted since the last Reset.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

// Counts returns a copy of the counts by operation, for messages.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

// Reset sets every count back to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.calls)
}
