package pluginkit

import (
	"errors"
	"fmt"
	"time"
)

// Kind classifies a failed Deliver.
type Kind int

// The failure kinds a sink can report.
const (
	// KindRetryable is a transient failure: the host retries with backoff.
	// Any error not wrapped by this package is retryable.
	KindRetryable Kind = iota
	// KindThrottled means the destination asked us to slow down: the host
	// pauses the sink until RetryAfter and does not count the attempt.
	KindThrottled
	// KindPermanent means retrying the same batch cannot succeed: the host
	// isolates the event that fails and parks it.
	KindPermanent
	// KindFatal means the sink cannot deliver anything any more, whatever
	// the batch (a Kafka producer fenced by another one with its
	// transactional id). Parking would park the whole stream, so the host
	// stops the pipeline instead; the batch stays unacknowledged and is
	// delivered again after a restart, by a fresh plugin process.
	KindFatal
)

func (k Kind) String() string {
	switch k {
	case KindThrottled:
		return "throttled"
	case KindPermanent:
		return "permanent"
	case KindFatal:
		return "fatal"
	default:
		return "retryable"
	}
}

// Error is a classified sink failure.
type Error struct {
	Kind Kind
	// RetryAfter is how long to pause, for KindThrottled.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Kind == KindThrottled {
		return fmt.Sprintf("throttled for %s: %v", e.RetryAfter, e.Err)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable marks err as transient.
func Retryable(err error) error { return wrapKind(KindRetryable, 0, err) }

// Permanent marks err as one that retrying cannot fix.
func Permanent(err error) error { return wrapKind(KindPermanent, 0, err) }

// Fatal marks err as the end of this sink instance: see KindFatal.
func Fatal(err error) error { return wrapKind(KindFatal, 0, err) }

// Throttled reports that the destination asked to be left alone for d.
func Throttled(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("throttled by destination")
	}
	return wrapKind(KindThrottled, d, err)
}

func wrapKind(k Kind, d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: k, RetryAfter: d, Err: err}
}

// KindOf returns the kind of err and, for a throttled error, the pause asked
// for. Unclassified errors are retryable.
func KindOf(err error) (Kind, time.Duration) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, e.RetryAfter
	}
	return KindRetryable, 0
}

// ConfigError rejects one attribute of a sink's config block. The host turns
// it into a FILE:LINE:COL diagnostic pointing at that attribute. Several
// problems can be reported at once with errors.Join; see ConfigErrors.
type ConfigError struct {
	// Field is the attribute name in the config block; empty means the
	// block as a whole.
	Field string
	Msg   string
	// Table, when set, is the captured table ("schema.table", one of
	// TablesFrom) the problem is about. When Field is not written
	// in the config block, the host points at that table in the source's
	// tables list instead.
	Table string
}

// ConfigErrors returns every *ConfigError in err's tree (errors.Join
// included), in order.
func ConfigErrors(err error) []*ConfigError {
	var out []*ConfigError
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
			return
		case *ConfigError:
			out = append(out, x)
			return
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}
