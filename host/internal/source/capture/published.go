package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/source/decode"
)

// membership says, for each configured table, how the pipeline's
// publications publish it (a token of pubParts): per publication its oid,
// the operations it publishes, the catalog row that makes the table a
// member (its pg_publication_rel row, its schema's
// pg_publication_namespace row, or FOR ALL TABLES), the table's oid and a
// digest of its row filter and column list. A table missing from the map
// is not published. The catalog rows get new oids when a table is removed
// and added again, so a change of membership also shows a removal that
// was undone since. names maps the oid of every table the publications
// publish to its name now, for telling a renamed table from a removed one.
func membership(ctx context.Context, db Querier, cfg Config) (map[string]string, map[int64]string, error) {
	pubs := []string{cfg.Publication, KeylessPublication(cfg.Publication)}
	rows, err := db.Query(ctx, `
SELECT pt.schemaname || '.' || pt.tablename, c.oid::bigint, p.pubname, p.oid::bigint,
       p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.puballtables,
       coalesce(pr.oid, 0)::bigint, coalesce(pn.oid, 0)::bigint,
       md5(coalesce(pg_get_expr(pr.prqual, pr.prrelid), '') || '/' || coalesce(pr.prattrs::text, ''))
FROM pg_publication p
JOIN pg_publication_tables pt ON pt.pubname = p.pubname
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
LEFT JOIN pg_publication_rel pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid
LEFT JOIN pg_publication_namespace pn ON pn.pnpubid = p.oid AND pn.pnnspid = n.oid
WHERE p.pubname = ANY($1)`, pubs)
	if err != nil {
		return nil, nil, fmt.Errorf("read membership of publication %s: %w", cfg.Publication, err)
	}
	want := map[string]bool{}
	for _, t := range cfg.Tables {
		want[canonical(t)] = true
	}
	parts := map[string][]string{}
	var table, pub, def string
	var tableOID, pubOID, relOID, nspOID int64
	var ins, upd, del, trunc, all bool
	names := map[int64]string{}
	_, err = pgx.ForEachRow(rows, []any{&table, &tableOID, &pub, &pubOID, &ins, &upd, &del, &trunc, &all, &relOID, &nspOID, &def}, func() error {
		names[tableOID] = table
		if !want[table] {
			return nil
		}
		ops := ""
		for _, op := range []struct {
			on bool
			c  string
		}{{ins, "i"}, {upd, "u"}, {del, "d"}, {trunc, "t"}} {
			if op.on {
				ops += op.c
			}
		}
		via := "partition" // published through a partitioned ancestor
		switch {
		case all:
			via = "all"
		case relOID != 0:
			via = fmt.Sprintf("rel%d", relOID)
		case nspOID != 0:
			via = fmt.Sprintf("schema%d", nspOID)
		}
		parts[table] = append(parts[table], pubPart{pub: pub, pubOID: pubOID, ops: ops, via: via, table: tableOID, def: def}.String())
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read membership of publication %s: %w", cfg.Publication, err)
	}
	out := make(map[string]string, len(parts))
	for t, ps := range parts {
		sort.Strings(ps)
		out[t] = strings.Join(ps, partSep)
	}
	return out, names, nil
}

// pubPart is how one publication publishes a table: the publication's
// oid and operations, the catalog row that makes the table a member, the
// table's oid, and a digest of its row filter and column list.
type pubPart struct {
	pub      string
	pubOID   int64
	ops, via string
	table    int64
	def      string
}

// Separators no name in a token can hold.
const (
	fieldSep = "\x1f"
	partSep  = "\x1e"
)

func (p pubPart) String() string {
	return strings.Join([]string{p.pub, strconv.FormatInt(p.pubOID, 10), p.ops, p.via, strconv.FormatInt(p.table, 10), p.def}, fieldSep)
}

// parseParts reads a membership token back, by publication name.
func parseParts(token string) map[string]pubPart {
	out := map[string]pubPart{}
	if token == "" {
		return out
	}
	for _, s := range strings.Split(token, partSep) {
		f := strings.Split(s, fieldSep)
		if len(f) != 6 {
			continue
		}
		pubOID, _ := strconv.ParseInt(f[1], 10, 64)
		table, _ := strconv.ParseInt(f[4], 10, 64)
		out[f[0]] = pubPart{pub: f[0], pubOID: pubOID, ops: f[2], via: f[3], table: table, def: f[5]}
	}
	return out
}

// compareMembership says whether a table published as was (a token) and
// now as now lost changes in between ("lost"), was redefined by hand in a
// way that loses nothing ("redefined": its row filter or column list
// replaced, which PostgreSQL does in one statement, or more operations
// published), or is unchanged ("").
func compareMembership(was, now string) string {
	if was == now {
		return ""
	}
	w, n := parseParts(was), parseParts(now)
	verdict := ""
	for pub, wp := range w {
		np, ok := n[pub]
		switch {
		case !ok, np.pubOID != wp.pubOID, np.table != wp.table:
			return "lost"
		case strings.ContainsFunc(wp.ops, func(op rune) bool { return !strings.ContainsRune(np.ops, op) }):
			return "lost" // an operation no longer published
		case np.via != wp.via && np.def == wp.def:
			return "lost" // removed and added again, as it was
		case np != wp:
			verdict = "redefined"
		}
	}
	if len(n) > len(w) {
		verdict = "redefined" // published by one more publication
	}
	return verdict
}

// renamedTo is the name the table recorded as was carries now, if the
// publications still publish it under another name.
func renamedTo(was string, names map[int64]string) string {
	for _, p := range parseParts(was) {
		if n, ok := names[p.table]; ok {
			return n
		}
	}
	return ""
}

// checkPublished compares the membership recorded when walcast last
// checked with the membership now, for the tables the pipeline still
// lists, and returns the gap that a removal by hand left, or nil.
func checkPublished(cfg Config, recorded, now map[string]string, names map[int64]string, cps string, running bool) *GapError {
	var changed []string
	for _, t := range cfg.Tables {
		t = canonical(t)
		was, ok := recorded[t]
		if !ok {
			continue
		}
		switch compareMembership(was, now[t]) {
		case "lost":
			changed = append(changed, t)
		case "redefined":
			if cfg.Logger != nil {
				cfg.Logger.Warn("the publication of a captured table was redefined by hand (its row filter, column list or operations); if it was removed and added again in separate statements, its changes in between were not published",
					"table", t, "publication", cfg.Publication)
			}
			recorded[t] = now[t] // said once
		}
	}
	if len(changed) == 0 {
		return nil
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	var gone, other, renamed []string
	var vanished []decode.Vanished
	for _, t := range changed {
		schema, table, _ := strings.Cut(t, ".")
		switch {
		case now[t] != "":
			other = append(other, t)
		case renamedTo(recorded[t], names) != "":
			renamed = append(renamed, t+" (renamed to "+renamedTo(recorded[t], names)+")")
			vanished = append(vanished, decode.Vanished{Pipeline: cfg.Pipeline, Schema: schema, Table: table, RenamedTo: renamedTo(recorded[t], names)})
		default:
			gone = append(gone, t)
			vanished = append(vanished, decode.Vanished{Pipeline: cfg.Pipeline, Schema: schema, Table: table})
		}
	}
	when := "since walcast last checked it"
	if running {
		when = "while walcast ran"
	}
	var descs []string
	if len(gone) > 0 {
		descs = append(descs, fmt.Sprintf("table %s is no longer published by publication %s (removed by hand %s: ALTER PUBLICATION … DROP TABLE or SET TABLE)",
			strings.Join(gone, ", "), cfg.Publication, when))
	}
	if len(other) > 0 {
		descs = append(descs, fmt.Sprintf("table %s is published differently %s: removed from publication %s and added again, or its published operations changed (ALTER PUBLICATION … SET (publish = …))",
			strings.Join(other, ", "), when, cfg.Publication))
	}
	if len(renamed) > 0 {
		descs = append(descs, fmt.Sprintf("table %s is no longer published by publication %s under the name the pipeline lists (ALTER TABLE … RENAME %s): list the new name in the pipeline's tables and backfill it (walcast backfill), its changes since the rename were not delivered",
			strings.Join(renamed, ", "), cfg.Publication, when))
	}
	desc := strings.Join(descs, ", and ")
	return &GapError{
		Slot: cfg.Slot, Publication: cfg.Publication, Checkpoints: cps,
		Kind:     "publication changed",
		Tables:   changed,
		Vanished: vanished,
		What: desc + fmt.Sprintf(". PostgreSQL decodes every change with the publication as it was at that change, so changes of %s committed while it was not published are not in replication slot %s and publishing it again does not bring them back",
			strings.Join(changed, ", "), cfg.Slot),
		Restore: "restore the database from a backup taken before the publication was changed",
		Replace: "keeps the slot, publishes the tables as the pipeline lists them again",
	}
}

// PublicationWatch returns the check Capture.Run makes while it streams
// (Config.Watch): the membership must stay as Prepare recorded it
// (Prepared.Published).
func PublicationWatch(db Querier, cfg Config, recorded map[string]string) func(context.Context) error {
	return func(ctx context.Context) error {
		// db may be the leadership's session: a stop that cut a query
		// short would close that connection, and with it the lease, so
		// the stopping leader could not release the pipeline and its
		// successor waited out the lease. A check ends whole instead,
		// bounded.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		now, names, err := membership(ctx, db, cfg)
		if err != nil {
			return nil // the database may be restarting; the stream reports that
		}
		// A publication dropped and created again leaves its tables
		// published by another oid, or (read in the middle of it) not at
		// all: named for what it is. Looked up after the membership, so
		// that a re-creation the membership saw is seen here too.
		if gap, err := checkRecreated(ctx, db, cfg, recorded, "see walcast status", true); err == nil && gap != nil {
			return gap
		}
		if gap := checkPublished(cfg, recorded, now, names, "see walcast status", true); gap != nil {
			gap.AnnouncedAt = announceVanished(ctx, db, cfg, gap.Vanished)
			return gap
		}
		return nil
	}
}

// announceVanished writes, for each table, a transactional logical
// decoding message (decode.VanishedPrefix) that the stream decodes into
// a schema event saying the table was dropped or renamed, and returns the
// LSN of the last one (0 when none could be written: the stop goes on
// without the events, and says so in the log).
func announceVanished(ctx context.Context, db Querier, cfg Config, vanished []decode.Vanished) uint64 {
	var last uint64
	for _, v := range vanished {
		if v.RenamedTo == "" && stillExists(ctx, db, v.Schema, v.Table) {
			// Removed from the publication by hand, not dropped: the
			// table is as it was, and a drop_table event would tell a
			// consumer to throw its copy away. The stop says what
			// happened.
			continue
		}
		payload, err := json.Marshal(v)
		if err == nil {
			var lsn string
			err = db.QueryRow(ctx, `SELECT pg_logical_emit_message(true, $1, $2::bytea)::text`, decode.VanishedPrefix, payload).Scan(&lsn)
			if err == nil {
				var l pglogrepl.LSN
				if l, err = pglogrepl.ParseLSN(lsn); err == nil {
					last = max(last, uint64(l))
				}
			}
		}
		if err != nil && cfg.Logger != nil {
			cfg.Logger.Warn("could not write the schema event of a dropped or renamed table into the stream; sinks will not get it",
				"table", v.Schema+"."+v.Table, "err", err)
		}
	}
	return last
}

// stillExists reports whether schema.table is still a table of the
// database (false when that cannot be read).
func stillExists(ctx context.Context, db Querier, schema, table string) bool {
	var ok bool
	err := db.QueryRow(ctx, `SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL`, schema, table).Scan(&ok)
	return err == nil && ok
}

// watchEvery is how often a streaming capture runs Config.Watch.
const watchEvery = 10 * time.Second

// checkRecreated returns the gap a publication dropped and created again
// under the same name left, or nil. The slot cannot stream on: pgoutput
// looks each publication up by name in the catalog as it was at each
// change, where the new publication does not exist before its creation,
// so every change before it fails with "publication … does not exist".
// The new publication has a new oid; the oid each publication had when
// walcast last recorded the membership (recorded, see membership) tells
// it apart from one merely altered, which keeps its oid.
func checkRecreated(ctx context.Context, db Querier, cfg Config, recorded map[string]string, cps string, running bool) (*GapError, error) {
	was := map[string]int64{}
	for _, token := range recorded {
		for pub, p := range parseParts(token) {
			was[pub] = p.pubOID
		}
	}
	var recreated []string
	for _, pub := range []string{cfg.Publication, KeylessPublication(cfg.Publication)} {
		oid, ok := was[pub]
		if !ok || oid == 0 {
			continue
		}
		var now int64
		err := db.QueryRow(ctx, `SELECT coalesce((SELECT oid::bigint FROM pg_publication WHERE pubname = $1), 0)`, pub).Scan(&now)
		if err != nil {
			return nil, fmt.Errorf("look up publication %s: %w", pub, err)
		}
		if now != oid && (now != 0 || !running) {
			// While streaming, a publication that is gone is the
			// stream's to report (dropped); one back under a new oid
			// is this.
			recreated = append(recreated, pub)
		}
	}
	if len(recreated) == 0 {
		return nil, nil
	}
	return recreatedGap(cfg, strings.Join(recreated, ", "), cps, running), nil
}

// recreatedGap is the gap of kind "publication recreated": publication
// pub (one name, or several joined) dropped and created again under the
// same name, while walcast streamed (running) or while it did not.
func recreatedGap(cfg Config, pub, cps string, running bool) *GapError {
	first, _, _ := strings.Cut(pub, ", ")
	g := &GapError{
		Slot: cfg.Slot, Publication: cfg.Publication, Checkpoints: cps,
		Kind: "publication recreated",
		What: fmt.Sprintf("publication %s is not the one replication slot %s streams with: it was dropped (DROP PUBLICATION) and created again, or is about to be, while walcast was not streaming. PostgreSQL reads a publication as it was at each change's position in the slot, where the new one does not exist yet, so every change still in the slot would fail with \"publication %s does not exist\": the slot cannot stream on, and the changes of every table of pipeline %s committed since the checkpoints below cannot be delivered",
			pub, cfg.Slot, first, cfg.Pipeline),
		Restore: "restore the database from a backup taken before the publication was dropped",
		Replace: "drops the slot, creates a new one",
	}
	if running {
		g.What = fmt.Sprintf("publication %s was dropped (DROP PUBLICATION) and re-created while walcast ran: gap \"publication recreated\". PostgreSQL reads a publication as it was at each change's position in the slot, where the new one does not exist yet, so every change still in the slot would fail with \"publication %s does not exist\": the slot cannot stream on, and the changes of every table of pipeline %s committed since the checkpoints below cannot be delivered",
			pub, first, cfg.Pipeline)
	}
	return g
}
