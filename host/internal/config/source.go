package config

import (
	"slices"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/pg"
)

// sourceSchema is the body of a source block. dsn and tables are required,
// but checked by hand so that the message points at the block header and
// says what to write.
var sourceSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "dsn"},
		{Name: "tables"},
		{Name: "slot"},
		{Name: "publication"},
		{Name: "allow_keyless"},
		{Name: "backfill_new_tables"},
		{Name: "receive_timeout"},
		{Name: "on_gap"},
		{Name: "ddl_events"},
		{Name: "on_attach"},
		{Name: "on_detach"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "messages"}},
}

// messagesSchema is the body of a source's messages block.
var messagesSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "prefixes", Required: true}},
}

// sourceTypePostgres is the one source type there is.
const sourceTypePostgres = "postgres"

func (d *decoder) decodeSource(block *hcl.Block, p *Pipeline) Source {
	src := Source{Type: block.Labels[0], DeclRange: block.DefRange}
	if src.Type != sourceTypePostgres {
		d.errorf(block.LabelRanges[0], "Unsupported source type",
			"Source type %q is not supported; walcast captures from PostgreSQL: write source %q.", src.Type, sourceTypePostgres)
	}

	content, diags := block.Body.Content(sourceSchema)
	d.add(diags...)
	attrs := content.Attributes

	if attr, ok := attrs["dsn"]; ok {
		src.DSNRange = attr.Expr.Range()
		if d.decodeAttr(attr, &src.DSN) && src.DSN == "" {
			d.errorf(src.DSNRange, "Empty dsn",
				"The source needs a PostgreSQL connection string; if it comes from env(), that variable is set but empty.")
		}
		d.checkDSN(&src)
	} else {
		d.errorf(block.DefRange, "Missing dsn",
			`The source needs dsn = "postgres://user@host/db", usually dsn = env("WALCAST_SOURCE_DSN") to keep the password out of the file.`)
	}

	if attr, ok := attrs["tables"]; ok {
		var ok bool
		src.Tables, src.TableRanges, ok = d.decodeStringList(attr)
		if ok {
			d.checkSourceTables(src.Tables, src.TableRanges, attr.Expr.Range())
		}
	} else {
		d.errorf(block.DefRange, "Missing tables",
			`The source needs tables = ["public.orders", ...]: the schema-qualified tables to capture.`)
	}

	slot, pub := attrs["slot"], attrs["publication"]
	var def string
	if slot == nil || pub == nil {
		def = d.defaultIdent(p)
	}
	src.Slot = d.identOr(slot, "slot", def)
	src.Publication = d.identOr(pub, "publication", def)

	if attr, ok := attrs["allow_keyless"]; ok {
		d.decodeAttr(attr, &src.AllowKeyless)
	}
	if attr, ok := attrs["backfill_new_tables"]; ok {
		d.decodeAttr(attr, &src.BackfillNewTables)
	}
	if attr, ok := attrs["receive_timeout"]; ok {
		d.decodeReceiveTimeout(attr, &src)
	}
	src.OnGap = OnGapStop
	if attr, ok := attrs["on_gap"]; ok && d.decodeAttr(attr, &src.OnGap) && src.OnGap != OnGapStop && src.OnGap != OnGapResync {
		d.errorf(attr.Expr.Range(), "Invalid on_gap",
			"on_gap must be %q (refuse to start when changes were lost; the default) or %q (record the gap, create a new slot and resync the tables), got %q.",
			OnGapStop, OnGapResync, src.OnGap)
	}
	if attr, ok := attrs["ddl_events"]; ok {
		d.decodeAttr(attr, &src.DDLEvents)
	}
	for i, b := range content.Blocks {
		if i > 0 {
			d.errorf(b.DefRange, "Duplicate messages block",
				"A source has at most one messages block; the first is at %s.", lineOf(content.Blocks[0].DefRange))
			continue
		}
		src.Messages = d.decodeMessages(b)
	}
	src.OnAttach, src.OnDetach = d.decodePartitionSettings(attrs)
	return src
}

// decodePartitionSettings decodes a source's on_attach and on_detach,
// returning the defaults for what is not set.
func (d *decoder) decodePartitionSettings(attrs hcl.Attributes) (onAttach, onDetach string) {
	onAttach, onDetach = OnAttachBackfill, OnDetachDelete
	if attr, ok := attrs["on_attach"]; ok && d.decodeAttr(attr, &onAttach) && onAttach != OnAttachBackfill && onAttach != OnAttachIgnore {
		d.errorf(attr.Expr.Range(), "Invalid on_attach",
			"on_attach must be %q (read the rows a partition ATTACHed to a captured table brings to every sink; the default) or %q, got %q.",
			OnAttachBackfill, OnAttachIgnore, onAttach)
	}
	if attr, ok := attrs["on_detach"]; ok && d.decodeAttr(attr, &onDetach) &&
		onDetach != OnDetachDelete && onDetach != OnDetachEvent && onDetach != OnDetachIgnore {
		d.errorf(attr.Expr.Range(), "Invalid on_detach",
			"on_detach must be %q (the rows of a partition DETACHed, dropped or truncated leave every sink's copy; the default), %q (a partition DETACHed gives one detach event instead of its rows' deletes) or %q, got %q.",
			OnDetachDelete, OnDetachEvent, OnDetachIgnore, onDetach)
	}
	return onAttach, onDetach
}

