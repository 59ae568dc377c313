//go:build linux

package capture

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// batchedPair returns the client end of a loopback TCP connection, read
// through batchedConn, and the server end to write to.
func batchedPair(t *testing.T) (*batchedConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	conn, err := dialBatched(d.DialContext)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { conn.Close(); server.Close() })
	bc, ok := conn.(*batchedConn)
	if !ok {
		t.Fatalf("dialBatched returned %T for a TCP connection", conn)
	}
	return bc, server
}

func lowWaterMark(t *testing.T, c *batchedConn) int {
	t.Helper()
	var mark int
	var gerr error
	if err := c.raw.Control(func(fd uintptr) {
		mark, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil || gerr != nil {
		t.Fatalf("read SO_RCVLOWAT: %v %v", err, gerr)
	}
	return mark
}

// A backlog is read in batches, byte for byte; a message that arrives
// alone after it is read within a few batch waits, not at the caller's
// deadline; and the caller's deadline still ends a read.
func TestBatchedConn(t *testing.T) {
	c, server := batchedPair(t)

	// A backlog of message-sized writes, queued before the reader looks.
	var sent bytes.Buffer
	r := rand.New(rand.NewPCG(1, 2))
	for sent.Len() < 4<<20 {
		msg := make([]byte, 100+r.IntN(200))
		for i := range msg {
			msg[i] = byte(r.IntN(256))
		}
		sent.Write(msg)
	}
	writeErr := make(chan error, 1)
	go func() {
		rest := sent.Bytes()
		for len(rest) > 0 {
			n := min(len(rest), 100+r.IntN(200))
			if _, err := server.Write(rest[:n]); err != nil {
				writeErr <- err
				return
			}
			rest = rest[n:]
		}
		writeErr <- nil
	}()
	time.Sleep(100 * time.Millisecond) // let the socket fill

	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, sent.Len())
	buf := make([]byte, 8192) // pgproto3's read size
	sawBatching := false
	for n := 0; n < len(got); {
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %d of %d bytes: %v", n, len(got), err)
		}
		n += copy(got[n:], buf[:m])
		if c.isBatching() {
			sawBatching = true
			if mark := lowWaterMark(t, c); mark != batchBytes {
				t.Fatalf("batching with SO_RCVLOWAT %d, want %d", mark, batchBytes)
			}
		}
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent.Bytes()) {
		t.Fatal("bytes read differ from bytes written")
	}
	if !sawBatching {
		t.Fatal("a 4 MiB backlog was never read in batches")
	}

	// The burst is over: one small message must not wait for a batch.
	go func() {
		time.Sleep(50 * time.Millisecond)
		server.Write([]byte("alone"))
	}()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	lone := make([]byte, 5)
	if _, err := io.ReadFull(c, lone); err != nil {
		t.Fatalf("read the lone message: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second || string(lone) != "alone" {
		t.Fatalf("lone message %q read after %v; it should come within a few batch waits (%v)", lone, took, batchWait)
	}
	if c.isBatching() || lowWaterMark(t, c) != 1 {
		t.Fatalf("still batching after a quiet spell (SO_RCVLOWAT %d)", lowWaterMark(t, c))
	}

	// The caller's deadline ends a wait in either mode.
	for _, batching := range []bool{false, true} {
		c.mu.Lock()
		c.setBatching(batching)
		c.mu.Unlock()
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		start := time.Now()
		_, err := c.Read(buf)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("batching=%v: read past the deadline returned %v, want a timeout", batching, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("batching=%v: deadline 1 ms away ended the read after %v", batching, took)
		}
	}

	// pgconn cancels a blocked read from another goroutine by setting a
	// past deadline: a read waiting for a batch must end at once, not
	// after the wait it started with.
	c.mu.Lock()
	c.setBatching(true)
	c.mu.Unlock()
	c.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		c.SetDeadline(time.Unix(1, 0))
	}()
	start = time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read cancelled by a past deadline returned %v, want a timeout", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("cancelled read returned after %v", took)
	}
}

func (c *batchedConn) isBatching() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.batching
}

// TestBatchedConnHearsSmallMessageWhileBatching: the receive timeout
// (silence.go) counts on every byte that arrives being read within a
// check or two, batching or not. A keepalive reply is far below the
// batch's low-water mark: a read whose caller's deadline runs out first
// returns a timeout and leaves it queued, and the next read (the capture
// loop's next, with a fresh deadline) must return it after at most a
// batch wait, not wait for a batch that never fills.
func TestBatchedConnHearsSmallMessageWhileBatching(t *testing.T) {
	c, server := batchedPair(t)
	c.mu.Lock()
	c.setBatching(true)
	c.mu.Unlock()
	if _, err := server.Write([]byte("keepalive")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // queued before the reader looks
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(time.Microsecond))
	if n, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with an expired deadline returned %q, %v; want a timeout", buf[:n], err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(feedbackDelay))
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "keepalive" {
		t.Fatalf("the next read returned %q, %v; want the queued keepalive", buf[:n], err)
	}
	if took := time.Since(start); took >= feedbackDelay {
		t.Fatalf("the queued keepalive was read after %v, no sooner than the read's whole deadline", took)
	}
}
