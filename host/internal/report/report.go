package report

import (
	"time"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Pipeline is a pipeline to report on.
type Pipeline struct {
	Name  string
	Slot  string // the pipeline's replication slot
	Sinks []Sink // in the pipeline file's order
	// DB is the source database: its walcast schema (the pipeline's
	// control plane), pg_replication_slots, the leadership, the catch-up
	// slots and the backfills.
	DB control.Querier
	// Capture is the source block as walcast run would capture it: with
	// Parts.Operations, Gather diagnoses against it whether walcast run
	// would refuse to start.
	Capture capture.Config
}

// Sink is a sink as the pipeline file declares it.
type Sink struct {
	ID, Type string
	Durable  bool
}

// Parts says what Gather reads beyond what every view shows: the slot,
// and each sink's checkpoint, pause, parked events, usage and backlog.
type Parts struct {
	// Operations adds who leads the pipeline and who stands by, the
	// leader's replication streams, why walcast run would refuse to
	// start, the gaps accepted, the sinks stopped, the catch-up slots and
	// the backfills: what walcast status shows.
	Operations bool
	// RecentParked, when above 0, adds at most that many of the most
	// recently failed parked events: the console lists them.
	RecentParked int
}

// State is a pipeline as Gather read it.
type State struct {
	Pipeline string
	Slot     Slot
	// Paused is when the whole pipeline was paused; zero when it is not.
	Paused time.Time
	Sinks  []SinkState // in Pipeline.Sinks' order
	// ParkedTotal counts the pipeline's parked events, those of sinks no
	// longer in the pipeline file included.
	ParkedTotal int
	// RecentParked are the most recently failed parked events, newest
	// first (Parts.RecentParked).
	RecentParked []parking.Event

	// The rest is read with Parts.Operations.

	// Leader holds the pipeline's leadership lock: the walcast run that
	// streams it; nil when none does.
	Leader *leader.Holder
	// Standbys are the other walcast run processes of the pipeline, in
	// the order they started.
	Standbys []leader.Holder
	// Streams are the leader's replication streams as it last reported
	// them, fresh reports only: the pipeline's slot first, then the
	// catch-up slots by name. Empty without a leader.
	Streams []reports.Stream
	// Refusal is why walcast run would refuse to stream from the slot;
	// nil when it would not.
	Refusal *capture.GapError
	// ResyncOnGap is set when the pipeline heals a gap by itself
	// (source.on_gap = "resync"): walcast run then records the Refusal's
	// gap and resyncs instead of refusing.
	ResyncOnGap bool
	Gaps        []lineage.Gap
	Catchups    []isolate.SlotState
	Backfills   []backfill.Backfill
}

// Slot is the pipeline's replication slot as pg_replication_slots shows
// it.
type Slot struct {
	Name      string
	Exists    bool
	Active    bool
	ActivePID int
	Confirmed string
	// Retained is the WAL the slot keeps (from restart_lsn), Lag the WAL
	// written after its confirmed position; both in bytes.
	Retained int64
	Lag      int64
	// WALStatus is pg_replication_slots.wal_status: "lost" once
	// PostgreSQL removed WAL the slot needed, "unreserved" past
	// max_wal_size.
	WALStatus string
	// Current is the server's WAL position when the slot was read,
	// whether it exists or not.
	Current uint64
}

// SinkState is one sink's state.
type SinkState struct {
	Sink
	// Checkpoint is the sink's stored position; nil before the first.
	Checkpoint *cdc.EventID
	// Paused: by itself or with the whole pipeline, since PausedSince.
	Paused      bool
	PausedSince time.Time
	Parked      parking.Summary
	// Backlog is what the daemon streaming the pipeline reported lately;
	// nil without a fresh report.
	Backlog *reports.Backlog
	// Usage are the sink's hourly counters, newest first.
	Usage []reports.Usage
	// Failure is why the sink stopped; nil while it has not
	// (Parts.Operations).
	Failure *reports.SinkFailure
}
