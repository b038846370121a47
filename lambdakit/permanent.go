package lambdakit

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"
)

// ErrPermanent marks a record's failure as permanent: the message will never
// succeed however often it comes back (a body that breaks the message
// format, say). Wrap an error with Permanent; errors.Is(err, ErrPermanent)
// then reports true.
//
// With BatchOptions.DeadLetters set, the batch adapter sends such a message
// to the dead-letter queue at once and reports the record succeeded, instead
// of letting it come back until the queue's maxReceiveCount moves it there.
// By default it does the same for poison, the errors lambdakit itself
// cannot get past (see IsPoison), which need no marking.
var ErrPermanent = errors.New("lambdakit: permanent failure")

// Permanent wraps err so that errors.Is(err, ErrPermanent) reports true,
// while errors.Is and errors.As still see err and its chain. Its message is
// err's. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }

// IsPermanent reports whether err is marked permanent with Permanent (or
// wraps ErrPermanent otherwise). The default BatchOptions.IsPermanent
// accepts these errors and poison (IsPoison); set BatchOptions.IsPermanent
// to IsPermanent to accept only the errors marked permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// IsPoison reports whether err says that the message lambdakit was given
// can never be processed, however often it comes back: its body does not
// decode into the handler's type (Typed, TypedResult: ErrDecode), it has
// no idempotency key or one that cannot be read (Idempotent's KeyFunc:
// ErrNoKey, ErrInvalidKey), its payload cannot be read (PayloadBody,
// PayloadFields: ErrDecode), or its key was used before with another
// payload (ErrPayloadMismatch). A message's body and attributes are the
// same on every delivery, so no redelivery mends these.
//
// Poison is a verdict lambdakit gives where it reads a message, bound to
// that delivery (its ReceiptHandle, else its MessageId); the sentinel
// errors alone are not poison. Under Batch, only a verdict on the message
// being delivered (or a copy of it, as a middleware that unwraps an SNS
// envelope makes, whatever MessageId it gives the copy) counts: the same errors from code the handler runs for something
// else — a Typed handler on a downstream reply wrapped as a message, a
// nested Once.Do with an empty key or another payload, an error of its own
// wrapping ErrDecode, a KeyFunc or PayloadFunc of yours failing otherwise
// — come back as any failure does, since a retry may get past them. A
// panic is never poison, whatever its value wraps: it says that the code
// stopped half-way, which a fix of the code mends. An error that joins a
// verdict with another failure is poison all the same: a handler that got
// past a verdict (a fallback decode that worked) should not return it.
//
// The default BatchOptions.IsPermanent accepts poison as well as the errors
// marked with Permanent, so that with BatchOptions.DeadLetters set a poison
// message goes to the dead-letter queue on its first delivery instead of
// holding its FIFO group back until the queue's maxReceiveCount. A store
// error, ErrInProgress, a lost lease or the deadline is never poison.
// Compose the predicates for a rule of your own:
//
//	o.IsPermanent = func(err error) bool {
//		return lambdakit.IsPermanent(err) || lambdakit.IsPoison(err) || errors.Is(err, errCardExpired)
//	}
func IsPoison(err error) bool {
	if err == nil || panicked(err) {
		return false
	}
	var d *deliveredError
	if errors.As(err, &d) {
		return (d.id.receiptHandle != "" || d.id.messageID != "") && hasPoison(d.err, d.id)
	}
	return hasPoison(err, messageIdentity{})
}

// messageIdentity names one delivery of one message: a copy of the
// message names the same, a message made up by the handler does not.
type messageIdentity struct{ messageID, receiptHandle string }

// names reports whether a verdict on the message id applies to the
// delivery of: the receipt handle names a delivery, and a copy keeps it
// even when a middleware gives the copy a MessageId of its own (an SNS
// unwrap taking the SNS message's ID); a message the handler makes up has
// none. Without a receipt handle (tests, tools), the MessageId decides.
func (id messageIdentity) names(of messageIdentity) bool {
	if of.receiptHandle != "" {
		return id.receiptHandle == of.receiptHandle
	}
	return of.messageID != "" && id.messageID == of.messageID
}

func identityOf(msg *events.SQSMessage) messageIdentity {
	return messageIdentity{msg.MessageId, msg.ReceiptHandle}
}

// poisonError is lambdakit's verdict that the message id names is poison;
// see IsPoison. It adds nothing to the error's message or chain.
type poisonError struct {
	err error
	id  messageIdentity
}

func (e *poisonError) Error() string { return e.err.Error() }
func (e *poisonError) Unwrap() error { return e.err }

// poison marks err as poison of msg.
func poison(msg *events.SQSMessage, err error) error {
	if err == nil {
		return nil
	}
	return &poisonError{err: err, id: identityOf(msg)}
}

