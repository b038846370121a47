package lambdakit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// MaxVisibility is the longest SQS lets a received message stay hidden:
// 12 hours from its receipt.
const MaxVisibility = 12 * time.Hour

// visibilityBatchSize is how many entries one ChangeMessageVisibilityBatch
// call takes at most.
const visibilityBatchSize = 10

// visibilityCalls bounds how many visibility calls a batch makes at once: a
// standard queue's batch of 10,000 failed records makes 1,000 calls.
const visibilityCalls = 16

// Backoff makes a record that failed for a transient reason wait longer
// each time it comes back, by its ApproximateReceiveCount: the floor, plus
// a wait drawn uniformly (full jitter) between 0 and Base·2^(count−1),
// the total never above Cap. The batch sets each such message's visibility
// timeout before it answers, in calls of at most 10 messages, so that a
// downstream outage does not bring every message back at the queue's own
// short timeout until maxReceiveCount moves it to the dead-letter queue.
//
// It applies to records whose handler failed, and whose failure is not
// permanent (BatchOptions.IsPermanent): a permanent failure goes to the
// dead-letter queue as before. Records not attempted are left to the
// queue's timeout: those not started before the deadline, those still
// running, and on a FIFO queue the records skipped behind a failed one in
// their message group. SQS delivers no message of a group while an earlier
// one is hidden, so delaying the failed record holds its whole group back,
// in order; the skipped ones need no call of their own.
//
// A visibility change that SQS refuses (a receipt handle that expired), or
// a call that fails (a function without sqs:ChangeMessageVisibility),
// leaves the record to the queue's own timeout: it never fails the batch.
type Backoff struct {
	// Changer makes the visibility calls; producer.QueueVisibility is
	// the SQS implementation. Backoff does nothing without it.
	Changer VisibilityChanger
	// Floor is the queue's visibility timeout: no failed record comes
	// back sooner than the queue would have brought it back. The event
	// does not carry it. Default 30s, SQS's default. A floor above the
	// cap's most leaves no room: Batch warns at start and delays nothing.
	Floor time.Duration
	// Base is the jitter's window on the first receive, doubled at each
	// receive after it. Default Floor.
	Base time.Duration
	// Cap is the longest wait, floor included. Default and most
	// 12 hours minus FunctionTimeout and the longer of BatchingWindow and
	// Floor: SQS counts the 12 hours from the receipt, which the event
	// does not carry, and refuses a change past them; Lambda may start a
	// batch up to the queue's visibility timeout after the receipt when it
	// retries a throttled invocation.
	Cap time.Duration
	// BatchingWindow is the event source mapping's
	// MaximumBatchingWindowInSeconds, and FunctionTimeout the function's
	// timeout (default 15 minutes, Lambda's most): with Floor, they bound
	// how long before the change a message may have been received. A
	// negative window counts as 0.
	BatchingWindow, FunctionTimeout time.Duration
	// MaxReceiveCount, Retention and RecordTTL, when set, let Batch warn
	// at start if the longest total wait over MaxReceiveCount receives
	// passes the queue's message retention period or the idempotency
	// record's TTL: the message would expire before the dead-letter queue
	// could take it, or run again once its record is gone.
	MaxReceiveCount      int
	Retention, RecordTTL time.Duration
	// Rand draws the jitter; tests seed it. Default: math/rand/v2's
	// global source. Batch draws from it in one goroutine at a time, also
	// when invocations run at once in one process (Lambda Managed
	// Instances).
	Rand *rand.Rand
}

// VisibilityChanger changes when received messages come back.
// producer.QueueVisibility implements it with ChangeMessageVisibilityBatch,
// so that package lambdakit needs no queue client.
type VisibilityChanger interface {
	// ChangeVisibility sets the visibility timeout of up to 10 messages
	// in one call. It returns an error for each entry the queue refused
	// (nil for those it took), or err when the whole call failed.
	ChangeVisibility(ctx context.Context, changes []VisibilityChange) (refused []error, err error)
}

