package schema

// partitionsDDL keeps, per pipeline and captured partitioned table, the
// partitions walcast last saw under it (pg_partition_tree, the root
// included as its own row, with partition = root) with each leaf's
// relfilenode (0 for the root and partitioned partitions), so that the
// watch loop tells an ATTACH, a DETACH or DROP and a TRUNCATE of one
// partition (a new relfilenode) from what it saw before, across restarts
// (host/internal/daemon/partitions.go). A backfill may be restricted to
// the rows of one partition (partition_oid): the rows an ATTACH brought.
//
// The functions write the keys of rows that leave a captured table
// without PostgreSQL publishing a delete into the WAL, in the
// transaction of the command that removes them
// (decode.PartitionPrefix), and record the tree as the command leaves
// it, so that the watch loop finds nothing left to heal:
//
//   - partition_truncated, the function of statement triggers BEFORE and
//     AFTER TRUNCATE that the watch loop puts on each captured table and
//     its partitions: before a partition's TRUNCATE, the keys of its rows
//     (unless the captured table itself is being truncated in the same
//     statement: PostgreSQL publishes that); after, its new relfilenode.
//     TRUNCATE holds the partition's ACCESS EXCLUSIVE lock before any
//     trigger fires, so the rows read are exactly the rows removed.
//   - partitions_detached, called by the ddl_events event trigger at the
//     end of each DDL command: for each partition recorded under a
//     captured table that this transaction detached (its pg_class row is
//     this transaction's and says it is no partition any more), the keys
//     of its rows, read under the lock DETACH holds.
//
// Both take the pipeline's partition lock, as the watch loop does, so a
// check and a command never act on the same partition twice. Functions
// run as the schema's owner (walcast's role), with the output settings
// walcast's replication sessions use, so the keys read as pgoutput would
// send them.
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

DROP FUNCTION IF EXISTS walcast.partition_rows_message(text, regclass, regclass, text, boolean);
CREATE FUNCTION walcast.partition_rows_message(_pipeline text, _root regclass, _part regclass, _command text, _only boolean)
RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' SET DateStyle = 'ISO' SET IntervalStyle = 'postgres' SET extra_float_digits = 3
AS $f$
DECLARE
	ident "char";
	rs text; rt text; cols json; keyidx json; sel text; keys json;
