package lambdakit

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// freshProcess runs the calling test again in a process of its own and
// reports whether this is that process. Stack accounting is only exact
// there: in a process that ran other tests, freed stacks of every size
// wait in the runtime's caches, already counted in use, and new
// goroutines take them without the count moving.
func freshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv("LAMBDAKIT_STACK_CHILD") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "LAMBDAKIT_STACK_CHILD="+t.Name())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("in a process of its own: %v\n%s", err, out)
	}
	return false
}

// stackPerGoroutine starts n goroutines with start, each of which calls
// running once it holds the stack it will run with and then waits for
// release, and returns how much stack each holds on average then.
func stackPerGoroutine(t *testing.T, n int, start func(running func(), release <-chan struct{})) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(n)
	runtime.GC()
	runtime.ReadMemStats(&before)
	start(running.Done, release)
	waited := make(chan struct{})
	go func() { running.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatalf("the goroutines did not all start within 10 s")
	}
	runtime.ReadMemStats(&after)
	close(release)
	return (after.StackInuse - min(after.StackInuse, before.StackInuse)) / uint64(n)
}

// TestGrowStackGivesTheGoroutineARecordsStack checks that growStack is not
// optimised away: goroutines that call it hold at least recordStack of
// stack each, where goroutines that do not start with a few KB.
func TestGrowStackGivesTheGoroutineARecordsStack(t *testing.T) {
	if !freshProcess(t) {
		return
	}
	const n = 200
	run := func(grow bool) uint64 {
		var done sync.WaitGroup
		defer done.Wait()
		return stackPerGoroutine(t, n, func(running func(), release <-chan struct{}) {
			for range n {
				done.Go(func() {
					if grow {
						growStack()
					}
					running()
					<-release
				})
			}
		})
	}
	if plain, grown := run(false), run(true); grown < recordStack {
		t.Errorf("a goroutine that called growStack holds %d bytes of stack (one that did not: %d); want at least %d", grown, plain, recordStack)
	}
}

// TestBatchRunsEachRecordOnAGrownStack checks that the batch's record
// goroutines start with a record's stack (see recordStack), so that a
// record's deep path does not copy its stack again and again.
func TestBatchRunsEachRecordOnAGrownStack(t *testing.T) {
	if !freshProcess(t) {
		return
	}
	const n = 50
	var recs []events.SQSMessage
	for i := range n {
		recs = append(recs, events.SQSMessage{MessageId: "m" + strconv.Itoa(i), Body: "{}"})
	}
	answered := make(chan struct{})
	per := stackPerGoroutine(t, n, func(running func(), release <-chan struct{}) {
		batch := Batch(HandlerFunc(func(ctx context.Context, msg *events.SQSMessage) ([]byte, error) {
			running()
			<-release
			return nil, nil
		}), func(o *BatchOptions) { o.Concurrency = n; o.DisableMetrics = true })
		go func() {
			defer close(answered)
			_, _ = batch(context.Background(), events.SQSEvent{Records: recs})
		}()
	})
	<-answered
	if per < recordStack {
		t.Errorf("each record's goroutine holds %d bytes of stack; want at least %d", per, recordStack)
	}
}
