package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/pluginkit"
)

// Pipeline is one decoded pipeline file: a PostgreSQL source and the sinks
// its changes fan out to. Every default is already applied.
type Pipeline struct {
	// Name names the pipeline; the slot and publication default to
	// "walcast_<Name>" and the checkpoint rows are keyed by it.
	Name      string
	NameRange hcl.Range

	Source Source
	Sinks  []Sink
}

// Source is the `source "postgres"` block.
type Source struct {
	// Type is the source label; only "postgres" exists.
	Type string
	// DSN is a libpq connection string or URL. It usually comes from env()
	// so that a password never sits in the file.
	DSN string
	// Tables are the captured tables, each "schema.table" as spelled in the
	// PostgreSQL catalog (case-sensitive, no quotes). Never in the walcast
	// schema.
	Tables []string
	// Slot and Publication are the replication slot and publication names.
	Slot        string
	Publication string
	// AllowKeyless delivers tables without a replica identity with a null
	// key instead of refusing to start.
	AllowKeyless bool
	// BackfillNewTables backfills a table the first time it appears in
	// Tables, the pipeline's first start included.
	BackfillNewTables bool
	// ReceiveTimeout ends and reconnects a replication stream on which
	// nothing arrived for this long; 0: twice the server's
	// wal_sender_timeout (see capture.Config.ReceiveTimeout).
	ReceiveTimeout time.Duration
	// OnGap is what a start does when changes were lost (a slot dropped,
	// invalidated or moved, a restored database, a lost catch-up slot, a
	// publication recreated): OnGapStop refuses to start, OnGapResync
	// records the gap, creates the new slot and resyncs the affected
	// tables to the affected sinks.
	OnGap string
	// DDLEvents installs an event trigger (a superuser's right) that
	// writes each DDL command on a table into the stream, so that its
	// schema event comes at the command's commit (docs/events.md).
	DDLEvents bool
	// Messages selects the application messages (pg_logical_emit_message)
	// that become message events; none without a messages block.
	Messages Messages
	// OnAttach is what a partition ATTACHed to a captured partitioned
	// table with rows in it gives: OnAttachBackfill reads those rows to
	// every sink as read events, OnAttachIgnore nothing.
	OnAttach string
	// OnDetach is what a partition DETACHed or dropped, or one partition
	// truncated, gives: OnDetachDelete a delete of each of its rows (at
	// the command's position where walcast's triggers see it, else
	// through a resync of the table), OnDetachEvent the same except that a
	// DETACH walcast's ddl_events trigger sees gives one detach event
	// instead of deletes, OnDetachIgnore nothing.
	OnDetach string

	DeclRange hcl.Range
	DSNRange  hcl.Range
	// TableRanges[i] is where Tables[i] was written, so that the host can
	// point at it when, say, the table does not exist.
	TableRanges []hcl.Range
}

// Messages is the source's `messages` block.
type Messages struct {
	// Prefixes: a message whose prefix starts with one of them becomes a
	// message event (docs/events.md). None may overlap walcast's own
	// "walcast." prefixes.
	Prefixes  []string
	DeclRange hcl.Range
}

// Sink is one `sink "<type>" "<id>"` block.
type Sink struct {
	// Type selects the plugin, the executable walcast-sink-<Type>.
	Type string
	// ID is unique in the pipeline; checkpoints and parked events are keyed
	// by it, so renaming a sink starts it from scratch.
	ID string
	// Durable sinks hold the replication slot back until they have
	// acknowledged; non-durable ones never do.
	Durable bool
	// Tables, when non-empty, restricts the sink to these source tables.
	Tables []string
	// Ops, when non-empty, restricts the sink to these operations.
	Ops      []pluginkit.Op
	Delivery Delivery
	// Env holds environment variables the sink's plugin process gets on
	// top of the few every plugin gets (the `env` attribute). Nothing else
	// of walcast's environment reaches a plugin.
	Env map[string]string
	// Format is the sink's output format, FormatWalcast (the envelope,
	// default), FormatDebezium, FormatSequin or FormatCloudEvents;
	// Debezium holds the settings of FormatDebezium.
	Format   string
	Debezium Debezium
	// CloudEvents holds the settings of FormatCloudEvents.
	CloudEvents CloudEvents
	// Rules are the sink's filter, route and transform (docs/filters.md),
	// already compiled once to check them; each scheduler compiles its own.
	Rules Rules
	// Outbox is the sink's outbox block (docs/outbox.md), nil without
	// one: inserts into the outbox table become the events the
	// application wrote there.
	Outbox *Outbox

	// Config is the sink's `config` block, left undecoded: only the plugin
	// knows its schema. Decode it with DecodeSinkConfig. It is an empty body
	// when the block is absent.
	Config hcl.Body
	// ConfigRange is the `config` block's header, or DeclRange when the
	// block is absent; diagnostics about the whole config point here.
	ConfigRange hcl.Range

	DeclRange hcl.Range
	TypeRange hcl.Range
	IDRange   hcl.Range
}