// VisibilityChange is one message's new visibility timeout, counted from
// the call, in whole seconds (SQS's unit).
type VisibilityChange struct {
	MessageID, ReceiptHandle string
	Timeout                  time.Duration
}

// ErrVisibilityNotChanged is the reason given for a record whose
// visibility change failed as a whole call (see VisibilityChanger).
var ErrVisibilityNotChanged = errors.New("lambdakit: visibility not changed")

// errNotAnswered is the reason given for a record whose visibility call
// had not answered when the batch had to.
var errNotAnswered = fmt.Errorf("%w: no answer before the batch's deadline", ErrVisibilityNotChanged)

// withDefaults returns the backoff with its zero fields set.
func (bo Backoff) withDefaults() Backoff {
	if bo.Floor <= 0 {
		bo.Floor = 30 * time.Second
	}
	if bo.Base <= 0 {
		bo.Base = bo.Floor
	}
	if bo.FunctionTimeout <= 0 {
		bo.FunctionTimeout = 15 * time.Minute
	}
	// A negative window would lift the cap past SQS's 12 hours.
	bo.BatchingWindow = max(bo.BatchingWindow, 0)
	// Lambda retries a throttled invocation until the queue's visibility
	// timeout (Floor) has run out since the receipt, so a batch may start
	// up to the longer of the window and the floor after it.
	most := MaxVisibility - max(bo.BatchingWindow, bo.Floor) - bo.FunctionTimeout
	if bo.Cap <= 0 || bo.Cap > most {
		bo.Cap = most
	}
	bo.Cap = max(bo.Cap, min(bo.Floor, most))
	return bo
}

// noRoom reports whether the queue's own timeout already keeps a failed
// record hidden longer than SQS lets a change set: a change could only
// bring it back sooner, or be refused.
func (bo *Backoff) noRoom() bool {
	return bo.Floor > bo.Cap
}

// window is the jitter's bound for a message received count times.
func (bo *Backoff) window(count int) time.Duration {
	room := bo.Cap - bo.Floor
	w := bo.Base
	for k := 1; k < count && w < room; k++ {
		w *= 2
	}
	return min(w, room)
}

// delay draws the wait of a message received count times: the floor plus
// a uniform draw in [0, window], rounded up to a whole second (SQS's unit)
// and never above the cap.
func (bo *Backoff) delay(count int) time.Duration {
	w := int64(bo.window(count))
	var j int64
	if bo.Rand != nil {
		j = bo.Rand.Int64N(w + 1)
	} else {
		j = rand.Int64N(w + 1)
	}
	d := (bo.Floor + time.Duration(j) + time.Second - 1).Truncate(time.Second)
	return min(d, max(bo.Cap.Truncate(time.Second), time.Second))
}

// delay is the backoff's delay, drawn under drawMu.
func (b *batch) delay(count int) time.Duration {
	b.drawMu.Lock()
	defer b.drawMu.Unlock()
	return b.backoff.delay(count)
}

// longest is the most a message can wait over maxReceiveCount receives.
func (bo *Backoff) longest() time.Duration {
	var total time.Duration
	for n := 1; n <= bo.MaxReceiveCount; n++ {
		total += bo.Floor + bo.window(n)
	}
	return total
}

// warnAtStart logs when the backoff has no room above its floor (Batch
// then turns it off), or when the longest total wait passes the
// retention or the record's TTL.
func (bo *Backoff) warnAtStart(logger *slog.Logger) {
	if bo.noRoom() {
		logger.LogAttrs(context.Background(), slog.LevelWarn, "backoff off: the queue's visibility timeout (Floor) already passes the longest wait SQS lets a change set",
			slog.Float64("floorSeconds", bo.Floor.Seconds()), slog.Float64("capSeconds", bo.Cap.Seconds()))
		return
	}
	if bo.MaxReceiveCount <= 0 {
		return
	}
	total := bo.longest()
	for _, limit := range []struct {
		name string
		d    time.Duration
	}{{"the queue's retention period", bo.Retention}, {"the idempotency record's TTL", bo.RecordTTL}} {
		if limit.d > 0 && total > limit.d {
			logger.LogAttrs(context.Background(), slog.LevelWarn, "backoff: the longest wait over maxReceiveCount receives passes "+limit.name,
				slog.Int("maxReceiveCount", bo.MaxReceiveCount), slog.Float64("longestWaitSeconds", total.Seconds()),
				slog.Float64("limitSeconds", limit.d.Seconds()))
		}
	}
}

