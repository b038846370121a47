package rie

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// built is the one Build of a test process.
var built struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of aws-lambda-rie for a test, built once per
// test process. Where the emulator cannot run (it supports Linux only) or
// cannot be built (no module proxy, say), it skips tb, or fails it when the
// CI environment variable is set: in CI the comparison must run.
func Binary(tb testing.TB) string {
	tb.Helper()
	if runtime.GOOS != "linux" {
		skipOrFail(tb, "aws-lambda-rie runs on Linux only, not on "+runtime.GOOS)
	}
	built.once.Do(func() {
		// Cold, the emulator's modules come from the proxy and it builds
		// from scratch.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		built.path, built.err = Build(ctx)
	})
	if built.err != nil {
		skipOrFail(tb, built.err.Error())
	}
	return built.path
}

func skipOrFail(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s; failing, because CI is set", why)
	}
	tb.Skipf("%s; skipping", why)
}
