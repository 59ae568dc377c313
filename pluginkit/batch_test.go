package pluginkit

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
	"github.com/walcast/walcast/proto/sink/wire"
)

// recordingSink is a Sink that remembers what its last calls were told
// and answers Deliver with err.
type recordingSink struct {
	identity    Identity
	tables      []string
	config      json.RawMessage
	replay, gap bool
	epoch       string
	err         error
}

func (r *recordingSink) Info() Info { return Info{Name: "rec"} }

func (r *recordingSink) Configure(ctx context.Context, config json.RawMessage) error {
	r.identity, r.tables, r.config = IdentityFrom(ctx), TablesFrom(ctx), config
	return nil
}

func (r *recordingSink) Open(context.Context) (OpenResult, error) { return OpenResult{}, nil }

func (r *recordingSink) Deliver(ctx context.Context, _ []Event) (DeliverResult, error) {
	r.replay, r.gap, r.epoch = IsReplay(ctx), GapBefore(ctx), EpochOf(ctx)
	return DeliverResult{Duplicates: 1}, r.err
}

func (r *recordingSink) Close(context.Context) error { return nil }

// A BatchError's events travel one by one in a version 2 answer; a
// version 1 answer fails the batch with the kind that lets the host find
// them.
func TestBatchErrorOnTheWire(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		failed map[int]error
		v2     []wire.EventFault // nil: the batch fails as a whole
		v1     wire.Fault
	}{
		{"one permanent", map[int]error{3: Permanent(boom)},
			[]wire.EventFault{{Index: 3, Fault: wire.Fault{Kind: wire.FaultPermanent, Msg: "boom"}}},
			wire.Fault{Kind: wire.FaultPermanent}},
		{"permanent and retryable", map[int]error{5: boom, 1: Permanent(boom)},
			[]wire.EventFault{{Index: 1, Fault: wire.Fault{Kind: wire.FaultPermanent, Msg: "boom"}}, {Index: 5, Fault: wire.Fault{Kind: wire.FaultRetryable, Msg: "boom"}}},
			wire.Fault{Kind: wire.FaultRetryable}},
		{"throttled", map[int]error{0: Throttled(time.Second, boom), 2: Throttled(3*time.Second, boom)},
			[]wire.EventFault{{Index: 0, Fault: wire.Fault{Kind: wire.FaultThrottled, Msg: "throttled for 1s: boom", RetryAfter: time.Second}},
				{Index: 2, Fault: wire.Fault{Kind: wire.FaultThrottled, Msg: "throttled for 3s: boom", RetryAfter: 3 * time.Second}}},
			wire.Fault{Kind: wire.FaultThrottled, RetryAfter: 3 * time.Second}},
		{"a fatal event stops the sink", map[int]error{0: boom, 1: Fatal(boom)}, nil, wire.Fault{Kind: wire.FaultFatal, Msg: "boom"}},
		{"no event named", map[int]error{}, nil, wire.Fault{Kind: wire.FaultRetryable}},
	}
	for _, tt := range tests {
		be := &BatchError{Failed: tt.failed}
		srv := &server{sink: legacySink{&recordingSink{err: be}}}
		req := &wire.DeliverRequest{Events: make([]Event, 6)}

		resp, err := v2Service{srv: srv}.deliverWire(context.Background(), req)
		switch {
		case tt.v2 == nil && err == nil:
			t.Errorf("%s: v2 answered %v, want the batch to fail", tt.name, resp)
		case tt.v2 != nil && err != nil:
			t.Errorf("%s: v2 failed the batch: %v", tt.name, err)
		case tt.v2 != nil:
			r := resp.(*sinkv2.DeliverResponse)
			got, derr := wire.DecodeEventFaults(r.GetFailed(), len(req.Events))
			if derr != nil || !reflect.DeepEqual(got, tt.v2) || r.GetDuplicates() != 1 {
				t.Errorf("%s: v2 answered %+v (%v), duplicates %d; want %+v", tt.name, got, derr, r.GetDuplicates(), tt.v2)
			}
		}

		_, err = v1Service{srv: srv}.deliverWire(context.Background(), req)
		want := tt.v1
		if want.Msg == "" {
			want.Msg = be.Error()
		}
		if got := wire.FaultOf(err); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: v1 answered %+v, want %+v", tt.name, got, want)
		}
	}
}

// A plain error and a success read the same in both versions.
func TestDeliverAnswersAgree(t *testing.T) {
	sink := &recordingSink{}
	srv := &server{sink: legacySink{sink}}
	req := &wire.DeliverRequest{Events: make([]Event, 2), Replay: true}
	r1, err1 := v1Service{srv: srv}.deliverWire(context.Background(), req)
	r2, err2 := v2Service{srv: srv}.deliverWire(context.Background(), req)
	if err1 != nil || err2 != nil || r1.(*sinkv1.DeliverResponse).GetDuplicates() != 1 || r2.(*sinkv2.DeliverResponse).GetDuplicates() != 1 || !sink.replay {
		t.Errorf("success: %v %v / %v %v (replay seen: %v)", r1, err1, r2, err2, sink.replay)
	}
	sink.err = Permanent(errors.New("refused"))
	_, err1 = v1Service{srv: srv}.deliverWire(context.Background(), req)
	_, err2 = v2Service{srv: srv}.deliverWire(context.Background(), req)
	if f1, f2 := wire.FaultOf(err1), wire.FaultOf(err2); f1.Kind != wire.FaultPermanent || !reflect.DeepEqual(f1, f2) {
		t.Errorf("failure: v1 %+v, v2 %+v", f1, f2)
	}
}