// delayable reports whether a record that ended with err gets a backoff:
// its handler ran and failed, not permanently. IsPermanent gets the error
// naming the delivered message, as for the dead-letter queue.
func (b *batch) delayable(msg *events.SQSMessage, err error) bool {
	if err == nil || errors.Is(err, ErrSkipped) || errors.Is(err, ErrNotStarted) || errors.Is(err, ErrStillRunning) {
		return false
	}
	permanent, perr := b.permanent(&deliveredError{err: err, id: identityOf(msg)})
	return perr == nil && !permanent
}

// delayFailed sets the visibility of the records that failed transiently,
// and notes each one's delay, or why it was not set, for its log line and
// the metrics. The calls run at once, bounded by visibilityCalls, and end
// at answerBy.
func (b *batch) delayFailed(ctx context.Context, recs []events.SQSMessage, errs []error, notes []recordNote, answerBy <-chan struct{}) {
	var changes []VisibilityChange
	var which []int
	for i, err := range errs {
		if recs[i].ReceiptHandle == "" || !b.delayable(&recs[i], err) {
			continue
		}
		count, _ := strconv.Atoi(recs[i].Attributes["ApproximateReceiveCount"])
		changes = append(changes, VisibilityChange{MessageID: recs[i].MessageId, ReceiptHandle: recs[i].ReceiptHandle,
			Timeout: b.delay(max(count, 1))})
		which = append(which, i)
	}
	if len(changes) == 0 {
		return
	}
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// A call not answered when the batch must answer leaves its records
	// to the queue's timeout. The batch does not wait for it to end: a
	// changer that ignores its context must not hold the answer past the
	// deadline, as a handler that ignores it does not. Late outcomes are
	// dropped once closed is set.
	var mu sync.Mutex
	closed := false
	results := make([]error, len(changes))
	fillErr(results, errNotAnswered)
	sem := make(chan struct{}, visibilityCalls)
	var wg sync.WaitGroup
	for lo := 0; lo < len(changes); lo += visibilityBatchSize {
		hi := min(lo+visibilityBatchSize, len(changes))
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-callCtx.Done():
				return
			}
			defer func() { <-sem }()
			got := make([]error, hi-lo)
			b.changeVisibility(callCtx, changes[lo:hi], got)
			mu.Lock()
			if !closed {
				copy(results[lo:hi], got)
			}
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-answerBy:
		cancel()
	}
	mu.Lock()
	closed = true
	mu.Unlock()
	for k, i := range which {
		note := &notes[i]
		note.mu.Lock()
		note.retryIn, note.retryErr = changes[k].Timeout, results[k]
		note.mu.Unlock()
	}
}

// changeVisibility makes one call and puts each entry's outcome in
// results. A failed call is logged once per container: it fails the same
// way on every invocation (a missing permission), and each record's line
// says its visibility was not changed.
func (b *batch) changeVisibility(ctx context.Context, changes []VisibilityChange, results []error) {
	var refused []error
	var err error
	if pe := protect(func() { refused, err = b.backoff.Changer.ChangeVisibility(ctx, changes) }, nil); pe != nil {
		err = pe
	}
	if err != nil {
		// A call cut short by the batch's deadline says nothing of the
		// next ones: it must not use up the container's one warning.
		if ctx.Err() == nil && b.callFailed.CompareAndSwap(false, true) {
			b.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "backoff: visibility change failed; failed records come back after the queue's visibility timeout (logged once per container)",
				slog.String("reason", err.Error()))
		}
		fillErr(results, errors.Join(ErrVisibilityNotChanged, err))
		return
	}
	copy(results, refused)
}

func fillErr(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}
