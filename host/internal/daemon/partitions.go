package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/source/backfill"
)

// partitionWatch finds what PostgreSQL's replication does not tell about
// the partitions of a captured partitioned table (published through its
// root): the rows a partition brings when it is ATTACHed, the rows that
// leave the table when one is DETACHed, dropped or truncated. Each check
// compares the partition tree of every captured partitioned table
// (pg_partition_tree, each leaf's relfilenode: a TRUNCATE gives the leaf a
// new one) with what walcast.partitions recorded, acts, and records the
// tree, in one transaction: a check interrupted by a crash is made again
// whole by the next leader.
//
//   - a new leaf holding rows, with on_attach = "backfill": a backfill of
//     the table restricted to that partition (read events through the
//     backfill path, each read row never older than a change of it before
//     it in the stream);
//   - a leaf gone, or with a new relfilenode, with on_detach = "delete"
//     or "event" (which cannot give a detach event at the command's
//     position once the command is past): a resync of the table, whose resync_end lets a copy that keeps the
//     marker contract drop the rows it did not see again. walcast's
//     triggers write the deletes at the command's own position where they
//     can (see capture's partition triggers); they record the tree as
//     they leave it, so the check finds nothing left to do then.
//
// The first sight of a table's tree is its baseline: nothing is done. A
// pipeline's baseline is recorded before its slot is created (baseline),
// never after: a partition ATTACHed between the slot's start and the
// first check would otherwise be part of the baseline, and its rows,
// which no change in the stream carries, would never be read.
type partitionWatch struct {
	db  controlDB
	p   *config.Pipeline
	log *slog.Logger
	// untriggered: the tables walcast could not put its triggers on, said
	// once.
	untriggered map[int64]bool
}

// partNode is one node of a partition tree as seen or recorded.
type partNode struct {
	name     string
	leaf     bool
	filenode int64
	// triggered: the node has walcast's TRUNCATE triggers (as seen only).
	triggered bool
}

// The statement triggers walcast puts on a captured partitioned table and
// its leaves, both running walcast.partition_truncated().
const (
	truncateTriggerBefore = "walcast_partition_truncate_before"
	truncateTriggerAfter  = "walcast_partition_truncate_after"
)

// partitionCheckTimeout bounds one check of the partitions, which a stop
// does not cut short.
const partitionCheckTimeout = 10 * time.Second

// check looks at the trees once. Like the slot watch it never stops the
// stream: a failure is logged and the next check tries again.
func (w *partitionWatch) check(ctx context.Context) {
	if w.p.Source.OnAttach == config.OnAttachIgnore && w.p.Source.OnDetach == config.OnDetachIgnore {
		return
	}
	// A check runs on the leadership's session (w.db is fenced): cut
	// off mid-statement by a stop, that connection is closed, and with
	// it the lease, so a SIGTERM during a check ended walcast with
	// "leadership lost" (exit 1). A check ends whole instead; its lock
	// waits are bounded (lock_timeout), and so is it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), partitionCheckTimeout)
	defer cancel()
	if err := w.checkOnce(cctx); err != nil && ctx.Err() == nil {
		w.log.Warn("partition watch: could not compare the captured tables' partitions with the last check; trying again at the next", "err", err)
	}
}

// baseline records the tree of each captured partitioned table that has
// none on record, as it is now: called right before the pipeline's slot is
// created (capture.Config.BeforeCreateSlot), so that the tree on record
// is never later than the slot's start. A change of a tree between this
// and the slot's start is then acted on by the first check as if it came
// after (a partition's rows read, or the table resynced, once more than
// needed), which is safe; one after the slot's start taken for part of the
// baseline would be a gap. It takes no partition lock: the triggers and
// the checks act only on recorded tables, and no check runs before the
// slot exists. Recorded tables keep their record (a slot re-created after
// an accepted gap compares with what the last run saw).
func (w *partitionWatch) baseline(ctx context.Context) error {
	if w.p.Source.OnAttach == config.OnAttachIgnore && w.p.Source.OnDetach == config.OnDetachIgnore {
		return nil
	}
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record the partitions before creating the slot: begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	now, err := partitionTrees(ctx, tx, w.p.Source.Tables)
	if err != nil {
		return err
	}
	before, err := recordedTrees(ctx, tx, w.p.Name)
	if err != nil {
		return err
	}
	for root, tree := range now {
		if _, ok := before[root]; ok {
			continue
		}
		if err := recordTree(ctx, tx, w.p.Name, root, tree); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record the partitions before creating the slot: commit: %w", err)
	}
	return nil
}

