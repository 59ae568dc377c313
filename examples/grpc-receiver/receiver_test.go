package main

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

const testToken = "s3cret"

// fixture is a Receiver served on 127.0.0.1, a client calling it the way
// walcast's grpc sink does, and a record of every effect applied.
type fixture struct {
	t      *testing.T
	client receiverv1.ReceiverClient

	mu      sync.Mutex
	applied []string // event ids, in the order their effects ran
	failOn  string   // an event id whose effect fails
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageBytes))
	receiverv1.RegisterReceiverServer(srv, NewReceiver(ReceiverConfig{
		Token: testToken,
		Apply: func(_ context.Context, e Event) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if e.ID.String() == f.failOn {
				return errors.New("database unavailable")
			}
			f.applied = append(f.applied, e.ID.String())
			return nil
		},
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	f.client = receiverv1.NewReceiverClient(conn)
	return f
}

// deliver makes one call with the given token ("" for none).
func (f *fixture) deliver(token string, ids ...string) (*receiverv1.DeliverResponse, error) {
	f.t.Helper()
	req := &receiverv1.DeliverRequest{Pipeline: "shop", Sink: "orders"}
	for _, id := range ids {
		req.Events = append(req.Events, &receiverv1.Event{
			Id: id, Schema: "public", Table: "orders", Op: "insert", Key: []byte(`{"id":1}`),
			Payload: []byte(`{"id":"` + id + `","schema":"public","table":"orders","op":"insert","key":{"id":1},"new":{"id":1},"old":null}`),
		})
	}
	ctx := f.t.Context()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return f.client.Deliver(ctx, req)
}

func (f *fixture) set(failOn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOn = failOn
}

func (f *fixture) appliedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.applied...)
}

func TestRedeliveredBatchIsRecognisedAsDuplicates(t *testing.T) {
	f := newFixture(t)
	ids := []string{"0/16B3748:0", "0/16B3748:1", "0/16B3748:2"}
	if resp, err := f.deliver(testToken, ids...); err != nil || resp.GetDuplicates() != 0 {
		t.Fatalf("first delivery: %v, %v; want OK without duplicates", resp, err)
	}
	// The sink did not get the answer (a timeout, say) and delivers the
	// batch again.
	if resp, err := f.deliver(testToken, ids...); err != nil || resp.GetDuplicates() != 3 {
		t.Fatalf("second delivery: %v, %v; want OK with 3 duplicates", resp, err)
	}
	if got := f.appliedIDs(); !slices.Equal(got, ids) {
		t.Errorf("effects ran for %v, want each of %v once", got, ids)
	}
}

// A failed effect answers UNAVAILABLE, so walcast delivers the batch
// again; what was applied before the failure is then skipped, the rest
// applied.
func TestFailedBatchResumesAfterTheAppliedEvents(t *testing.T) {
	f := newFixture(t)
	ids := []string{"0/16B3748:0", "0/16B3748:1", "0/16B3748:2"}
	f.set("0/16B3748:1")
	if _, err := f.deliver(testToken, ids...); status.Code(err) != codes.Unavailable {
		t.Fatalf("delivery with a failing effect: %v, want UNAVAILABLE (retried by walcast)", err)
	}
	f.set("")
	if resp, err := f.deliver(testToken, ids...); err != nil || resp.GetDuplicates() != 1 {
		t.Fatalf("redelivery: %v, %v; want OK with 1 duplicate", resp, err)
	}
	if got := f.appliedIDs(); !slices.Equal(got, ids) {
		t.Errorf("effects ran for %v, want %v", got, ids)
	}
}

// Batches of different rows are delivered in parallel, so a lower id can
// arrive after a higher one. It is new, not a duplicate: that is why the
// receiver keeps a set of ids rather than the highest id seen.
func TestLowerIDArrivingLaterIsNotADuplicate(t *testing.T) {
	f := newFixture(t)
	if _, err := f.deliver(testToken, "0/1A:0"); err != nil {
		t.Fatal(err)
	}
	if resp, err := f.deliver(testToken, "0/A:0"); err != nil || resp.GetDuplicates() != 0 {
		t.Fatalf("batch with a lower id: %v, %v; want it processed", resp, err)
	}
	if got := f.appliedIDs(); !slices.Equal(got, []string{"0/1A:0", "0/A:0"}) {
		t.Errorf("effects ran for %v", got)
	}
}

func TestTokenIsRequired(t *testing.T) {
	f := newFixture(t)
	for _, token := range []string{"", "guess"} {
		if _, err := f.deliver(token, "0/16B3748:0"); status.Code(err) != codes.Unauthenticated {
			t.Errorf("token %q: %v, want UNAUTHENTICATED", token, err)
		}
	}
	if got := f.appliedIDs(); len(got) != 0 {
		t.Errorf("effects ran for refused calls: %v", got)
	}
}

// An event whose id cannot be parsed is refused permanently: walcast parks
// it rather than retrying what can never succeed.
func TestUnreadableEventIsInvalidArgument(t *testing.T) {
	f := newFixture(t)
	if _, err := f.deliver(testToken, "0/16B3748:0", "not-an-id"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("batch with a bad id: %v, want INVALID_ARGUMENT", err)
	}
	if got := f.appliedIDs(); len(got) != 0 {
		t.Errorf("effects ran for a refused batch: %v", got)
	}
}
