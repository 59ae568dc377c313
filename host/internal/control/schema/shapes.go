package schema

// shapesDDL keeps the shape of each captured table at each change of it,
// as the decoder saw it in pgoutput's Relation messages (package decode,
// shape.go): whether a Relation message is a change, hence a schema
// event, and which ids the events after it get, must not depend on where
// a replication session began, so the history outlives sessions and
// restarts. A row is written before the schema event at its position is
// emitted. relation_id is the table's OID (stable across a rename);
// (commit_lsn, idx) is the position, the schema event's id. Package
// lineage reads and writes it. The shape is json, not jsonb: it is
// compared byte for byte with what a Relation message describes, and goes
// into redelivered schema events, which must be the same bytes.
const shapesDDL = `
CREATE TABLE IF NOT EXISTS walcast.table_shapes (
	pipeline    text NOT NULL,
	relation_id bigint NOT NULL,
	commit_lsn  bigint NOT NULL,
	idx         bigint NOT NULL,
	shape       json NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, relation_id, commit_lsn, idx)
);
`
