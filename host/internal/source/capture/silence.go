package capture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// A replication connection can go silent without failing: a NAT or a
// firewall forgets the flow, or the server's machine vanishes without a
// reset. The socket then stays open for as long as the kernel keeps it
// (TCP keepalives are answered by whatever still holds the other end, such
// as a proxy), reads only time out, and the pipeline would deliver nothing
// and log nothing, while its leadership lock, on another connection, stays
// healthy. Like PostgreSQL's own wal_receiver_timeout, capture therefore
// ends a stream on which nothing has arrived for the receive timeout, and
// reconnects. A healthy but idle server sends nothing by itself while its
// client confirms regularly, so halfway through the timeout the stream asks
// for a keepalive (a status update with the reply flag), which any server
// that still reads the connection answers at once: only a stream that is
// really dead stays silent for the whole timeout.
//
// Two things look like silence and are not. A message is handed over only
// once it has arrived whole, and a 200 MB row on a slow link (or from a
// loaded server) takes longer than the timeout to arrive: every byte read
// from the socket therefore counts as hearing from the server. And a
// server busy building one huge message (detoasting and printing a large
// value, reading a spilled transaction back) answers no keepalive until
// it is done; ending its stream restarts that work from the beginning, so
// the next stream would go silent the same way, for ever. A stream that
// goes silent soon after it started therefore doubles the next stream's
// timeout (up to maxStretch times the setting), and any other end of a
// stream resets it: a dead connection is still found, later each time it
// happens in a row, and a busy server is given the time it needs.

// maxStretch bounds how far successive silences stretch the receive
// timeout.
const maxStretch = 8

// fallbackReceiveTimeout is the receive timeout when the server's
// wal_sender_timeout is off (0) or cannot be read: twice PostgreSQL's
// default wal_sender_timeout.
const fallbackReceiveTimeout = 2 * time.Minute

// ReceiveTimeouts counts the streams ended because nothing arrived within
// the receive timeout. Successive captures may share one (a sink's
// catch-up streams), so that the count never goes back. Safe for
// concurrent use.
type ReceiveTimeouts struct {
	n    atomic.Uint64
	last atomic.Int64 // unix nanoseconds
}

// Count is how many streams were ended.
func (r *ReceiveTimeouts) Count() uint64 { return r.n.Load() }

// Last is when the last one was ended (zero when none was).
func (r *ReceiveTimeouts) Last() time.Time {
	if ns := r.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (r *ReceiveTimeouts) add(at time.Time) {
	r.last.Store(at.UnixNano())
	r.n.Add(1)
}

// receiveTimeoutError ends a stream on which nothing arrived for the
// receive timeout; Run reconnects after it.
type receiveTimeoutError struct {
	Slot            string
	Silent, Timeout time.Duration
	// Midway: the stream went silent in the middle of a transaction, or
	// before anything arrived on it: where a server busy building one
	// large message falls silent.
	Midway bool
}

func (e receiveTimeoutError) Error() string {
	return fmt.Sprintf("nothing received on the replication stream of slot %s for %s (receive_timeout %s), not even the keepalive requested after %s: the connection is presumed dead (a NAT or firewall dropped it, or the server vanished without a reset); reconnecting. If the server is merely slow to answer, raise the receive timeout (receive_timeout in the source block; StreamConfig.ReceiveTimeout in library mode)",
		e.Slot, e.Silent.Round(time.Millisecond), e.Timeout, e.Timeout/2)
}

// silenceWatch is the receive timeout's state for one stream. The capture
// loop alone uses it; what other goroutines read is in Capture's atomics.
type silenceWatch struct {
	timeout time.Duration
	// bytes is Capture.bytesIn as of the last check: a change means the
	// server is heard from, even in the middle of a message.
	bytes uint64
	// last is when the loop last saw something arrive, as of its last
	// check; heard says something arrived since that check.
	last  time.Time
	heard bool
	// pinged: a keepalive was asked for and nothing arrived since.
	pinged bool
	// any: a whole message arrived on this stream.
	any bool
}

// arrived notes that a message arrived. It runs once per message, so it
// only sets a flag; the clock is read at the loop's next check.
func (c *Capture) arrived(w *silenceWatch) {
	w.heard, w.any = true, true
	if w.pinged {
		w.pinged = false
		c.pingedAt.Store(0)
	}
}

// checkSilence is run by the capture loop at each of its checks (every
// checkEvery messages, and at least every feedbackDelay while nothing
// arrives): it asks for a keepalive halfway through the timeout, and ends
// the stream once the timeout has passed with nothing heard. Time the loop
// spends handing a message to a blocked consumer is never silence: that
// message set heard.
func (c *Capture) checkSilence(now time.Time, w *silenceWatch) error {
	if n := c.bytesIn.Load(); n != w.bytes {
		w.bytes, w.heard = n, true
	}
	if w.heard {
		w.heard, w.last = false, now
		c.heardAt.Store(now.UnixNano())
		return nil
	}
	silent := now.Sub(w.last)
	switch {
	case silent >= w.timeout:
		return receiveTimeoutError{Slot: c.cfg.Slot, Silent: silent, Timeout: w.timeout, Midway: !w.any || c.dec.InTransaction()}
	case silent >= w.timeout/2 && !w.pinged:
		if err := c.ping(); err != nil {
			return err
		}
		w.pinged = true
		c.pingedAt.Store(now.UnixNano())
	}
	return nil
}

// ping asks the server for a keepalive. It confirms nothing new: it repeats
// the position last sent on this connection (zero, which PostgreSQL
// ignores, before the first), so it is sent even while Config.Fence holds
// confirmations back.
func (c *Capture) ping() error {
	pos := pglogrepl.LSN(c.sentPos)
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), c.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pos,
		WALFlushPosition: pos,
		WALApplyPosition: pos,
		ClientTime:       time.Now(),
		ReplyRequested:   true,
	})
	if err != nil {
		return fmt.Errorf("ask the server for a keepalive: %w", err)
	}
	return nil
}

