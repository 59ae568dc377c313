package attempt

import (
	"errors"
	"fmt"
	"time"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Batch is what one attempt hands the sink.
type Batch struct {
	// Events are in id order. The slice is the caller's again once
	// Deliver returns (the scheduler reuses it for its next batch): a sink
	// that keeps events past its call copies the slice. The events'
	// bytes (Key, Payload) are never reused and may be kept.
	Events []cdc.Event
	// Replay: the events were parked and an operator asked for them
	// again; the sink must write them even at or below its own
	// checkpoint. A batch is all replayed events or none.
	Replay bool
	// GapBefore: events were dropped for this (non-durable) sink just
	// before this batch.
	GapBefore bool
	// Epoch names the series the events' ids belong to (the slot
	// incarnation they were read from; pluginkit.Batch.Epoch): a sink
	// skips by a checkpoint of its own only within one epoch.
	Epoch string
}

// Result is how the sink answered a batch it took.
type Result struct {
	// Duplicates counts events the sink recognised as already delivered.
	Duplicates int
	// Failed names the events that failed, each at most once, when every
	// other event of the batch was delivered.
	Failed []Failure
}

// Failure is one failed event of a batch.
type Failure struct {
	// Index is the event's position in Batch.Events.
	Index int
	// Err says why; KindOf classifies it (KindRetry, KindThrottle or
	// KindPermanent: a sink that cannot go on fails the whole batch).
	Err error
}

// Kind is what a failure asks of the scheduler.
type Kind int

// The kinds of failure.
const (
	// KindRetry: retry with backoff, and park after the sink's
	// max_attempts. The kind of every error not made by this package.
	KindRetry Kind = iota
	// KindThrottle: pause the sink for the time asked, without counting
	// an attempt.
	KindThrottle
	// KindPermanent: retrying cannot help; park what fails on its own
	// now.
	KindPermanent
	// KindFatal: the sink cannot deliver anything any more; stop it.
	KindFatal
)

// String names the kind as the delivery metrics' outcome label does.
func (k Kind) String() string {
	switch k {
	case KindThrottle:
		return "throttled"
	case KindPermanent:
		return "permanent"
	case KindFatal:
		return "fatal"
	default:
		return "retryable"
	}
}

// Error is a classified failure.
type Error struct {
	Kind Kind
	// Pause is how long a KindThrottle asks the sink to pause.
	Pause time.Duration
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Retryable marks err as worth retrying (as any unclassified error is);
// it and the functions below leave a nil err nil.
func Retryable(err error) error { return classify(KindRetry, 0, err) }

// Permanent marks err as one retrying cannot fix.
func Permanent(err error) error { return classify(KindPermanent, 0, err) }

// Fatal marks err as the end of the sink.
func Fatal(err error) error { return classify(KindFatal, 0, err) }

// Throttled marks err as the destination's request to pause for d.
func Throttled(d time.Duration, err error) error { return classify(KindThrottle, d, err) }

func classify(k Kind, d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, Pause: d, Err: err}
}

// KindOf returns err's kind and, for a KindThrottle, the pause it asks
// for. An error this package did not classify is a KindRetry.
func KindOf(err error) (Kind, time.Duration) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, e.Pause
	}
	return KindRetry, 0
}

// Check returns an error when r names an event outside a batch of n
// events, names one twice, or has a failure without an error: such an
// answer cannot be trusted, and the batch is retried as a whole.
func (r Result) Check(n int) error {
	seen := make(map[int]bool, len(r.Failed))
	for _, f := range r.Failed {
		switch {
		case f.Index < 0 || f.Index >= n:
			return fmt.Errorf("the sink named event %d of a batch of %d as failed", f.Index, n)
		case seen[f.Index]:
			return fmt.Errorf("the sink named event %d of the batch as failed twice", f.Index)
		case f.Err == nil:
			return fmt.Errorf("the sink named event %d of the batch as failed without saying why", f.Index)
		}
		seen[f.Index] = true
	}
	return nil
}
