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
	"unsafe"
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

// queued is how many bytes the socket holds unread.
func queued(t *testing.T, c *batchedConn) int {
	t.Helper()
	var n int32
	var errno syscall.Errno
	if err := c.raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		t.Fatalf("read the socket's queue: %v %v", err, errno)
	}
	return int(n)
}

// waitQueued waits until the socket holds at least n bytes unread.
func waitQueued(t *testing.T, c *batchedConn, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); queued(t, c) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the socket holds %d bytes a minute after they were written, want %d", queued(t, c), n)
		}
	}
}

// readWithin reads once and returns what Read did and how long it took;
// a read still blocked after d fails the test (the cleanup's Close ends
// it), so that a read that ignores its deadline fails instead of hanging.
func readWithin(t *testing.T, c *batchedConn, buf []byte, d time.Duration) (int, time.Duration, error) {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	start := time.Now()
	done := make(chan result, 1)
	go func() {
		n, err := c.Read(buf)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		return r.n, time.Since(start), r.err
	case <-time.After(d):
		t.Fatalf("a read still blocked after %s", d)
		return 0, 0, nil
	}
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
// deadline; and the caller's deadline still ends a read. The times are
// logged; what fails the test is a read that ends at (or ignores) its
// deadline, each far off, so that a loaded machine cannot.
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
	waitQueued(t, c, batchEnter) // a backlog before the reader looks

	c.SetReadDeadline(time.Now().Add(time.Minute))
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
	c.SetReadDeadline(time.Now().Add(time.Minute))
	lone := make([]byte, 5)
	if _, err := io.ReadFull(c, lone); err != nil {
		t.Fatalf("read the lone message: %v (it should come within a few batch waits (%v), not at the read's deadline)", err, batchWait)
	}
	if string(lone) != "alone" {
		t.Fatalf("lone message read as %q", lone)
	}
	t.Logf("the lone message was read %s after the read began", time.Since(start).Round(time.Microsecond))
	if c.isBatching() || lowWaterMark(t, c) != 1 {
		t.Fatalf("still batching after a quiet spell (SO_RCVLOWAT %d)", lowWaterMark(t, c))
	}

	// The caller's deadline ends a wait in either mode.
	for _, batching := range []bool{false, true} {
		c.mu.Lock()
		c.setBatching(batching)
		c.mu.Unlock()
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, took, err := readWithin(t, c, buf, time.Minute)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("batching=%v: read past the deadline returned %v, want a timeout", batching, err)
		}
		t.Logf("batching=%v: a deadline 1 ms away ended the read after %s", batching, took.Round(time.Microsecond))
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
	_, took, err := readWithin(t, c, buf, time.Minute)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read cancelled by a past deadline returned %v, want a timeout", err)
	}
	t.Logf("a read cancelled by a past deadline returned after %s", took.Round(time.Microsecond))
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
// batch wait, not wait for a batch that never fills (which would end the
// read at its deadline, with a timeout). The time is logged.
func TestBatchedConnHearsSmallMessageWhileBatching(t *testing.T) {
	c, server := batchedPair(t)
	c.mu.Lock()
	c.setBatching(true)
	c.mu.Unlock()
	if _, err := server.Write([]byte("keepalive")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c, len("keepalive")) // queued before the reader looks
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(time.Microsecond))
	if n, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with an expired deadline returned %q, %v; want a timeout", buf[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, took, err := readWithin(t, c, buf, 2*time.Minute)
	if err != nil || string(buf[:n]) != "keepalive" {
		t.Fatalf("the next read returned %q, %v; want the queued keepalive before the read's deadline", buf[:n], err)
	}
	t.Logf("the queued keepalive was read after %s", took.Round(time.Microsecond))
}