// decodeMessages decodes a source's messages block: the prefixes of the
// application messages that become message events.
func (d *decoder) decodeMessages(block *hcl.Block) Messages {
	m := Messages{DeclRange: block.DefRange}
	content, diags := block.Body.Content(messagesSchema)
	d.add(diags...)
	attr, ok := content.Attributes["prefixes"]
	if !ok {
		return m
	}
	vals, ranges, ok := d.decodeStringList(attr)
	if !ok {
		return m
	}
	if len(vals) == 0 {
		d.errorf(attr.Expr.Range(), "No message prefixes",
			`An empty list captures no message; list the prefixes your application passes to pg_logical_emit_message (e.g. prefixes = ["app."]), or remove the messages block.`)
		return m
	}
	for i, p := range vals {
		if problem := pg.CheckMessagePrefix(p); problem != "" {
			d.errorf(ranges[i], "Invalid message prefix", "%s.", problem)
			continue
		}
		if slices.Contains(m.Prefixes, p) {
			d.errorf(ranges[i], "Duplicate message prefix", "Prefix %q is listed twice.", p)
			continue
		}
		m.Prefixes = append(m.Prefixes, p)
	}
	return m
}

// The values of source.on_attach and source.on_detach.
const (
	OnAttachBackfill = "backfill"
	OnAttachIgnore   = "ignore"
	OnDetachDelete   = "delete"
	OnDetachEvent    = "event"
	OnDetachIgnore   = "ignore"
)

// The values of source.on_gap.
const (
	OnGapStop   = "stop"
	OnGapResync = "resync"
)

// MinReceiveTimeout is the shortest receive_timeout: the stream asks for
// a keepalive at half of it, and the answer must have time to come back.
const MinReceiveTimeout = time.Second

// decodeReceiveTimeout decodes source.receive_timeout.
func (d *decoder) decodeReceiveTimeout(attr *hcl.Attribute, src *Source) {
	v, ok := d.decodeDuration(attr)
	if !ok {
		return
	}
	if v < MinReceiveTimeout {
		d.errorf(attr.Expr.Range(), "Invalid receive_timeout",
			"receive_timeout must be at least %s, got %s: the stream asks the server for a keepalive at half of it and must leave time for the answer. Leave it out for the default, twice the server's wal_sender_timeout.",
			MinReceiveTimeout, v)
		return
	}
	src.ReceiveTimeout = v
}

// defaultIdent derives the default slot and publication name from the
// pipeline name, or returns "" when that name is already reported as bad.
func (d *decoder) defaultIdent(p *Pipeline) string {
	if checkSlotName(p.Name) != "" {
		return ""
	}
	name := defaultSlotName(p.Name)
	if problem := checkSlotName(name); problem != "" {
		d.errorf(p.NameRange, "Pipeline name too long",
			"The default slot and publication name %q %s; shorten the pipeline name or set slot and publication in the source block.",
			name, problem)
	}
	return name
}

// identOr decodes and checks the slot or publication attribute, or returns
// def when attr is nil.
func (d *decoder) identOr(attr *hcl.Attribute, what, def string) string {
	if attr == nil {
		return def
	}
	var name string
	if d.decodeAttr(attr, &name) {
		if problem := checkSlotName(name); problem != "" {
			d.errorf(attr.Expr.Range(), "Invalid "+what+" name", "The %s name %q %s.", what, name, problem)
		}
	}
	return name
}

func (d *decoder) checkPipelineName(name string, rng hcl.Range) {
	if problem := checkSlotName(name); problem != "" {
		d.errorf(rng, "Invalid pipeline name",
			"The pipeline name %q %s. It names the replication slot and publication by default, so it follows PostgreSQL's rule for slot names.", name, problem)
	}
}

func (d *decoder) checkSourceTables(tables []string, ranges []hcl.Range, listRange hcl.Range) {
	if len(tables) == 0 {
		d.errorf(listRange, "No tables",
			"The source captures nothing; list at least one schema-qualified table.")
		return
	}
	seen := make(map[string]hcl.Range, len(tables))
	for i, t := range tables {
		if problem := checkTableName(t); problem != "" {
			d.errorf(ranges[i], "Invalid table name", "%s", problem)
			continue
		}
		if first, dup := seen[t]; dup {
			d.errorf(ranges[i], "Duplicate table", "Table %q is already listed at %s.", t, lineOf(first))
			continue
		}
		seen[t] = ranges[i]
	}
}
