package schema

// The DDL of every table of the walcast schema, one constant per step of
// a migration, in the order of migrations (migrate.go). A released
// constant is never edited: a change is a new constant and a new step.
// Each comment says what the table holds; the package named there reads
// and writes it.

// ddl is the first control-plane schema (migration 1), exactly as walcast
// created it before the schema was versioned. Idempotent. walcast.pipelines
// belongs to package lineage, walcast.checkpoints to package checkpoints.
const ddl = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.pipelines (
	pipeline            text PRIMARY KEY,
	slot                text NOT NULL,
	publication         text NOT NULL,
	created_publication boolean NOT NULL DEFAULT false,
	created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walcast.checkpoints (
	pipeline   text NOT NULL,
	sink       text NOT NULL,
	event_id   text NOT NULL,
	commit_lsn pg_lsn NOT NULL,
	idx        bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// parkedDDL holds the parked events and the replay requests (package
// parked) and the hourly usage of each sink (package reports).
const parkedDDL = `
CREATE TABLE IF NOT EXISTS walcast.parked (
	pipeline        text NOT NULL,
	sink            text NOT NULL,
	event_id        text NOT NULL,
	commit_lsn      pg_lsn NOT NULL,
	idx             bigint NOT NULL,
	row_key         text NOT NULL,
	schema_name     text NOT NULL,
	table_name      text NOT NULL,
	op              text NOT NULL,
	key             bytea NOT NULL,
	payload         bytea NOT NULL,
	attempts        int NOT NULL,
	last_error      text NOT NULL,
	first_failed_at timestamptz NOT NULL,
	last_failed_at  timestamptz NOT NULL,
	PRIMARY KEY (pipeline, sink, commit_lsn, idx)
);
CREATE INDEX IF NOT EXISTS parked_row ON walcast.parked (pipeline, sink, row_key, commit_lsn, idx);
CREATE TABLE IF NOT EXISTS walcast.replay_requests (
	id           bigserial PRIMARY KEY,
	pipeline     text NOT NULL,
	sink         text NOT NULL,
	event_id     text,
	requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walcast.usage (
	pipeline  text NOT NULL,
	sink      text NOT NULL,
	hour      timestamptz NOT NULL,
	attempts  bigint NOT NULL DEFAULT 0,
	delivered bigint NOT NULL DEFAULT 0,
	failed    bigint NOT NULL DEFAULT 0,
	bytes     bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (pipeline, sink, hour)
);
`

// pauseDDL holds operator pauses (package pauses): a row per paused
// sink, and a row with an empty sink when the whole pipeline is paused.
const pauseDDL = `
CREATE TABLE IF NOT EXISTS walcast.pauses (
	pipeline text NOT NULL,
	sink     text NOT NULL,
	since    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// identityDDL records where a pipeline's checkpoints belong: the cluster
// (pg_control_system's system_identifier, which a restore, a copy into
// another cluster or pg_upgrade changes), the database, and the
// incarnation of the slot (the position walcast created it at, or adopted
// it at). Checkpoints of another cluster or slot would skip changes that
// were never delivered. Package lineage reads and writes it.
const identityDDL = `
ALTER TABLE walcast.pipelines
	ADD COLUMN IF NOT EXISTS system_identifier text,
	ADD COLUMN IF NOT EXISTS database_oid      bigint,
	ADD COLUMN IF NOT EXISTS slot_created_lsn  pg_lsn,
	ADD COLUMN IF NOT EXISTS slot_created_at   timestamptz;
`

// gapsDDL holds the gaps an operator accepted (walcast run --accept-gap):
// per sink, the last checkpoint before the gap and the new slot's start.
// Changes committed between the two were not delivered (package lineage).
const gapsDDL = `
CREATE TABLE IF NOT EXISTS walcast.gaps (
	id          bigserial PRIMARY KEY,
	pipeline    text NOT NULL,
	sink        text NOT NULL,
	from_event  text NOT NULL,
	to_lsn      pg_lsn NOT NULL,
	reason      text NOT NULL,
	accepted_at timestamptz NOT NULL DEFAULT now()
);
`

// parkedOldRowDDL: old_row_key is the row an update moved away from (it
// changed the key); the event is parked under both rows. Empty for every
// other event.
const parkedOldRowDDL = `
ALTER TABLE walcast.parked ADD COLUMN IF NOT EXISTS old_row_key text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS parked_old_row ON walcast.parked (pipeline, sink, old_row_key) WHERE old_row_key <> '';
`

// failureDDL holds, per sink, the error that last stopped it: a sink whose
// plugin reported that it cannot go on (pluginkit.Fatal, such as a webhook
// answering 410 Gone). The daemon stops on such an error; the row is how
// `walcast status` shows why, from any machine, until the sink delivers
// again (package reports).
const failureDDL = `
CREATE TABLE IF NOT EXISTS walcast.sink_failures (
	pipeline text NOT NULL,
	sink     text NOT NULL,
	error    text NOT NULL,
	at       timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// backfillDDL creates the backfill tables (host/internal/source/backfill).
//
// walcast.backfills: one row per requested backfill. last_key holds the key
// of the last row done as text, in pagination order (null before the first
// chunk). sinks is empty for "every sink".
//
// walcast.backfill_tables: the tables a pipeline has seen in its source
// block, for backfill_new_tables.
const backfillDDL = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.backfills (
	id          bigserial PRIMARY KEY,
	pipeline    text NOT NULL,
	schema_name text NOT NULL,
	table_name  text NOT NULL,
	sinks       text[] NOT NULL DEFAULT '{}',
	state       text NOT NULL DEFAULT 'queued',
	reason      text NOT NULL DEFAULT '',
	last_key    text[],
	rows_done   bigint NOT NULL DEFAULT 0,
	chunks_done bigint NOT NULL DEFAULT 0,
	estimate    bigint NOT NULL DEFAULT 0,
	created_at  timestamptz NOT NULL DEFAULT now(),
	started_at  timestamptz,
	updated_at  timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS backfills_pipeline_state ON walcast.backfills (pipeline, state);
CREATE TABLE IF NOT EXISTS walcast.backfill_tables (
	pipeline   text NOT NULL,
	table_name text NOT NULL,
	PRIMARY KEY (pipeline, table_name)
);
`

// catchupDDL records the catch-up slot of each detached sink
// (host/internal/delivery/isolate).
const catchupDDL = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.catchup_slots (
	pipeline   text NOT NULL,
	sink       text NOT NULL,
	slot       text NOT NULL,
	mode       text NOT NULL DEFAULT 'catching_up',
	since      timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// backlogDDL holds what the leading daemon last reported of each sink's
// backlog: the events read from the slot and not yet resolved for the
// sink. Only the daemon knows it (it lives in memory), and `walcast status`
// runs in another process, perhaps on another machine: the daemon writes it
// every few seconds, and readers trust it only while it is fresh (package
// reports).
const backlogDDL = `
CREATE TABLE IF NOT EXISTS walcast.sink_backlog (
	pipeline   text NOT NULL,
	sink       text NOT NULL,
	events     bigint NOT NULL,
	bytes      bigint NOT NULL,
	oldest_at  timestamptz,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// confirmLimitDDL records, per pipeline, the furthest position walcast may
// have confirmed to its slot. walcast writes it before it confirms a
// position, so a slot confirmed beyond it was moved by someone else while
// walcast did not stream: recreated under the same name, or advanced by
// hand (pg_replication_slot_advance). Both skip changes no sink received,
// and the slot's own fields cannot tell: PostgreSQL 15 keeps no creation
// time or id for a slot. Package lineage reads and writes it.
const confirmLimitDDL = `
ALTER TABLE walcast.pipelines ADD COLUMN IF NOT EXISTS confirm_limit pg_lsn;
`

// publishedDDL records how each of a pipeline's tables was published when
// walcast last checked (package capture, membership). PostgreSQL decodes a
// change with the publications as they were at that change, so a table
// removed from the publication by hand (ALTER PUBLICATION … DROP TABLE),
// even if added back later, has changes no sink will ever receive; the
// record is how the next start, or the running daemon, tells. Package
// lineage reads and writes it.
const publishedDDL = `
CREATE TABLE IF NOT EXISTS walcast.published_tables (
	pipeline    text NOT NULL,
	table_name  text NOT NULL,
	membership  text NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, table_name)
);
`

// catchupCopiedDDL marks a catch-up slot that exists and holds what its
// sink needs: set once the copy succeeded, cleared before a rejoin drops
// it. A record so marked whose slot is gone was dropped by someone else,
// with changes the pipeline's slot no longer holds. NULL: recorded by a
// walcast that did not mark it.
const catchupCopiedDDL = `
ALTER TABLE walcast.catchup_slots ADD COLUMN IF NOT EXISTS copied boolean;
`

// leadershipDDL records, per pipeline, how its last leadership term ended.
// The leader writes it through its lock session (host/internal/control/leader): a
// row with released_at set says the last leader closed its term and gave
// the lock up on purpose, so that its successor may stream at once; a row
// without says the last leader may have vanished (killed, frozen, cut
// off) and its successor waits out that leader's lease before streaming.
const leadershipDDL = `
CREATE TABLE IF NOT EXISTS walcast.leaderships (
	pipeline    text PRIMARY KEY,
	holder      text NOT NULL,
	taken_at    timestamptz NOT NULL,
	released_at timestamptz
);
`

// streamsDDL holds what the leading daemon last reported of each of its
// replication streams (the pipeline's, and the catch-up stream of each
// detached sink), keyed by slot: whether it streams, its receive timeout,
// and how many silent streams it ended and reconnected. Like the backlog,
// only the daemon knows it, `walcast status` runs elsewhere, and readers
// trust a report only while it is fresh (package reports).
const streamsDDL = `
CREATE TABLE IF NOT EXISTS walcast.streams (
	pipeline                text NOT NULL,
	slot                    text NOT NULL,
	streaming               boolean NOT NULL,
	receive_timeout_ms      bigint NOT NULL,
	receive_timeouts        bigint NOT NULL,
	last_receive_timeout_at timestamptz,
	updated_at              timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, slot)
);
`