// deliveredError is a record's error as Batch hands it to IsPermanent: it
// names the message delivered, so that IsPoison counts only verdicts on
// that message.
type deliveredError struct {
	err error
	id  messageIdentity
}

func (e *deliveredError) Error() string { return e.err.Error() }
func (e *deliveredError) Unwrap() error { return e.err }

// hasPoison reports whether err's tree holds a poison verdict on the
// message of, or on any message when of is zero.
func hasPoison(err error, of messageIdentity) bool {
	stack := []error{err}
	for n := 0; len(stack) > 0 && n < 10_000; n++ { // bounded, as a verdict deeper than that is no verdict
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p, ok := e.(*poisonError); ok && (of == messageIdentity{} || p.id.names(of)) {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				stack = append(stack, next)
			}
		case interface{ Unwrap() []error }:
			for _, next := range u.Unwrap() {
				if next != nil {
					stack = append(stack, next)
				}
			}
		}
	}
	return false
}

// permanentOrPoison is the default of BatchOptions.IsPermanent: errors
// marked with Permanent, and poison; never a panic, whatever its value
// wraps: a panic says the code stopped half-way, which a retry after a fix
// mends. Except after the effect (ErrFailedAfterEffect): no retry runs the
// code again then, and the message waits for someone to reconcile it.
func permanentOrPoison(err error) bool {
	if errors.Is(err, ErrFailedAfterEffect) {
		return IsPermanent(err)
	}
	return !panicked(err) && (IsPermanent(err) || IsPoison(err))
}

// DeadLetterSender sends a message that failed permanently to a dead-letter
// queue. The batch adapter calls it with the message as received and the
// record's error, and reports the record succeeded only when it returns nil;
// otherwise the record fails as usual and the message comes back, so nothing
// is lost.
//
// lambdakit itself sends nothing: producer.DeadLetterQueue is the SQS
// implementation, in a package of its own so that functions that do not use
// it do not link the SQS client.
type DeadLetterSender interface {
	SendDeadLetter(ctx context.Context, msg *events.SQSMessage, reason error) error
}

// deadLetter is the batch's hook for a record whose handler returned err: a
// permanent failure is sent to the dead-letter queue, and then counts as
// handled. It returns the record's outcome: nil once the message is in the
// dead-letter queue, else err (joined with the sender's error, if sending
// failed). ctx is the records' context, which the deadline guard cancels;
// the send runs with sendCtx, which lasts until the batch answers.
func (b *batch) deadLetter(ctx, sendCtx context.Context, msg *events.SQSMessage, err error) error {
	if err == nil || b.opts.DeadLetters == nil || ctx.Err() != nil {
		// Past the deadline guard there is no time left to send; the
		// record comes back and is sent on its next delivery.
		return err
	}
	// IsPermanent and the sender get the error naming the delivered
	// message, so that IsPoison gives both the batch's answer.
	reason := &deliveredError{err: err, id: identityOf(msg)}
	if permanent, perr := b.permanent(reason); perr != nil || !permanent {
		return errors.Join(err, perr) // a panicking IsPermanent fails the record as usual
	}
	if serr := b.sendDeadLetter(sendCtx, msg, reason); serr != nil {
		return &DeadLetterError{Err: err, SendErr: serr}
	}
	return nil
}

// permanent calls IsPermanent, turning a panic into an error, so that a
// broken predicate fails only its record, as a broken handler does.
func (b *batch) permanent(err error) (permanent bool, perr error) {
	if pe := protect(func() { permanent = b.opts.IsPermanent(err) }, nil); pe != nil {
		return false, pe
	}
	return permanent, nil
}

// sendDeadLetter calls the sender, turning a panic into a failed send, so
// that a broken sender fails only its record, as a broken handler does.
func (b *batch) sendDeadLetter(ctx context.Context, msg *events.SQSMessage, reason error) (err error) {
	if pe := protect(func() { err = b.opts.DeadLetters.SendDeadLetter(ctx, msg, reason) }, nil); pe != nil {
		return pe
	}
	return err
}

// DeadLetterError is the failure of a record that failed permanently and
// could not be sent to the dead-letter queue: it fails as usual, and comes
// back. errors.Is and errors.As see both errors.
type DeadLetterError struct {
	Err     error // the record's own, permanent, failure
	SendErr error // why the dead-letter queue did not take the message
}

// Error implements error.
func (e *DeadLetterError) Error() string {
	return e.Err.Error() + " (sending it to the dead-letter queue failed: " + e.SendErr.Error() + ")"
}

// Unwrap returns both errors.
func (e *DeadLetterError) Unwrap() []error { return []error{e.Err, e.SendErr} }
