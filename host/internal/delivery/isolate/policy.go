package isolate

import "time"

// Mode is a sink's relation to the pipeline's stream.
type Mode int32

// The modes, in the order a sink goes through them.
const (
	Live Mode = iota
	CatchingUp
	Rejoining
)

func (m Mode) String() string {
	switch m {
	case CatchingUp:
		return "catching_up"
	case Rejoining:
		return "rejoining"
	default:
		return "live"
	}
}

// Policy says when a sink is detached and when it rejoins.
type Policy struct {
	// After: a sink that holds the whole stream back (its queue full)
	// for this long is detached. Default DefaultAfter.
	After time.Duration
	// LagBytes: a sink whose backlog (events read and not resolved)
	// passes this many payload bytes is detached. 0: never for that
	// reason.
	LagBytes int64
	// RejoinLagBytes: a catching-up sink rejoins once its stream is this
	// close (in WAL bytes) to the pipeline's. Default DefaultRejoinLag.
	RejoinLagBytes int64
}

// The defaults; docs/slow-sinks.md lists them.
const (
	DefaultAfter     = 200 * time.Millisecond
	DefaultRejoinLag = 4 << 20
)

func (p Policy) withDefaults() Policy {
	if p.After <= 0 {
		p.After = DefaultAfter
	}
	if p.RejoinLagBytes <= 0 {
		p.RejoinLagBytes = DefaultRejoinLag
	}
	return p
}

// Observation is what the decision looks at, sampled a few times a second.
type Observation struct {
	Mode Mode
	// BlockedFor is how long the pipeline's fan-out has been waiting for
	// room in the sink's queue (live or rejoining), 0 when it is not.
	BlockedFor time.Duration
	// Paused: an operator paused the sink (walcast pause).
	Paused bool
	// BacklogBytes: payload bytes the sink read from the pipeline's
	// stream and has not resolved (live).
	BacklogBytes int64
	// BehindBytes: how far the catch-up stream is behind the pipeline's
	// stream in WAL (catching up).
	BehindBytes int64
	// QueueHalfFull: the sink's queue on the pipeline's stream is more
	// than half full (live).
	QueueHalfFull bool
	// CatchupFull: the catch-up queue is more than half full: the sink
	// is still busy with what it read.
	CatchupFull bool
	// Failing: a delivery attempt failed within the last second and none
	// succeeded since (live: of the pipeline's stream; catching up: of
	// the catch-up stream, where rejoining now would only fill the
	// pipeline's queue again).
	Failing bool
	// Backoff: a rejoin was called off recently; the next one waits.
	Backoff bool
	// Delivering: a delivery of the catch-up stream succeeded within the
	// last second.
	Delivering bool
}

// Action is what to do next.
type Action int

// The actions.
const (
	Stay Action = iota
	// Detach a live sink (copy the slot, start catching up), or send a
	// rejoining sink back to catching up.
	Detach
	// Rejoin: start the handover to the live stream.
	Rejoin
)

// Decide returns what to do about a sink in the observed state.
func (p Policy) Decide(o Observation) Action {
	p = p.withDefaults()
	switch o.Mode {
	case Live:
		if o.Paused || o.BlockedFor >= p.After || (p.LagBytes > 0 && o.BacklogBytes > p.LagBytes) {
			return Detach
		}
		// A sink whose destination fails will not drain its queue before
		// it fills: detach it before it holds the others back at all.
		if o.Failing && (o.QueueHalfFull || o.BlockedFor > 0) {
			return Detach
		}
	case CatchingUp:
		// Close enough, and either nothing left or delivering: a sink
		// that delivers nothing (a receiver that hangs) is not catching
		// up, however small its backlog, and would only fill the
		// pipeline's queue again.
		if !o.Paused && !o.CatchupFull && !o.Failing && !o.Backoff && o.BehindBytes <= p.RejoinLagBytes &&
			(o.BehindBytes == 0 || o.Delivering) {
			return Rejoin
		}
	case Rejoining:
		if o.Paused || o.BlockedFor >= p.After {
			return Detach
		}
	}
	return Stay
}