// stretchedTimeout is the receive timeout for the next stream: base,
// doubled for each stream in a row that went silent midway, at most
// maxStretch times base.
func (c *Capture) stretchedTimeout(base time.Duration) time.Duration {
	t := base
	for i := 0; i < c.silentStreak && t < maxStretch*base; i++ {
		t *= 2
	}
	if t != base {
		c.log.Warn("the last streams went silent midway through a transaction or before anything arrived: the server may be busy building one large message (a huge row, a spilled transaction), so this stream waits longer before it gives up",
			"slot", c.cfg.Slot, "silent_streams", c.silentStreak, "receive_timeout", t)
	}
	return t
}

// noteStreamEnd updates the silent streak when a stream has ended with
// err: a silence midway lengthens it, anything else ends it.
func (c *Capture) noteStreamEnd(err error) {
	var silent receiveTimeoutError
	if errors.As(err, &silent) && silent.Midway {
		c.silentStreak++
		return
	}
	c.silentStreak = 0
}

// dialCounted wraps dial so that every byte read from the connection is
// added to n.
func dialCounted(dial func(ctx context.Context, network, addr string) (net.Conn, error), n *atomic.Uint64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: conn, n: n}, nil
	}
}

// countedConn counts the bytes read from its connection. Deadlines and
// everything else go to the connection it wraps.
type countedConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.Add(uint64(n))
	}
	return n, err
}

// receiveTimeout is the receive timeout of the stream about to start on
// c.conn: Config.ReceiveTimeout, else twice the server's
// wal_sender_timeout (the server's own bound on a silent client, read on
// this connection so that a reloaded setting counts), else
// fallbackReceiveTimeout. What cannot be read is warned about once.
func (c *Capture) receiveTimeout(ctx context.Context) time.Duration {
	sender, err := c.walSenderTimeout(ctx)
	if t := c.cfg.ReceiveTimeout; t > 0 {
		if sender > t && !c.warnedShort {
			// While it decodes a large transaction whose changes it
			// filters out, the server reads its client only every
			// wal_sender_timeout/2, so a keepalive requested at half
			// this timeout may come too late.
			c.warnedShort = true
			c.log.Warn("receive_timeout is shorter than the server's wal_sender_timeout: a server busy decoding a large transaction may answer too late and the stream be ended for nothing; set receive_timeout to at least wal_sender_timeout (the default is twice it)",
				"receive_timeout", t, "wal_sender_timeout", sender)
		}
		return t
	}
	if err != nil {
		if !c.warnedUnread {
			c.warnedUnread = true
			c.log.Warn("cannot read the server's wal_sender_timeout; the receive timeout falls back to its default (set receive_timeout in the source block to choose it)",
				"err", err, "receive_timeout", fallbackReceiveTimeout)
		}
		return fallbackReceiveTimeout
	}
	if sender > 0 {
		return 2 * sender
	}
	// wal_sender_timeout = 0: the server never gives up on a silent
	// client, and never sends a keepalive unasked; the ones requested
	// are still answered.
	return fallbackReceiveTimeout
}

// walSenderTimeout reads the server's wal_sender_timeout on the
// replication connection (SHOW is a replication command).
func (c *Capture) walSenderTimeout(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("show wal_sender_timeout: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("show wal_sender_timeout: no value returned")
	}
	return parseGUCDuration(string(res[0].Rows[0][0]))
}

// parseGUCDuration parses a time setting as SHOW prints it ("60s", "1min",
// "500ms", "0"); a bare number is in milliseconds, wal_sender_timeout's
// unit.
func parseGUCDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '-' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse duration setting %q: %w", s, err)
	}
	units := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("parse duration setting %q: unknown unit %q", s, unit)
	}
	if n < 0 {
		return 0, nil // -1 or the like: no timeout
	}
	return time.Duration(n) * u, nil
}

// Silence reports how long nothing has arrived on the stream while a
// keepalive it asked for is unanswered (0 otherwise: the stream is heard
// from, or not yet due a keepalive), and the receive timeout of the
// current stream (0 before the first). Safe to call from any goroutine.
func (c *Capture) Silence() (silent, timeout time.Duration) {
	timeout = time.Duration(c.timeout.Load())
	if c.pingedAt.Load() == 0 || !c.streaming.Load() {
		return 0, timeout
	}
	return time.Since(time.Unix(0, c.heardAt.Load())), timeout
}

// ReceiveTimeouts counts the streams this capture ended for silence.
func (c *Capture) ReceiveTimeouts() *ReceiveTimeouts { return c.timeouts }
