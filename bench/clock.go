package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The one method every drain is timed by (docs/benchmarks.md, "How a
// drain is timed"): the clock starts when the harness starts the tool's
// process and stops when the drain is complete — pg_recvlogical exiting at
// --endpos, or for walcast (library mode and the daemon) the slot's
// confirmed_flush_lsn reaching the same end LSN. When the slot's
// walsender first became active is recorded too, so that a figure timed
// from there (the harness's method before issue 33) can be read off the
// same run.

// clock is one drain's timestamps.
type clock struct {
	start  time.Time // the harness started the tool's process
	active time.Time // its walsender was first seen active on the slot
	end    time.Time // the drain was complete
}

// fill sets r's seconds from c.
func (c clock) fill(r *Drain) {
	r.Seconds = c.end.Sub(c.start).Seconds()
	r.ActiveSeconds = c.end.Sub(c.active).Seconds()
	r.StartupSeconds = c.active.Sub(c.start).Seconds()
}

// endCondition says when a drain is complete.
type endCondition int

const (
	// endAtExit: the tool exits by itself at the end (pg_recvlogical
	// --endpos).
	endAtExit endCondition = iota
	// endAtConfirmed: the slot's confirmed_flush_lsn reached the end LSN.
	endAtConfirmed
)

// exit is a child's end: done is closed once it exited, at is when (set
// before done is closed).
type exit struct {
	done chan struct{}
	at   time.Time
}

func newExit() *exit { return &exit{done: make(chan struct{})} }

func (x *exit) close() {
	x.at = time.Now()
	close(x.done)
}

// waitEnd returns when the drain of slot is complete by end. For
// endAtConfirmed the slot is polled every 10 ms (the same poll for every
// tool timed that way); a tool that exits first is complete if the slot
// is confirmed at the end once it is gone (library mode confirms on
// Close, then exits), and then its end is its exit.
func (e *env) waitEnd(ctx context.Context, poll *pgx.Conn, slot string, ex *exit, end endCondition, timeout time.Duration) (time.Time, error) {
	if end == endAtExit {
		select {
		case <-ex.done:
			return ex.at, nil
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(timeout):
			return time.Time{}, fmt.Errorf("did not finish draining within %s", timeout)
		}
	}
	t, err := e.waitConfirmed(ctx, poll, slot, e.endLSN, ex.done, timeout)
	if err == nil || !errors.Is(err, errExited) {
		return t, err
	}
	confirmed, qerr := slotConfirmed(ctx, poll, slot)
	if qerr != nil {
		return time.Time{}, qerr
	}
	if confirmed < e.endLSN {
		return time.Time{}, fmt.Errorf("%w (confirmed %s of %s)", err, lsnText(confirmed), lsnText(e.endLSN))
	}
	return ex.at, nil
}

// slotConfirmed reads slot's confirmed_flush_lsn.
func slotConfirmed(ctx context.Context, conn *pgx.Conn, slot string) (uint64, error) {
	var confirmed uint64
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed)
	if err != nil {
		return 0, fmt.Errorf("poll slot %s: %w", slot, err)
	}
	return confirmed, nil
}

func lsnText(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)) }
