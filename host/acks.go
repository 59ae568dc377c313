package host

import (
	"errors"
	"fmt"
	"sync"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ErrInvalidAck is wrapped by the error Stream.Ack returns for an id that
// Next never returned or that is lower than an earlier ack. Such an ack is
// a bug in the consumer; ignoring it silently could hide lost changes.
var ErrInvalidAck = errors.New("invalid ack")

// acks is the stream's position bookkeeping, shared by the capture
// goroutine (commit, advanceIdle, position) and the consumer's goroutines
// (deliver, ack). It tracks transactions, not events, so its memory does
// not grow with the size of a transaction.
//
// A committed transaction is released — its end LSN becomes the flush
// position — once the cumulative ack reaches its last event. Transactions
// are released in commit order, so the flush position never passes an
// unacknowledged event.
type acks struct {
	mu sync.Mutex
	// acked is the highest acknowledged id; everything at or below it is
	// acknowledged.
	acked cdc.EventID
	// delivered has one entry per transaction with events returned by
	// Next and not yet all acknowledged, in commit order. It is what tells
	// a real id from an invented one.
	delivered ack.FIFO[deliveredTx]
	// committed holds committed, unreleased transactions in commit order,
	// each marked by the last event handed over before its commit (for a
	// transaction without captured changes, the last event of an earlier
	// one, or zero). It holds the flush position.
	committed *ack.Releases[cdc.EventID]
	// seen is the through of the latest commit record read.
	seen cdc.EventID
}

// deliveredTx: Next has returned events commitLSN:0 .. commitLSN:last.
// Indexes inside a transaction are contiguous, so two numbers describe
// them all.
type deliveredTx struct {
	commitLSN uint64
	last      uint64
}

func newAcks(start uint64) *acks {
	return &acks{committed: ack.NewReleases(start, cdc.EventID.Compare)}
}

// deliver records that Next returned id. Ids arrive in stream order.
func (a *acks) deliver(id cdc.EventID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := a.delivered.Len(); n > 0 {
		if last := a.delivered.At(n - 1); last.commitLSN == id.CommitLSN {
			last.last = id.Index
			return
		}
	}
	a.delivered.Push(deliveredTx{commitLSN: id.CommitLSN, last: id.Index})
}

// ack acknowledges every event at or below id.
func (a *acks) ack(id cdc.EventID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch c := id.Compare(a.acked); {
	case c == 0 && !id.IsZero():
		return nil // acking the same event again changes nothing
	case c < 0:
		return fmt.Errorf("ack %s: lower than the earlier ack %s: %w", id, a.acked, ErrInvalidAck)
	}
	// Every entry before id's transaction is acknowledged by this ack;
	// id itself must lie inside a delivered transaction.
	i := 0
	for i < a.delivered.Len() && a.delivered.At(i).commitLSN < id.CommitLSN {
		i++
	}
	if i == a.delivered.Len() || a.delivered.At(i).commitLSN != id.CommitLSN || a.delivered.At(i).last < id.Index {
		return fmt.Errorf("ack %s: Next never returned this event: %w", id, ErrInvalidAck)
	}
	a.delivered.Drop(i)
	a.acked = id
	a.committed.Release(a.acked)
	return nil
}

// commit records the end of a transaction whose last handed-over event is
// through.
func (a *acks) commit(through cdc.EventID, endLSN uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.committed.Commit(through, endLSN)
	if through.Compare(a.seen) > 0 {
		a.seen = through
	}
	// The consumer may have acked the last event before capture read the
	// commit record.
	a.committed.Release(a.acked)
}

// advanceIdle moves the flush position to a keepalive's WAL end when
// nothing is in flight: every event handed over (the last being last) is
// acknowledged and every transaction released. Capture calls it only
// between transactions.
func (a *acks) advanceIdle(walEnd uint64, last cdc.EventID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.committed.AdvanceIdle(walEnd, a.acked.Compare(last) >= 0)
}

// awaitingCommit reports whether the acknowledged events reach into a
// transaction whose commit record capture has not read yet: acking its
// last event cannot release it until then.
func (a *acks) awaitingCommit() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.acked.IsZero() && a.seen.Compare(a.acked) < 0
}

// position is the LSN that may be confirmed to PostgreSQL.
func (a *acks) position() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.committed.Flush()
}