func (w *partitionWatch) checkOnce(ctx context.Context) error {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	// A check gives way to the user's commands: it waits at most this
	// long for a lock (the partition lock a trigger of a DETACH or
	// TRUNCATE holds, a table a command holds), so that it is never the
	// one a deadlock ends; the next check tries again.
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '500ms'`); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	// One check at a time per pipeline, and never together with a
	// trigger's writing of the same pipeline's partitions.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('walcast.partitions:' || $1))`, w.p.Name); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	now, err := partitionTrees(ctx, tx, w.p.Source.Tables)
	if err != nil {
		return err
	}
	before, err := recordedTrees(ctx, tx, w.p.Name)
	if err != nil {
		return err
	}
	for root, tree := range now {
		seen, ok := before[root]
		if ok {
			if err := w.act(ctx, tx, root, seen, tree); err != nil {
				return err
			}
		}
		// Rewritten only when it changed: an unchanged tree costs no
		// WAL.
		if !ok || !sameTree(seen, tree) {
			if err := recordTree(ctx, tx, w.p.Name, root, tree); err != nil {
				return err
			}
		}
		if w.p.Source.OnDetach != config.OnDetachIgnore {
			if err := w.installTriggers(ctx, tx, root, tree); err != nil {
				return err
			}
		}
	}
	for root := range before {
		if _, ok := now[root]; !ok {
			// No longer a listed partitioned table: a later one of the
			// name starts from a baseline.
			if _, err := tx.Exec(ctx, `DELETE FROM walcast.partitions WHERE pipeline = $1 AND root = $2`, w.p.Name, root); err != nil {
				return fmt.Errorf("forget the partitions of %s: %w", root, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// act compares one table's tree with the one recorded and queues what
// the differences call for.
func (w *partitionWatch) act(ctx context.Context, tx pgx.Tx, root string, seen, tree map[int64]partNode) error {
	var gone []string
	for oid, n := range seen {
		cur, ok := tree[oid]
		switch {
		case !ok:
			gone = append(gone, "detached or dropped "+n.name)
		case n.leaf && cur.leaf && n.filenode != cur.filenode && n.filenode != 0 && cur.filenode != 0:
			gone = append(gone, "truncated or rewritten "+n.name)
		}
	}
	if len(gone) > 0 && w.p.Source.OnDetach != config.OnDetachIgnore {
		return w.resync(ctx, tx, root, gone)
	}
	if w.p.Source.OnAttach != config.OnAttachBackfill {
		return nil
	}
	for oid, n := range tree {
		if _, ok := seen[oid]; ok || !n.leaf {
			continue
		}
		if err := w.backfillPartition(ctx, tx, root, oid, n.name); err != nil {
			return err
		}
	}
	return nil
}

// resync replaces any active backfill of root with a resync of it: rows
// left the table without a delete in the stream, and a backfill or resync
// begun before may have read them.
func (w *partitionWatch) resync(ctx context.Context, tx pgx.Tx, root string, why []string) error {
	t, err := backfill.Inspect(ctx, tx, root)
	if errors.Is(err, backfill.ErrKeyless) {
		// The triggers write no deletes for a table without any key
		// and leave its partition on the record for this: said at run
		// time, never passed over (docs/events.md, Partitions).
		w.log.Warn("partition watch: rows left a table without a key (no primary key or replica identity index): walcast can neither write their deletes nor resync the table, so its destinations keep them (with on_detach = \"event\" and ddl_events, a DETACH gave a detach event); give the table a primary key to have such rows removed",
			"table", root, "partitions", why, "on_detach", w.p.Source.OnDetach)
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := backfill.Cancel(ctx, tx, w.p.Name, t, nil); err != nil {
		return err
	}
	ids, err := backfill.RequestResync(ctx, tx, w.p.Name, []backfill.Table{t}, nil)
	if err != nil {
		return err
	}
	w.log.Warn("partition watch: rows left the table without deletes in the stream; resyncing it", "on_detach", w.p.Source.OnDetach, "table", root, "partitions", why, "resync", ids[0])
	return nil
}

// backfillPartition queues a backfill of the rows an attached partition
// brought, unless it holds none: rows written to it since it was attached
// reach the sinks as changes of the table.
func (w *partitionWatch) backfillPartition(ctx context.Context, tx pgx.Tx, root string, oid int64, name string) error {
	var any bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ONLY `+quoteName(name)+`)`).Scan(&any); err != nil {
		return fmt.Errorf("look into partition %s of %s: %w", name, root, err)
	}
	if !any {
		return nil
	}
	t, err := backfill.Inspect(ctx, tx, root)
	if errors.Is(err, backfill.ErrKeyless) {
		w.log.Warn("partition watch: a partition with rows was attached to a table without a key, which cannot be backfilled", "table", root, "partition", name)
		return nil
	}
	if err != nil {
		return err
	}
	t.Partition = uint32(oid)
	ids, err := backfill.Request(ctx, tx, w.p.Name, []backfill.Table{t}, nil)
	if errors.Is(err, backfill.ErrDuplicate) {
		return nil // the same partition is being backfilled already
	}
	if err != nil {
		return err
	}
	w.log.Info("partition watch: backfilling the rows of a partition attached to the table (on_attach = backfill)", "table", root, "partition", name, "backfill", ids[0])
	return nil
}

// partitionTrees reads the partition tree of each listed table that is
// partitioned, keyed by the table's listed name, then each node's oid.
func partitionTrees(ctx context.Context, db controlDB, tables []string) (map[string]map[int64]partNode, error) {
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = backfill.SplitName(t)
	}
	rows, err := db.Query(ctx, `
SELECT l.schema_name || '.' || l.table_name, t.relid::bigint, pn.nspname || '.' || pc.relname, t.isleaf,
       CASE WHEN t.isleaf THEN pc.relfilenode::bigint ELSE 0 END,
       EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = t.relid AND tg.tgname = $3)
FROM unnest($1::text[], $2::text[]) AS l(schema_name, table_name)
JOIN pg_namespace n ON n.nspname = l.schema_name
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = l.table_name AND c.relkind = 'p'
CROSS JOIN LATERAL pg_partition_tree(c.oid) t
JOIN pg_class pc ON pc.oid = t.relid
JOIN pg_namespace pn ON pn.oid = pc.relnamespace`, schemas, names, truncateTriggerAfter)
	if err != nil {
		return nil, fmt.Errorf("read the partition trees: %w", err)
	}
	trees := map[string]map[int64]partNode{}
	var root string
	var oid int64
	var n partNode
	_, err = pgx.ForEachRow(rows, []any{&root, &oid, &n.name, &n.leaf, &n.filenode, &n.triggered}, func() error {
		if trees[root] == nil {
			trees[root] = map[int64]partNode{}
		}
		trees[root][oid] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the partition trees: %w", err)
	}
	return trees, nil
}

// recordedTrees reads walcast.partitions for the pipeline.
func recordedTrees(ctx context.Context, db controlDB, pipeline string) (map[string]map[int64]partNode, error) {
	rows, err := db.Query(ctx, `SELECT root, partition_oid, partition, filenode FROM walcast.partitions WHERE pipeline = $1`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("read the partitions last seen: %w", err)
	}
	trees := map[string]map[int64]partNode{}
	var root string
	var oid int64
	var n partNode
	_, err = pgx.ForEachRow(rows, []any{&root, &oid, &n.name, &n.filenode}, func() error {
		if trees[root] == nil {
			trees[root] = map[int64]partNode{}
		}
		// Only leaves have storage (a relfilenode): the root and
		// partitioned partitions are recorded with 0.
		n.leaf = n.filenode != 0
		trees[root][oid] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the partitions last seen: %w", err)
	}
	return trees, nil
}

// recordTree replaces the recorded tree of root with tree.
func recordTree(ctx context.Context, tx pgx.Tx, pipeline, root string, tree map[int64]partNode) error {
	if _, err := tx.Exec(ctx, `DELETE FROM walcast.partitions WHERE pipeline = $1 AND root = $2`, pipeline, root); err != nil {
		return fmt.Errorf("record the partitions of %s: %w", root, err)
	}
	oids, names, nodes := make([]int64, 0, len(tree)), make([]string, 0, len(tree)), make([]int64, 0, len(tree))
	for oid, n := range tree {
		oids, names, nodes = append(oids, oid), append(names, n.name), append(nodes, n.filenode)
	}
	_, err := tx.Exec(ctx, `INSERT INTO walcast.partitions (pipeline, root, partition_oid, partition, filenode)
SELECT $1, $2, o, p, f FROM unnest($3::bigint[], $4::text[], $5::bigint[]) AS u(o, p, f)`, pipeline, root, oids, names, nodes)
	if err != nil {
		return fmt.Errorf("record the partitions of %s: %w", root, err)
	}
	return nil
}

// quoteName quotes "schema.table" as an SQL identifier.
func quoteName(name string) string {
	schema, table := backfill.SplitName(name)
	return pgx.Identifier{schema, table}.Sanitize()
}

// installTriggers puts walcast's TRUNCATE triggers on the table and each
// leaf that lacks them, each in a savepoint: a table walcast may not put
// a trigger on (another role's) is named in the log once per process,
// and a TRUNCATE of it reaches the sinks through a resync instead.
func (w *partitionWatch) installTriggers(ctx context.Context, tx pgx.Tx, root string, tree map[int64]partNode) error {
	for oid, n := range tree {
		if n.triggered || (!n.leaf && n.name != root) || w.untriggered[oid] {
			continue
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return fmt.Errorf("savepoint: %w", err)
		}
		for _, tg := range []struct{ name, when string }{{truncateTriggerBefore, "BEFORE"}, {truncateTriggerAfter, "AFTER"}} {
			_, err = sp.Exec(ctx, `CREATE OR REPLACE TRIGGER `+tg.name+` `+tg.when+` TRUNCATE ON `+quoteName(n.name)+
				` FOR EACH STATEMENT EXECUTE FUNCTION walcast.partition_truncated()`)
			if err != nil {
				break
			}
		}
		if err != nil {
			if rbErr := sp.Rollback(ctx); rbErr != nil {
				return fmt.Errorf("roll back to savepoint: %w", rbErr)
			}
			if ctx.Err() == nil && !lockTimeout(err) {
				w.untriggered[oid] = true
				w.log.Warn("partition watch: cannot put walcast's TRUNCATE triggers on a partition; a TRUNCATE of it reaches the sinks through a resync of the table", "table", root, "partition", n.name, "err", err)
			}
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("release savepoint: %w", err)
		}
	}
	return nil
}

// lockTimeout reports whether err is PostgreSQL's lock_timeout.
func lockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// sameTree reports whether two trees have the same nodes, names and
// relfilenodes.
func sameTree(a, b map[int64]partNode) bool {
	if len(a) != len(b) {
		return false
	}
	for oid, n := range a {
		m, ok := b[oid]
		if !ok || m.name != n.name || m.filenode != n.filenode {
			return false
		}
	}
	return true
}