// Delivery is a sink's delivery policy (docs/architecture.md, "Delivery
// policy").
type Delivery struct {
	// BatchSize is the number of events per Deliver call.
	BatchSize int
	// RateLimit is in events per second; 0 means unlimited.
	RateLimit float64
	// Ordering is OrderingRow or OrderingStrict.
	Ordering string
	// MaxInFlight is the number of batches in flight at once under
	// OrderingRow.
	MaxInFlight int
	// RetryBase is the first retry delay; it doubles on every attempt.
	RetryBase time.Duration
	// MaxAttempts is the number of failed attempts before an event is
	// parked.
	MaxAttempts int
	// DeliverTimeout bounds one Deliver call; a timeout is a failed attempt.
	DeliverTimeout time.Duration
	// DetachAfter: a durable sink whose full queue holds the stream back
	// this long is detached to catch up on a slot of its own
	// (docs/slow-sinks.md).
	DetachAfter time.Duration
	// ThrottleMin and ThrottleMax bound the pause a throttled sink takes
	// whatever its destination asks for (Retry-After): at least
	// ThrottleMin, doubled per throttle in a row, at most ThrottleMax.
	ThrottleMin, ThrottleMax time.Duration

	// BatchSizeRange is where batch_size was written, nil when it was
	// defaulted: a plugin may then ask for a batch size of its own
	// (pluginkit.Info.BatchSize).
	BatchSizeRange *hcl.Range
	// MaxInFlightRange is where max_in_flight was written, nil when it was
	// defaulted: a plugin that asks for ordered delivery ignores it, and
	// that is worth a warning only when the user asked for something else.
	MaxInFlightRange *hcl.Range
}

// The ordering modes of a delivery block.
const (
	// OrderingRow keeps each row's changes in commit order and lets
	// different rows flow in parallel.
	OrderingRow = "row"
	// OrderingStrict keeps one batch in flight, in global commit order.
	OrderingStrict = "strict"
)

// The defaults of a delivery block; docs/pipelines.md lists
// them too.
const (
	DefaultBatchSize      = 100
	DefaultRateLimit      = 0
	DefaultOrdering       = OrderingRow
	DefaultMaxInFlight    = 8
	DefaultRetryBase      = 30 * time.Second
	DefaultMaxAttempts    = 5
	DefaultDeliverTimeout = 2 * time.Minute
	DefaultDetachAfter    = 200 * time.Millisecond
	DefaultThrottleMin    = time.Second
	DefaultThrottleMax    = 10 * time.Minute

	// MaxBatchSize bounds batch_size: a batch travels as one gRPC message
	// and one request to the destination.
	MaxBatchSize = 10000
)

// DefaultDelivery returns the policy of a sink without a delivery block.
func DefaultDelivery() Delivery {
	return Delivery{
		BatchSize:      DefaultBatchSize,
		RateLimit:      DefaultRateLimit,
		Ordering:       DefaultOrdering,
		MaxInFlight:    DefaultMaxInFlight,
		RetryBase:      DefaultRetryBase,
		MaxAttempts:    DefaultMaxAttempts,
		DeliverTimeout: DefaultDeliverTimeout,
		DetachAfter:    DefaultDetachAfter,
		ThrottleMin:    DefaultThrottleMin,
		ThrottleMax:    DefaultThrottleMax,
	}
}

// defaultDurable is whether a sink of this type holds the slot back when
// the file does not say. sse streams to browsers that come and go: it
// must never hold WAL for them.
func defaultDurable(sinkType string) bool {
	return sinkType != "sse"
}

// defaultSlotName is the default of both slot and publication.
func defaultSlotName(pipeline string) string {
	return "walcast_" + pipeline
}
