package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/daemon"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/plugin/pluginlock"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// The plan: walcast validate --source. For each pipeline it connects to
// the source in a read-only session (so that nothing can be created, not
// even by mistake), reads what a start would find there
// (capture.PlanStart: the checks walcast run makes before it creates
// anything, and the facts behind them), and prints one line per object,
// terraform-plan style:
//
//	ok  wal_level = logical
//	+   replication slot walcast_shop: would be created (…)
//	~   publication walcast_shop: would be updated: created by walcast; adds public.items
//	!   table public.nope: does not exist in the source database: create it or remove it …
//
// then whether walcast run would start. The sinks' lines come from the
// offline checks validate made already (plugin found, checksum, config
// accepted by the plugin itself), plus the topics of each kafka sink.

// Plan marks: what a start does with each object.
const (
	markOK      = "ok" // there and usable as it is
	markCreate  = "+"  // a start creates it
	markUpdate  = "~"  // a start changes it
	markRefused = "!"  // a start refuses because of it
)

// planLine is one line of a plan. key names the object the way
// capture.Finding.Object does, so that a finding lands on its object's
// line.
type planLine struct{ mark, key, text string }

// plan is the lines of one pipeline's plan, in order.
type plan struct{ lines []planLine }

func (pl *plan) add(mark, key, format string, args ...any) {
	pl.lines = append(pl.lines, planLine{mark: mark, key: key, text: fmt.Sprintf(format, args...)})
}

// refuse marks the line of key as a reason to refuse, with why; a reason
// about an object without a line gets its own.
func (pl *plan) refuse(key, why string) {
	for i := range pl.lines {
		if l := &pl.lines[i]; l.key == key && key != "" {
			// The facts stay: they often say why (the owner, the key).
			l.mark, l.text = markRefused, l.text+" — "+why
			return
		}
	}
	pl.add(markRefused, key, "%s", why)
}

func (pl *plan) refusals() int {
	n := 0
	for _, l := range pl.lines {
		if l.mark == markRefused {
			n++
		}
	}
	return n
}

// writePlan prints c's plan to stdout and reports whether walcast run
// would start the pipeline (its file valid, no refusal).
func writePlan(ctx context.Context, stdout, stderr io.Writer, c checkedPipeline, plugins *daemon.PluginSet) bool {
	p := c.p
	if p.Source.DSN == "" || len(p.Source.Tables) == 0 {
		fmt.Fprintf(stdout, "\nNo plan for pipeline %q (%s): fix its source block first.\n", p.Name, c.file)
		return false
	}
	fmt.Fprintf(stdout, "\nPlan for pipeline %q (%s):\n", p.Name, c.file)
	var pl plan
	created, err := planSource(ctx, &pl, p)
	if err != nil {
		// The checks themselves failed: a connection refused, a
		// statement PostgreSQL rejected. Said in one line, cause first.
		pl.add(markRefused, "source", "source: %v", explainSource(err, p.Source.DSN))
	}
	planSinks(ctx, &pl, c, plugins)
	for _, l := range pl.lines {
		fmt.Fprintf(stdout, "  %-3s %s\n", l.mark, l.text)
	}
	n := pl.refusals()
	switch {
	case n > 0 || !c.valid:
		problems := fmt.Sprintf("%d problem(s) marked !", n)
		if !c.valid {
			problems += ", and the errors in the file above"
		}
		fmt.Fprintf(stdout, "walcast run would refuse to start pipeline %q: %s.\n", p.Name, problems)
		return false
	case len(created) > 0:
		fmt.Fprintf(stdout, "walcast run would start pipeline %q; it would create %s.\n", p.Name, strings.Join(created, ", "))
	default:
		fmt.Fprintf(stdout, "walcast run would start pipeline %q; it would create nothing.\n", p.Name)
	}
	return true
}

// planSource adds the source's lines: server, role, walcast schema,
// tables, publications, slot, and the refusals. It returns what a start
// would create.
func planSource(ctx context.Context, pl *plan, p *config.Pipeline) (created []string, err error) {
	pool, err := readOnlyPool(ctx, p.Source.DSN)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	cfg := capture.Config{DSN: p.Source.DSN, Slot: p.Source.Slot, Publication: p.Source.Publication, Tables: p.Source.Tables,
		AllowKeyless: p.Source.AllowKeyless, Pipeline: p.Name, DDLEvents: p.Source.DDLEvents}
	for _, s := range p.Sinks {
		cfg.Sinks = append(cfg.Sinks, s.ID)
	}
	sp, err := capture.PlanStart(ctx, pool, ledger.New(pool, p.Name), cfg)
	if err != nil {
		return nil, err
	}
	cc := pool.Config().ConnConfig
	pl.add(markOK, "server", "PostgreSQL %s at %s:%d, database %s", sp.Server, cc.Host, cc.Port, sp.Role.Database)
	pl.add(markOK, "setting wal_level", "wal_level = %s", sp.WALLevel)
	pl.add(markOK, "role "+sp.Role.Name, "role %s: %s", sp.Role.Name, roleText(sp.Role))
	pl.add(markOK, "database "+sp.Role.Database, "database %s: %s", sp.Role.Database, createText(sp.Role))
	created = addObject(pl, "schema", sp.Schema, created)
	for _, t := range sp.Tables {
		pl.add(markOK, "table "+t.Name, "table %s: %s", t.Name, tableText(t, p.Source.AllowKeyless))
	}
	for _, o := range sp.Publications {
		created = addObject(pl, "publication", o, created)
	}
	created = addObject(pl, "replication slot", sp.Slot, created)
	for _, f := range sp.Findings {
		pl.refuse(f.Object, f.String())
	}
	planServerVersion(pl, p, sp.Server)
	if g := sp.Refusal; g != nil {
		pl.refuse("replication slot "+g.Slot, fmt.Sprintf("walcast run refuses to start (%s): %s", g.Kind, g.Error()))
	}
	if err := planColumns(ctx, pl, p, pool); err != nil {
		return created, err
	}
	if err := planOutbox(ctx, pl, p, pool); err != nil {
		return created, err
	}
	return created, nil
}

