package isolate

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	p := Policy{After: time.Second, LagBytes: 1000, RejoinLagBytes: 100}
	cases := []struct {
		name string
		o    Observation
		want Action
	}{
		{"live, flowing", Observation{Mode: Live, BlockedFor: 0, BacklogBytes: 10}, Stay},
		{"live, blocked briefly", Observation{Mode: Live, BlockedFor: 999 * time.Millisecond}, Stay},
		{"live, blocked past the threshold", Observation{Mode: Live, BlockedFor: time.Second}, Detach},
		{"live, paused", Observation{Mode: Live, Paused: true}, Detach},
		{"live, failing with room in its queue", Observation{Mode: Live, Failing: true}, Stay},
		{"live, failing with its queue half full", Observation{Mode: Live, Failing: true, QueueHalfFull: true}, Detach},
		{"live, failing and blocking", Observation{Mode: Live, Failing: true, BlockedFor: time.Millisecond}, Detach},
		{"live, queue half full but delivering", Observation{Mode: Live, QueueHalfFull: true}, Stay},
		{"live, backlog at the limit", Observation{Mode: Live, BacklogBytes: 1000}, Stay},
		{"live, backlog past the limit", Observation{Mode: Live, BacklogBytes: 1001}, Detach},
		{"catching up, far behind", Observation{Mode: CatchingUp, BehindBytes: 101}, Stay},
		{"catching up, close", Observation{Mode: CatchingUp, BehindBytes: 100, Delivering: true}, Rejoin},
		{"catching up, close but delivering nothing", Observation{Mode: CatchingUp, BehindBytes: 100}, Stay},
		{"catching up, nothing left", Observation{Mode: CatchingUp, BehindBytes: 0}, Rejoin},
		{"catching up, close but paused", Observation{Mode: CatchingUp, BehindBytes: 0, Paused: true}, Stay},
		{"catching up, close but its queue is full", Observation{Mode: CatchingUp, CatchupFull: true}, Stay},
		{"catching up, close but failing", Observation{Mode: CatchingUp, Failing: true}, Stay},
		{"catching up, close but a rejoin was just called off", Observation{Mode: CatchingUp, Backoff: true}, Stay},
		{"rejoining, flowing", Observation{Mode: Rejoining, BlockedFor: 10 * time.Millisecond}, Stay},
		{"rejoining, blocked past the threshold", Observation{Mode: Rejoining, BlockedFor: 2 * time.Second}, Detach},
		{"rejoining, paused", Observation{Mode: Rejoining, Paused: true}, Detach},
		// A large backlog is what a rejoining sink has by design: it
		// waits for its catch-up stream to reach the boundary.
		{"rejoining, backlog", Observation{Mode: Rejoining, BacklogBytes: 1 << 30}, Stay},
	}
	for _, c := range cases {
		if got := p.Decide(c.o); got != c.want {
			t.Errorf("%s: Decide = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestDecideDefaults(t *testing.T) {
	var p Policy
	if got := p.Decide(Observation{Mode: Live, BlockedFor: DefaultAfter - time.Millisecond}); got != Stay {
		t.Errorf("blocked just under the default: %v, want Stay", got)
	}
	if got := p.Decide(Observation{Mode: Live, BlockedFor: DefaultAfter}); got != Detach {
		t.Errorf("blocked for the default: %v, want Detach", got)
	}
	if got := p.Decide(Observation{Mode: Live, BacklogBytes: 1 << 40}); got != Stay {
		t.Errorf("LagBytes 0 must not detach on backlog: %v", got)
	}
	if got := p.Decide(Observation{Mode: CatchingUp, BehindBytes: DefaultRejoinLag + 1}); got != Stay {
		t.Errorf("behind more than the default: %v, want Stay", got)
	}
}

func TestSlotName(t *testing.T) {
	a := SlotName("walcast_orders", "hook")
	b := SlotName("walcast_orders", "Hook")
	if a == b {
		t.Fatalf("different sinks share catch-up slot %s", a)
	}
	if !IsCatchupSlot("walcast_orders", a) || IsCatchupSlot("walcast_orders", "walcast_orders") || IsCatchupSlot("walcast_other", a) {
		t.Fatal("IsCatchupSlot does not tell the pipeline's catch-up slots apart")
	}
	long := SlotName("walcast_"+string(make([]byte, 0))+"a_very_long_pipeline_name_that_goes_on_and_on_and_on_x", "s")
	if len(long) > 63 {
		t.Fatalf("slot name %q longer than 63", long)
	}
}
