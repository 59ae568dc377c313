package wire

import (
	"reflect"
	"strings"
	"testing"
	"time"

	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
)

// Each failed event travels with its index, its kind, its text and, for a
// throttle, its pause; both sides read back what the other wrote.
func TestEventFaultsRoundTrip(t *testing.T) {
	want := []EventFault{
		{Index: 3, Fault: Fault{Kind: FaultPermanent, Msg: "record too large"}},
		{Index: 0, Fault: Fault{Kind: FaultThrottled, Msg: "quota", RetryAfter: 1500 * time.Millisecond}},
		{Index: 7, Fault: Fault{Kind: FaultRetryable, Msg: "leader moved"}},
	}
	got, err := DecodeEventFaults(EncodeEventFaults(want), 8)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip: %+v, want %+v", got, want)
	}
	if got, err := DecodeEventFaults(nil, 8); got != nil || err != nil {
		t.Errorf("no failures: %v, %v", got, err)
	}
	// A kind that is neither throttled nor permanent leaves as retryable.
	fatal := EncodeEventFaults([]EventFault{{Index: 1, Fault: Fault{Kind: FaultFatal, Msg: "x"}}})
	if fatal[0].GetKind() != sinkv2.Failure_FAILURE_RETRYABLE {
		t.Errorf("fatal event fault encoded as %v", fatal[0].GetKind())
	}
}

// An answer naming an event the batch does not have, or one event twice,
// is refused as a whole.
func TestEventFaultsRefused(t *testing.T) {
	for _, tc := range []struct {
		failed []*sinkv2.EventFailure
		want   string
	}{
		{[]*sinkv2.EventFailure{{Index: 3}}, "named event 3 of a batch of 3"},
		{[]*sinkv2.EventFailure{{Index: 1}, {Index: 1}}, "event 1 of the batch as failed twice"},
	} {
		if _, err := DecodeEventFaults(tc.failed, 3); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeEventFaults(%v) = %v, want %q", tc.failed, err, tc.want)
		}
	}
}
