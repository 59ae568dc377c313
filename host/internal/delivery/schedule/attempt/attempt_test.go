package attempt

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A kind survives wrapping; an error this package did not make is a
// retry.
func TestKindOf(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		err   error
		kind  Kind
		pause time.Duration
	}{
		{boom, KindRetry, 0},
		{Retryable(boom), KindRetry, 0},
		{fmt.Errorf("deliver: %w", Permanent(boom)), KindPermanent, 0},
		{Fatal(boom), KindFatal, 0},
		{fmt.Errorf("deliver: %w", Throttled(time.Second, boom)), KindThrottle, time.Second},
	} {
		if k, p := KindOf(tc.err); k != tc.kind || p != tc.pause {
			t.Errorf("KindOf(%v) = %s, %s; want %s, %s", tc.err, k, p, tc.kind, tc.pause)
		}
		if tc.err.Error() != "boom" && !strings.HasSuffix(tc.err.Error(), ": boom") {
			t.Errorf("%v: the text is not the error's", tc.err)
		}
	}
	if Permanent(nil) != nil || Throttled(time.Second, nil) != nil {
		t.Error("classifying nil gave an error")
	}
}

// Check refuses an answer that names an event outside the batch, one
// event twice, or a failure without an error.
func TestResultCheck(t *testing.T) {
	boom := errors.New("boom")
	if err := (Result{Failed: []Failure{{Index: 0, Err: boom}, {Index: 2, Err: boom}}}).Check(3); err != nil {
		t.Errorf("a valid answer: %v", err)
	}
	for _, r := range []Result{
		{Failed: []Failure{{Index: 3, Err: boom}}},
		{Failed: []Failure{{Index: -1, Err: boom}}},
		{Failed: []Failure{{Index: 1, Err: boom}, {Index: 1, Err: boom}}},
		{Failed: []Failure{{Index: 1}}},
	} {
		if err := r.Check(3); err == nil {
			t.Errorf("Check(%+v) accepted it", r)
		}
	}
}
