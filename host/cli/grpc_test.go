package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

// TestGRPCSinkDeliversEveryChange runs walcast with the grpc sink against
// a Receiver served by the test. Inserts, updates and deletes in
// transactions of several sizes all arrive, byte for byte and in per-row
// order, including those committed while the receiver answered
// UNAVAILABLE: the sink retried them (nothing parked, max_attempts is
// high) and delivered them once it recovered. PostgreSQL's own
// test_decoding is the reference for what was committed.
func TestGRPCSinkDeliversEveryChange(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)`)
	truthSlot(t, dsn, db, "truth_grpcsink")
	rcv := newGRPCReceiver(t, "grpcsink", "rcv")
	pipeline := writePipeline(t, "grpcsink", dsn, []string{"public.items"}, sinkSpec{
		ID: "rcv", SinkType: "grpc", Batch: 50,
		Config: fmt.Sprintf("    address = %q\n    timeout = \"5s\"\n", rcv.addr),
		// A receiver that is down must not get events parked while the
		// test watches it retry.
		Extra: "    max_attempts = 100000\n",
	})
	proc := startCapturing(t, db, pipeline)

	// Healthy: one big transaction, then small ones mixing every op.
	exec1(t, db, `INSERT INTO items SELECT g, 0, 'café ☕ ' || g FROM generate_series(1, 150) g`)
	for i := range 15 {
		a := 1 + 10*i
		exec1(t, db, fmt.Sprintf(`BEGIN;
			UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d;
			DELETE FROM items WHERE id = %d;
			INSERT INTO items VALUES (%d, 1, 'new');
			COMMIT`, a, a+9, a, 1000+i))
	}
	const healthy = 150 + 15*12
	waitFor(t, "changes committed while the receiver is healthy", time.Minute, func() bool { return rcv.distinct() == healthy })

	// Down: every call is refused with UNAVAILABLE while more commits
	// arrive, until the sink has retried several times.
	rcv.setFailing(true)
	for i := range 10 {
		a := 2 + 10*i
		exec1(t, db, fmt.Sprintf(`BEGIN;
			UPDATE items SET v = v + 10 WHERE id BETWEEN %d AND %d;
			DELETE FROM items WHERE id IN (%d, %d);
			INSERT INTO items VALUES (%d, 2, 'during outage'), (%d, 2, 'during outage'), (%d, 2, 'during outage');
			COMMIT`, a, a+9, a, a+1, 2000+3*i, 2001+3*i, 2002+3*i))
	}
	// The host retries a failing batch once as it was, then splits it
	// until events go alone: from there a permanent error would park them.
	waitFor(t, "the sink to retry events one by one against the failing receiver", time.Minute, func() bool {
		return rcv.refusedCalls() >= 5 && rcv.refusedAlone() >= 3
	})
	if n := rcv.distinct(); n != healthy {
		t.Fatalf("%d events arrived while the receiver refused every call, want the %d from before", n, healthy)
	}

	// Back: everything refused arrives, and so does what comes next.
	rcv.setFailing(false)
	exec1(t, db, `UPDATE items SET v = v + 100`)
	want := truth(t, db, "truth_grpcsink", map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("all %d committed changes", len(want)), time.Minute, func() bool {
		// A parked event would never arrive: fail now rather than at the
		// deadline.
		var parked int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.parked`).Scan(&parked); err != nil {
			t.Fatal(err)
		}
		if parked != 0 {
			t.Fatalf("%d events parked; UNAVAILABLE must be retried", parked)
		}
		return rcv.distinct() == len(want)
	})
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to release the delivered WAL", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_grpcsink") >= end })
	proc.stop()

	dups := verify(t, want, rcv.events())
	t.Logf("%d changes, %d calls refused (%d of a single event), %d duplicate deliveries", len(want), rcv.refusedCalls(), rcv.refusedAlone(), dups)
}

// grpcReceiver is a Receiver service on 127.0.0.1 that records every event
// of every call it answers OK, in arrival order, and checks each request
// against the envelopes it carries.
type grpcReceiver struct {
	receiverv1.UnimplementedReceiverServer
	t              testing.TB
	addr           string
	pipeline, sink string // the names every request must carry

	mu      sync.Mutex
	got     []received
	failing bool
	refused int // calls answered UNAVAILABLE
	alone   int // of which carried a single event
}

func newGRPCReceiver(t testing.TB, pipeline, sink string) *grpcReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &grpcReceiver{t: t, addr: l.Addr().String(), pipeline: pipeline, sink: sink}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)) // as receiver.proto asks
	receiverv1.RegisterReceiverServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return r
}

func (r *grpcReceiver) Deliver(_ context.Context, req *receiverv1.DeliverRequest) (*receiverv1.DeliverResponse, error) {
	r.mu.Lock()
	if r.failing {
		r.refused++
		if len(req.GetEvents()) == 1 {
			r.alone++
		}
		r.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "receiver told to fail")
	}
	r.mu.Unlock()

	if req.GetPipeline() != r.pipeline || req.GetSink() != r.sink {
		r.t.Errorf("request from pipeline %q sink %q, want %q %q", req.GetPipeline(), req.GetSink(), r.pipeline, r.sink)
	}
	evs := make([]received, 0, len(req.GetEvents()))
	for _, e := range req.GetEvents() {
		rc, err := receivedFrom(e)
		if err != nil {
			r.t.Errorf("receiver: event %s: %v", e.GetId(), err)
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		evs = append(evs, rc)
	}
	r.mu.Lock()
	r.got = append(r.got, evs...)
	r.mu.Unlock()
	return &receiverv1.DeliverResponse{}, nil
}

// receivedFrom decodes an event's envelope and checks that the fields the
// request repeats beside it agree with it.
func receivedFrom(e *receiverv1.Event) (received, error) {
	env, err := decodeEnvelope(e.GetPayload())
	if err != nil {
		return received{}, fmt.Errorf("payload is not an envelope: %w", err)
	}
	rc, err := env.received(e.GetPayload())
	if err != nil {
		return received{}, err
	}
	var fieldKey bytes.Buffer
	if err := json.Compact(&fieldKey, e.GetKey()); err != nil {
		return received{}, fmt.Errorf("key field: %w", err)
	}
	if e.GetId() != env.ID || e.GetSchema() != env.Schema || e.GetTable() != env.Table || e.GetOp() != env.Op || fieldKey.String() != rc.Key {
		return received{}, fmt.Errorf("fields %s %s.%s %s %s disagree with the envelope's %s %s.%s %s %s",
			e.GetId(), e.GetSchema(), e.GetTable(), e.GetOp(), fieldKey.String(), env.ID, env.Schema, env.Table, env.Op, rc.Key)
	}
	return rc, nil
}

func (r *grpcReceiver) setFailing(v bool) {
	r.mu.Lock()
	r.failing = v
	r.mu.Unlock()
}

func (r *grpcReceiver) refusedCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

func (r *grpcReceiver) refusedAlone() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.alone
}

func (r *grpcReceiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// distinct is how many different ids arrived.
func (r *grpcReceiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make(map[pluginkit.EventID]bool, len(r.got))
	for _, e := range r.got {
		seen[e.ID] = true
	}
	return len(seen)
}
