//go:build linux

package capture

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// The walsender sends each decoded change as its own message and flushes
// it at once. Over TCP each such send also wakes the reader, and on one
// host that wake-up, with the receive path it runs, is charged to the
// walsender: streaming to a reader that keeps up costs the walsender far
// more kernel time per change than streaming to one that lags, whose
// sends merely queue (measured in docs/benchmarks.md, "Round 5"). While a
// backlog streams, the
// replication socket's receive low-water mark (SO_RCVLOWAT) is therefore
// raised, so the kernel wakes the reader once per batchBytes instead of
// once per change. The mark is lowered again as soon as a wait of
// batchWait finds less than that queued: a change that arrives alone is
// read at once, and the end of a burst is read at most batchWait late.
const (
	// batchEnter is how much one read must find queued before batches
	// start: the stream is then clearly ahead of the reader, which only
	// happens while a backlog streams or a large transaction arrives.
	batchEnter = 64 << 10
	// batchBytes is the low-water mark while batching.
	batchBytes = 64 << 10
	// batchWait bounds a wait for a batch to fill. It is a little longer
	// than a batch takes to fill at the walsender's pace (see "Round 5"
	// in docs/benchmarks.md), so a wait that runs out means the burst is
	// over.
	batchWait = 4 * time.Millisecond
	// batchReadSize is the read buffer: one read takes several batches.
	batchReadSize = 256 << 10
)

// batchedConn is the replication connection's TCP socket, read in large
// chunks with a low-water mark that follows the stream's pace. Only the
// capture loop reads it; deadlines may also be set by pgconn's context
// watcher from another goroutine, so the mode and the caller's deadline
// are under mu. The caller's read deadline is honoured: a wait for a batch
// ends at that deadline at the latest.
type batchedConn struct {
	net.Conn
	raw syscall.RawConn

	buf    []byte // read by Read only
	rp, wp int

	mu       sync.Mutex
	batching bool
	deadline time.Time // the caller's read deadline
}

// dialBatched wraps dial so that TCP connections are read in batches.
// Anything else (a Unix socket, a socket whose options cannot be set) is
// returned as it is: batching is an optimisation, never a requirement.
func dialBatched(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tcp, ok := conn.(*net.TCPConn)
		if !ok {
			return conn, nil
		}
		raw, err := tcp.SyscallConn()
		if err != nil {
			return conn, nil
		}
		return &batchedConn{Conn: conn, raw: raw, buf: make([]byte, batchReadSize)}, nil
	}
}

func (c *batchedConn) Read(p []byte) (int, error) {
	if c.rp == c.wp {
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.buf[c.rp:c.wp])
	c.rp += n
	return n, nil
}

// fill reads what the socket holds into the empty buffer, waiting for
// data as the mode says.
func (c *batchedConn) fill() error {
	c.rp, c.wp = 0, 0
	for {
		c.mu.Lock()
		if c.batching {
			c.Conn.SetReadDeadline(c.batchDeadline())
		}
		c.mu.Unlock()
		n, err := c.Conn.Read(c.buf)
		if n > 0 {
			c.wp = n
			if n >= batchEnter {
				c.mu.Lock()
				if !c.batching {
					c.setBatching(true)
				}
				c.mu.Unlock()
			}
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		c.mu.Lock()
		over := c.batching && (c.deadline.IsZero() || time.Now().Before(c.deadline))
		if over {
			// Less than a batch came within batchWait: the burst is
			// over. Wake on every byte again and read what is there.
			c.setBatching(false)
		}
		c.mu.Unlock()
		if !over {
			return err
		}
	}
}

// batchDeadline is the socket's deadline while batching: batchWait from
// now, or the caller's deadline if that comes first. Callers hold mu.
func (c *batchedConn) batchDeadline() time.Time {
	wait := time.Now().Add(batchWait)
	if !c.deadline.IsZero() && c.deadline.Before(wait) {
		return c.deadline
	}
	return wait
}

// setBatching sets the socket's low-water mark for the mode. If the
// option cannot be set the socket stays as it is and so does the mode.
// Callers hold mu.
func (c *batchedConn) setBatching(on bool) {
	mark := 1
	if on {
		mark = batchBytes
	}
	var serr error
	if err := c.raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, mark)
	}); err != nil || serr != nil {
		return
	}
	c.batching = on
	if !on {
		c.Conn.SetReadDeadline(c.deadline)
	}
}

func (c *batchedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	if c.batching {
		// A read waiting for a batch must still end at t if t comes
		// first (pgconn cancels a read by setting a past deadline).
		return c.Conn.SetReadDeadline(c.batchDeadline())
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *batchedConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