BEGIN
	SELECT c.relreplident, n.nspname, c.relname INTO ident, rs, rt
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = _root;
	-- The event key: the replica identity index's (or primary key's)
	-- columns in table order, the primary key's in index order under
	-- REPLICA IDENTITY FULL, as backfills and live events build it.
	WITH k AS (
		SELECT a.attname, a.atttypid, a.atttypmod,
		       row_number() OVER (ORDER BY CASE WHEN ident = 'f' THEN u.ord ELSE u.attnum END) - 1 AS idx
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS u(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = _root AND a.attnum = u.attnum
		WHERE i.indrelid = _root AND CASE WHEN ident = 'i' THEN i.indisreplident ELSE i.indisprimary END)
	SELECT json_agg(json_build_object('name', attname, 'type', atttypid::int8, 'typmod', atttypmod) ORDER BY idx),
	       json_agg(idx ORDER BY idx), string_agg(format('%I::text', attname), ', ' ORDER BY idx)
	INTO cols, keyidx, sel FROM k;
	IF sel IS NULL THEN
		RETURN; -- no key to delete by
	END IF;
	EXECUTE format('SELECT coalesce(json_agg(json_build_array(%s)), ''[]''::json) FROM %s %s', sel, CASE WHEN _only THEN 'ONLY' ELSE '' END, _part) INTO keys;
	IF json_array_length(keys) = 0 THEN
		RETURN;
	END IF;
	PERFORM pg_logical_emit_message(true, 'walcast.partition', json_build_object(
		'pipeline', _pipeline, 'schema', rs, 'table', rt, 'columns', cols, 'key', keyidx, 'rows', keys,
		'partition', (SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = _part),
		'command', _command)::text);
END $f$;

CREATE OR REPLACE FUNCTION walcast.partition_truncated() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $f$
DECLARE
	r record;
	roots text := coalesce(current_setting('walcast.truncating_roots', true), '');
	written text := coalesce(current_setting('walcast.truncate_written', true), '');
BEGIN
	IF EXISTS (SELECT 1 FROM walcast.partitions WHERE partition_oid = TG_RELID AND partition = root) THEN
		-- A captured table: PostgreSQL publishes its TRUNCATE. Its
		-- partitions' triggers fire after its BEFORE trigger and before
		-- its AFTER trigger.
		IF TG_WHEN = 'BEFORE' THEN
			PERFORM set_config('walcast.truncating_roots', roots || ',' || TG_RELID || ',', true);
		ELSE
			PERFORM set_config('walcast.truncating_roots', replace(roots, ',' || TG_RELID || ',', ''), true);
		END IF;
		RETURN NULL;
	END IF;
	FOR r IN SELECT p.pipeline, p.root, q.partition_oid AS root_oid
	         FROM walcast.partitions p
	         JOIN walcast.partitions q ON q.pipeline = p.pipeline AND q.root = p.root AND q.partition = q.root
	         WHERE p.partition_oid = TG_RELID AND p.filenode <> 0 ORDER BY p.pipeline, p.root LOOP
		IF TG_WHEN = 'BEFORE' THEN
			BEGIN
				PERFORM pg_advisory_xact_lock(hashtext('walcast.partitions:' || r.pipeline));
				IF position(',' || r.root_oid || ',' IN roots) = 0 THEN
					PERFORM walcast.partition_rows_message(r.pipeline, r.root_oid::oid::regclass, TG_RELID::regclass, 'truncate', true);
				END IF;
				written := written || ',' || r.pipeline || '/' || TG_RELID || ',';
			EXCEPTION WHEN OTHERS THEN
				-- Never fail the user's command: the watch loop finds the
				-- new relfilenode and resyncs the table instead.
				RAISE WARNING 'walcast: the rows of % truncated could not be written into the WAL (%); the table will be resynced', TG_RELID::regclass, SQLERRM;
			END;
		ELSIF position(',' || r.pipeline || '/' || TG_RELID || ',' IN written) > 0 THEN
			UPDATE walcast.partitions p SET filenode = c.relfilenode, seen_at = now() FROM pg_class c
			WHERE c.oid = TG_RELID AND p.pipeline = r.pipeline AND p.root = r.root AND p.partition_oid = TG_RELID;
		END IF;
	END LOOP;
	PERFORM set_config('walcast.truncate_written', written, true);
	RETURN NULL;
END $f$;

CREATE OR REPLACE FUNCTION walcast.partitions_detached(_pipeline text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $f$
DECLARE
	r record;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM walcast.partitions WHERE pipeline = _pipeline) THEN
		RETURN;
	END IF;
	PERFORM pg_advisory_xact_lock(hashtext('walcast.partitions:' || _pipeline));
	FOR r IN SELECT p.root, p.partition_oid, q.partition_oid AS root_oid
	         FROM walcast.partitions p
	         JOIN walcast.partitions q ON q.pipeline = p.pipeline AND q.root = p.root AND q.partition = q.root
	         JOIN pg_class c ON c.oid = p.partition_oid
	         WHERE p.pipeline = _pipeline AND p.partition <> p.root AND NOT c.relispartition AND age(c.xmin) = 0
	         ORDER BY p.root, p.partition_oid LOOP
		PERFORM walcast.partition_rows_message(_pipeline, r.root_oid::oid::regclass, r.partition_oid::oid::regclass, 'detach', false);
		DELETE FROM walcast.partitions p WHERE p.pipeline = _pipeline AND p.root = r.root
		  AND (p.partition_oid = r.partition_oid
		       OR p.partition_oid IN (SELECT relid::oid::bigint FROM pg_partition_tree(r.partition_oid::oid::regclass)));
	END LOOP;
END $f$;
`

// partitionsKeylessDDL (migration 16) makes the partition functions
// account for captured tables without a primary key or replica identity
// index, which left a partition DETACHed or TRUNCATEd off the record with
// nothing written, so that nobody ever heard of its rows:
//
//   - REPLICA IDENTITY FULL without a primary key: a live delete's key is
//     every column (pgoutput flags them all), so the message carries
//     every published column of each row as its key ("full": true), and
//     the rows give deletes like any keyed table's.
//   - no key at all (REPLICA IDENTITY NOTHING, or DEFAULT without a
//     primary key): nothing to delete by. A DETACH still writes the
//     number of rows (one empty key per row), so that on_detach =
//     "event" gives its detach event; partition_rows_message returns
//     false, and the callers leave the partition on the record as it
//     was, so that the watch loop finds it detached or truncated and
//     says, at run time, that its rows stay in the destinations.
const partitionsKeylessDDL = `
DROP FUNCTION IF EXISTS walcast.partition_rows_message(text, regclass, regclass, text, boolean);
CREATE FUNCTION walcast.partition_rows_message(_pipeline text, _root regclass, _part regclass, _command text, _only boolean)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' SET DateStyle = 'ISO' SET IntervalStyle = 'postgres' SET extra_float_digits = 3
AS $f$
DECLARE
	ident "char";
	whole boolean := false;
	rs text; rt text; cols json; keyidx json; sel text; keys json;
BEGIN
	SELECT c.relreplident, n.nspname, c.relname INTO ident, rs, rt
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = _root;
	WITH k AS (
		SELECT a.attname, a.atttypid, a.atttypmod,
		       row_number() OVER (ORDER BY CASE WHEN ident = 'f' THEN u.ord ELSE u.attnum END) - 1 AS idx
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS u(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = _root AND a.attnum = u.attnum
		WHERE i.indrelid = _root AND CASE WHEN ident = 'i' THEN i.indisreplident ELSE i.indisprimary END)
	SELECT json_agg(json_build_object('name', attname, 'type', atttypid::int8, 'typmod', atttypmod) ORDER BY idx),
	       json_agg(idx ORDER BY idx), string_agg(format('%I::text', attname), ', ' ORDER BY idx)
	INTO cols, keyidx, sel FROM k;
	IF sel IS NULL AND ident = 'f' THEN
		-- Every published column, in table order, as pgoutput sends them.
		WITH k AS (
			SELECT a.attname, a.atttypid, a.atttypmod, row_number() OVER (ORDER BY a.attnum) - 1 AS idx
			FROM pg_attribute a WHERE a.attrelid = _root AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '')
		SELECT json_agg(json_build_object('name', attname, 'type', atttypid::int8, 'typmod', atttypmod) ORDER BY idx),
		       json_agg(idx ORDER BY idx), string_agg(format('%I::text', attname), ', ' ORDER BY idx)
		INTO cols, keyidx, sel FROM k;
		whole := true;
	END IF;
	IF sel IS NULL THEN
		-- No key to delete by: the number of rows only, for a detach.
		EXECUTE format('SELECT coalesce(json_agg(''[]''::json), ''[]''::json) FROM %s %s', CASE WHEN _only THEN 'ONLY' ELSE '' END, _part) INTO keys;
		IF json_array_length(keys) = 0 THEN
			RETURN true; -- no row left the table
		END IF;
		IF _command = 'detach' THEN
			PERFORM pg_logical_emit_message(true, 'walcast.partition', json_build_object(
				'pipeline', _pipeline, 'schema', rs, 'table', rt, 'columns', '[]'::json, 'key', '[]'::json, 'rows', keys,
				'partition', (SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = _part),
				'command', _command)::text);
		END IF;
		RETURN false;
	END IF;
	EXECUTE format('SELECT coalesce(json_agg(json_build_array(%s)), ''[]''::json) FROM %s %s', sel, CASE WHEN _only THEN 'ONLY' ELSE '' END, _part) INTO keys;
	IF json_array_length(keys) = 0 THEN
		RETURN true;
	END IF;
	PERFORM pg_logical_emit_message(true, 'walcast.partition', json_build_object(
		'pipeline', _pipeline, 'schema', rs, 'table', rt, 'columns', cols, 'key', keyidx, 'rows', keys,
		'partition', (SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = _part),
		'command', _command, 'full', whole)::text);
	RETURN true;
END $f$;

CREATE OR REPLACE FUNCTION walcast.partition_truncated() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $f$
DECLARE
	r record;
	roots text := coalesce(current_setting('walcast.truncating_roots', true), '');
	written text := coalesce(current_setting('walcast.truncate_written', true), '');
BEGIN
	IF EXISTS (SELECT 1 FROM walcast.partitions WHERE partition_oid = TG_RELID AND partition = root) THEN
		IF TG_WHEN = 'BEFORE' THEN
			PERFORM set_config('walcast.truncating_roots', roots || ',' || TG_RELID || ',', true);
		ELSE
			PERFORM set_config('walcast.truncating_roots', replace(roots, ',' || TG_RELID || ',', ''), true);
		END IF;
		RETURN NULL;
	END IF;
	FOR r IN SELECT p.pipeline, p.root, q.partition_oid AS root_oid
	         FROM walcast.partitions p
	         JOIN walcast.partitions q ON q.pipeline = p.pipeline AND q.root = p.root AND q.partition = q.root
	         WHERE p.partition_oid = TG_RELID AND p.filenode <> 0 ORDER BY p.pipeline, p.root LOOP
		IF TG_WHEN = 'BEFORE' THEN
			BEGIN
				PERFORM pg_advisory_xact_lock(hashtext('walcast.partitions:' || r.pipeline));
				-- Recorded as handled only when the rows' deletes are in
				-- the WAL (or the root's own TRUNCATE is published): a
				-- table without a key keeps the old relfilenode on record,
				-- for the watch loop to report.
				IF position(',' || r.root_oid || ',' IN roots) > 0
				   OR walcast.partition_rows_message(r.pipeline, r.root_oid::oid::regclass, TG_RELID::regclass, 'truncate', true) THEN
					written := written || ',' || r.pipeline || '/' || TG_RELID || ',';
				END IF;
			EXCEPTION WHEN OTHERS THEN
				RAISE WARNING 'walcast: the rows of % truncated could not be written into the WAL (%); the table will be resynced', TG_RELID::regclass, SQLERRM;
			END;
		ELSIF position(',' || r.pipeline || '/' || TG_RELID || ',' IN written) > 0 THEN
			UPDATE walcast.partitions p SET filenode = c.relfilenode, seen_at = now() FROM pg_class c
			WHERE c.oid = TG_RELID AND p.pipeline = r.pipeline AND p.root = r.root AND p.partition_oid = TG_RELID;
		END IF;
	END LOOP;
	PERFORM set_config('walcast.truncate_written', written, true);
	RETURN NULL;
END $f$;

CREATE OR REPLACE FUNCTION walcast.partitions_detached(_pipeline text) RETURNS void LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $f$
DECLARE
	r record;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM walcast.partitions WHERE pipeline = _pipeline) THEN
		RETURN;
	END IF;
	PERFORM pg_advisory_xact_lock(hashtext('walcast.partitions:' || _pipeline));
	FOR r IN SELECT p.root, p.partition_oid, q.partition_oid AS root_oid
	         FROM walcast.partitions p
	         JOIN walcast.partitions q ON q.pipeline = p.pipeline AND q.root = p.root AND q.partition = q.root
	         JOIN pg_class c ON c.oid = p.partition_oid
	         WHERE p.pipeline = _pipeline AND p.partition <> p.root AND NOT c.relispartition AND age(c.xmin) = 0
	         ORDER BY p.root, p.partition_oid LOOP
		-- Off the record only once its rows' deletes are in the WAL: a
		-- table without a key stays on it, for the watch loop to report.
		IF walcast.partition_rows_message(_pipeline, r.root_oid::oid::regclass, r.partition_oid::oid::regclass, 'detach', false) THEN
			DELETE FROM walcast.partitions p WHERE p.pipeline = _pipeline AND p.root = r.root
			  AND (p.partition_oid = r.partition_oid
			       OR p.partition_oid IN (SELECT relid::oid::bigint FROM pg_partition_tree(r.partition_oid::oid::regclass)));
		END IF;
	END LOOP;
END $f$;
`
