package capture

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/pgtest"
)

// nopConsumer takes every event and confirms nothing new.
type nopConsumer struct{ flush atomic.Uint64 }

func (c *nopConsumer) Event(context.Context, change.Event, func()) error { return nil }
func (c *nopConsumer) Commit(_, end uint64)                              { c.flush.Store(end) }
func (c *nopConsumer) Flush() uint64                                     { return c.flush.Load() }
func (c *nopConsumer) AdvanceIdle(uint64) bool                           { return false }

// TestCloseFinalStatusProxyBlackHole streams through a TCP proxy that then
// silences the replication connection (a black hole: no answer, no
// reset), until the socket's send queue is full (what minutes of status
// updates to a vanished server come to), and
// checks that Close, the stop's final standby status update, returns
// within its context's deadline instead of blocking in the write.
func TestCloseFinalStatusProxyBlackHole(t *testing.T) {
	ctx := context.Background()
	cl := pgtest.New(t, pgtest.Options{})
	dsn := cl.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	for _, sql := range []string{
		`CREATE TABLE t (id int PRIMARY KEY)`,
		`CREATE PUBLICATION p FOR TABLE t`,
		`SELECT pg_create_logical_replication_slot('s', 'pgoutput')`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	proxy := cl.Proxy(t)
	c := New(Config{DSN: proxy.DSN(dsn), Slot: "s", Publication: "p", Tables: []string{"public.t"}}, &nopConsumer{})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	deadline := time.Now().Add(time.Minute)
	for !c.Streaming() {
		if time.Now().After(deadline) {
			t.Fatal("the capture did not start streaming within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := proxy.SilenceReplication(); n == 0 {
		t.Fatal("no replication connection to silence: the stream does not go through the proxy")
	}
	stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context ending")
	}

	// Fill the socket's send queue with well-formed status updates (the
	// server would never read them anyway), then leave the socket as Run
	// left it: without a write deadline.
	frame, err := (&pgproto3.CopyData{Data: append([]byte{pglogrepl.StandbyStatusUpdateByteID}, make([]byte, 33)...)}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	var block []byte
	for len(block) < 64<<10 {
		block = append(block, frame...)
	}
	sock := c.conn.Conn()
	filled := 0
	// Large writes first, then single updates: the last large write may
	// leave room for a small one, and the final update is small. The
	// kernel keeps making room for a while (segments in flight are
	// acknowledged into the proxy's receive buffer, the send buffer grows
	// by autotuning), so fill in rounds until a pause frees nothing.
	write := func(b []byte, wait time.Duration) (int, bool) {
		sock.SetWriteDeadline(time.Now().Add(wait))
		n, err := sock.Write(b)
		filled += n
		if err != nil && !isTimeout(err) {
			t.Fatalf("filling the send queue: %v", err)
		}
		if filled > 1<<30 {
			t.Fatal("wrote 1 GiB into a black-holed connection without blocking")
		}
		return n, err == nil
	}
	for round := 0; ; round++ {
		for _, b := range [][]byte{block, frame} {
			for {
				if _, ok := write(b, 200*time.Millisecond); !ok {
					break
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
		if n, _ := write(frame, 300*time.Millisecond); n == 0 {
			break
		}
		if round == 20 {
			t.Fatal("the send queue still takes data after 20 rounds of filling")
		}
	}
	sock.SetWriteDeadline(time.Time{})
	t.Logf("send queue full after %d KiB", filled>>10)

	const within = 2 * time.Second
	cctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- c.Close(cctx) }()
	select {
	case err := <-closed:
		took := time.Since(start)
		t.Logf("Close returned after %s: %v", took.Round(time.Millisecond), err)
		// closeConn's goodbye has its own bound within ctx: the whole
		// stop ends close to the deadline, never long after it.
		if took > within+3*time.Second {
			t.Fatalf("Close took %s with a deadline of %s", took.Round(time.Millisecond), within)
		}
		if err == nil {
			t.Fatal("Close reported the final status update sent to a server that stopped reading")
		}
	case <-time.After(30 * time.Second):
		// Unblock the write before failing, so that nothing leaks.
		proxy.Close()
		<-closed
		t.Fatalf("Close still blocked 30s after it was called with a deadline of %s: the final standby status update has no deadline", within)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
