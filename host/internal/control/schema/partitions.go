package schema

// partitionsDDL keeps, per pipeline and captured partitioned table, the
// partitions walcast last saw under it (pg_partition_tree, the root
// included as its own row) with each leaf's relfilenode, so that the
// watch loop tells an ATTACH, a DETACH or DROP and a TRUNCATE of one
// partition (a new relfilenode) from what it saw before, across restarts
// (host/internal/daemon/partitions.go). A backfill may be restricted to
// the rows of one partition (partition_oid): the rows an ATTACH brought.
const partitionsDDL = `
CREATE TABLE IF NOT EXISTS walcast.partitions (
	pipeline      text   NOT NULL,
	root          text   NOT NULL,
	partition_oid bigint NOT NULL,
	partition     text   NOT NULL,
	filenode      bigint NOT NULL,
	seen_at       timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, root, partition_oid)
);
ALTER TABLE walcast.backfills ADD COLUMN IF NOT EXISTS partition_oid bigint;
`
