package ack

// Releases is the slot's side of acknowledgement, shared by the daemon's
// Tracker and library mode: committed transactions in commit order, each
// released once every event through its last one is resolved, and the flush
// position — the end LSN of the last released transaction — which is all
// that may ever be confirmed to PostgreSQL.
//
// A transaction is identified by a mark M that orders like the events it
// covers: the Tracker uses the sequence number one past its last event,
// library mode the id of its last event handed over. cmp orders marks.
// Releases is not safe for concurrent use; its owner holds a lock.
type Releases[M any] struct {
	cmp     func(a, b M) int
	pending FIFO[pendingTx[M]]
	flush   uint64
}

type pendingTx[M any] struct {
	mark   M
	endLSN uint64
}

// NewReleases returns releases starting at flush, the position PostgreSQL
// already has (the slot's confirmed_flush_lsn), so that Flush never reports
// less than that.
func NewReleases[M any](flush uint64, cmp func(a, b M) int) *Releases[M] {
	return &Releases[M]{cmp: cmp, flush: flush}
}

// Commit records a transaction that ended at endLSN (pglogrepl's
// Commit.TransactionEndLSN, never CommitLSN: that would replay nothing of
// it and confirm its commit record before its events are resolved).
func (r *Releases[M]) Commit(mark M, endLSN uint64) {
	r.pending.Push(pendingTx[M]{mark: mark, endLSN: endLSN})
}

// Release releases every pending transaction whose mark is at or below
// resolved, in commit order, and reports whether the flush position moved.
func (r *Releases[M]) Release(resolved M) bool {
	moved := false
	n := 0
	for n < r.pending.Len() && r.cmp(r.pending.At(n).mark, resolved) <= 0 {
		if lsn := r.pending.At(n).endLSN; lsn > r.flush {
			r.flush, moved = lsn, true
		}
		n++
	}
	r.pending.Drop(n)
	return moved
}

// Pending is the number of committed transactions not yet released.
func (r *Releases[M]) Pending() int { return r.pending.Len() }

// Flush is the position that may be confirmed to PostgreSQL.
func (r *Releases[M]) Flush() uint64 { return r.flush }

// AdvanceIdle moves the flush position to walEnd, a keepalive's server WAL
// end, when nothing is in flight: the caller says every event handed over
// is resolved, and no committed transaction waits. The caller must also
// know that no transaction is open on the stream. It reports whether the
// position moved.
func (r *Releases[M]) AdvanceIdle(walEnd uint64, allResolved bool) bool {
	if !allResolved || r.pending.Len() > 0 || walEnd <= r.flush {
		return false
	}
	r.flush = walEnd
	return true
}

// FIFO is a queue over a slice that reuses its storage: popping moves a
// head index, and the live part is moved down once the head passes half.
type FIFO[T any] struct {
	buf  []T
	head int
}

// Len is the number of queued items.
func (q *FIFO[T]) Len() int { return len(q.buf) - q.head }

// At returns the i-th queued item, 0 being the oldest.
func (q *FIFO[T]) At(i int) *T { return &q.buf[q.head+i] }

// Push queues v.
func (q *FIFO[T]) Push(v T) { q.buf = append(q.buf, v) }

// Drop removes the n oldest items.
func (q *FIFO[T]) Drop(n int) {
	q.head += n
	if q.head == len(q.buf) {
		clear(q.buf)
		q.buf, q.head = q.buf[:0], 0
	} else if q.head > len(q.buf)/2 {
		q.buf = q.buf[:copy(q.buf, q.buf[q.head:])]
		q.head = 0
	}
}