// planServerVersion marks the server's line with what the pipeline asks
// of a server of version serverVersion that it cannot do (a messages block
// on PostgreSQL 13: daemon.NeedsNewerServer, the check walcast run makes).
func planServerVersion(pl *plan, p *config.Pipeline, serverVersion string) {
	for _, why := range daemon.NeedsNewerServer(p, serverVersion) {
		pl.refuse("server", why)
	}
}

// readOnlyPool connects to dsn in sessions whose transactions are all
// read-only: a plan that tried to create anything would fail.
func readOnlyPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse source dsn: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = "walcast validate --source"
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	return capture.ConnectConfig(ctx, cfg)
}

// addObject adds the line of a schema, publication or slot, and the
// object to created when a start would create it.
func addObject(pl *plan, kind string, o capture.PlannedObject, created []string) []string {
	key := kind + " " + o.Name
	switch o.Action {
	case "create":
		pl.add(markCreate, key, "%s: would be created (%s)", key, o.Detail)
		return append(created, key)
	case "update":
		pl.add(markUpdate, key, "%s: would be updated (%s)", key, o.Detail)
	case "refused":
		pl.add(markRefused, key, "%s: %s", key, o.Detail)
	default:
		pl.add(markOK, key, "%s: exists (%s)", key, o.Detail)
	}
	return created
}

func roleText(r capture.RoleFacts) string {
	var attrs []string
	if r.Superuser {
		attrs = append(attrs, "SUPERUSER")
	}
	if r.Replication {
		attrs = append(attrs, "REPLICATION")
	} else {
		attrs = append(attrs, "no REPLICATION")
	}
	return strings.Join(attrs, ", ")
}

func createText(r capture.RoleFacts) string {
	if r.CreateOnDB {
		return fmt.Sprintf("role %s has CREATE (for schema walcast and the publications)", r.Name)
	}
	return fmt.Sprintf("role %s has no CREATE privilege", r.Name)
}

// tableText describes a table for the plan: exists, key or replica
// identity, partitioned, owner, the publication's row filter and column
// list, TOAST columns.
func tableText(t capture.TableFacts, allowKeyless bool) string {
	if !t.Exists {
		return "does not exist"
	}
	parts := []string{t.Identity}
	if t.Keyless && allowKeyless {
		parts[0] = "no key: only its inserts and truncates are captured, with key null (allow_keyless)"
	}
	if t.Partitioned {
		parts = append(parts, "partitioned (published through its root)")
	}
	owner := "owned by " + t.Owner
	if t.Owned {
		owner += " (this role may add it to a publication)"
	}
	parts = append(parts, owner)
	if t.RowFilter != "" {
		parts = append(parts, "row filter WHERE "+t.RowFilter)
	}
	if len(t.Columns) > 0 {
		parts = append(parts, "column list ("+strings.Join(t.Columns, ", ")+")")
	}
	if len(t.TOAST) > 0 {
		parts = append(parts, "TOAST columns "+strings.Join(t.TOAST, ", ")+" (an update that leaves them unchanged lists them in \"unchanged\" instead of sending their values)")
	}
	return strings.Join(parts, "; ")
}

// planSinks adds a line per sink: its plugin (path, version, checksum)
// and whether its config was accepted, from validate's offline checks;
// for a kafka sink also its topics.
func planSinks(ctx context.Context, pl *plan, c checkedPipeline, plugins *daemon.PluginSet) {
	listed, _ := pluginlock.List(plugins.Dirs)
	for i := range c.p.Sinks {
		s := &c.p.Sinks[i]
		key := "sink " + s.ID
		if i < len(c.sinks) && c.sinks[i].HasErrors() {
			var errs []string
			for _, d := range c.sinks[i].Errs() {
				errs = append(errs, strings.TrimSuffix(d.Error(), "."))
			}
			pl.add(markRefused, key, "%s (%s): %s", key, s.Type, strings.Join(errs, "; "))
			continue
		}
		what := "plugin found"
		for _, l := range listed {
			if l.Type == s.Type {
				what = fmt.Sprintf("plugin %s", l.Path)
				if l.Version != "" {
					what += " " + l.Version
				}
				what += ", checksum " + string(l.Status)
			}
		}
		what += ", config accepted by the plugin"
		if s.Type == "kafka" {
			if topics, err := topicsOf(ctx, c.p, s, plugins); err == nil {
				what += "; " + topics.String()
			}
		}
		pl.add(markOK, key, "%s (%s): %s", key, s.Type, what)
	}
}
