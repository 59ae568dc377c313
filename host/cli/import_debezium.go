package cli

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// importCommands convert other tools' configurations into pipeline files.
func importCommands() []command {
	return []command{
		{name: "import debezium", args: "FILE.properties", summary: "write a pipeline equivalent to a Debezium PostgreSQL connector's configuration",
			details: "Reads a Debezium PostgreSQL connector configuration (a .properties file) and writes, on stdout,\n" +
				"a pipeline with its tables, slot and publication and a kafka sink with format = \"debezium\" and\n" +
				"its settings. Every setting it could not carry over is listed on stderr, with why.\n" +
				"The password is never written: the file takes the dsn from $WALCAST_SOURCE_DSN.",
			example: "import debezium connector.properties > pipeline.hcl",
			run:     cmdImportDebezium},
		{name: "import sequin", args: "sequin.yaml", summary: "write a pipeline equivalent to a Sequin configuration",
			details: "Reads a Sequin configuration (sequin.yaml: databases, http_endpoints, sinks) and writes, on stdout,\n" +
				"a pipeline for one database: its tables, slot and publication, and a sink with format = \"sequin\"\n" +
				"for each webhook and kafka sink of it, with its table, actions and batch size. Every setting it\n" +
				"could not carry over is listed on stderr, with why. Passwords and encrypted headers are never\n" +
				"written: the file takes them from the environment.",
			example: "import sequin sequin.yaml > pipeline.hcl",
			run:     cmdImportSequin},
	}
}

func cmdImportDebezium(args []string, stdout, stderr io.Writer) int {
	return runImport("debezium", "FILE.properties", args, stdout, stderr, nil, func(raw []byte) (string, []string, error) {
		return importDebezium(parseProperties(raw))
	})
}

// runImport is every import command: read FILE, convert it, write the
// pipeline on stdout and each setting left out on stderr. flags, when
// set, adds the command's own flags before the arguments are parsed.
func runImport(tool, file string, args []string, stdout, stderr io.Writer, flags func(*flag.FlagSet), convert func([]byte) (string, []string, error)) int {
	fs := newFlags("import "+tool, stderr)
	if flags != nil {
		flags(fs)
	}
	pos, code, ok := parsePositionals(fs, args, stdout, stderr, file)
	if !ok {
		return code
	}
	raw, err := os.ReadFile(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "walcast import %s: %v\n", tool, err)
		return 1
	}
	hcl, skipped, err := convert(raw)
	if err != nil {
		fmt.Fprintf(stderr, "walcast import %s: %s: %v\n", tool, pos[0], err)
		return 1
	}
	io.WriteString(stdout, hcl)
	for _, s := range skipped {
		fmt.Fprintf(stderr, "not carried over: %s\n", s)
	}
	return 0
}

// parseProperties reads a Java .properties file: key=value or key: value
// lines, # and ! comments, a trailing backslash continuing a line.
func parseProperties(raw []byte) map[string]string {
	props := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	var cur string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || line[0] == '#' || line[0] == '!') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		line, cur = cur+line, ""
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			props[line] = ""
			continue
		}
		// "\\" is a backslash (Debezium's regular expressions need it).
		props[strings.TrimSpace(line[:i])] = strings.ReplaceAll(strings.TrimSpace(line[i+1:]), `\\`, `\`)
	}
	return props
}

// debeziumCarried are the settings importDebezium writes into the pipeline.
var debeziumCarried = []string{
	"name", "connector.class", "plugin.name", "database.hostname", "database.port", "database.user", "database.dbname",
	"database.password", "topic.prefix", "database.server.name", "table.include.list", "slot.name", "publication.name",
	"decimal.handling.mode", "value.converter.schemas.enable", "key.converter.schemas.enable", "tombstones.on.delete",
	"value.converter", "key.converter",
}

var (
	regexChars   = regexp.MustCompile(`[\\^$.*+?()\[\]{}|]`)
	pipelineChar = regexp.MustCompile(`[^a-z0-9_]+`)
)

// importDebezium writes the pipeline for a connector's properties and
// lists what it left out.
func importDebezium(p map[string]string) (string, []string, error) {
	if c := p["connector.class"]; c != "io.debezium.connector.postgresql.PostgresConnector" {
		return "", nil, fmt.Errorf("connector.class is %q; walcast imports io.debezium.connector.postgresql.PostgresConnector", c)
	}
	var skipped []string
	skip := func(key, why string) { skipped = append(skipped, fmt.Sprintf("%s = %s: %s", key, p[key], why)) }
	prefix := cmpOr(p["topic.prefix"], p["database.server.name"])
	if prefix == "" {
		return "", nil, fmt.Errorf("topic.prefix is not set; it names the pipeline and the topics")
	}
	var tables []string
	for t := range strings.SplitSeq(p["table.include.list"], ",") {
		t = strings.TrimSpace(t)
		switch {
		case t == "":
		case regexChars.MatchString(strings.ReplaceAll(t, ".", "")) || strings.Count(t, ".") != 1:
			skipped = append(skipped, fmt.Sprintf("table.include.list entry %s: a regular expression; walcast captures named tables (\"schema.table\"): add them to tables", t))
		default:
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return "", nil, fmt.Errorf("table.include.list names no table; walcast captures named tables (\"schema.table\")")
	}
	if pl := p["plugin.name"]; pl != "" && pl != "pgoutput" {
		skip("plugin.name", "walcast always uses pgoutput")
	}
	if p["database.password"] != "" {
		skipped = append(skipped, "database.password: not written; put it in $WALCAST_SOURCE_DSN")
	}
	for _, conv := range []string{"value.converter", "key.converter"} {
		if v := p[conv]; v != "" && v != "org.apache.kafka.connect.json.JsonConverter" {
			skip(conv, "walcast writes the JSON converter's form only")
		}
	}
	name := id(prefix)
	var b strings.Builder
	fmt.Fprintf(&b, "# Imported from a Debezium PostgreSQL connector (%s) by walcast import debezium.\n", cmpOr(p["name"], prefix))
	fmt.Fprintf(&b, "# Set WALCAST_SOURCE_DSN=postgres://%s:PASSWORD@%s:%s/%s and KAFKA_BROKERS=host:port.\n",
		p["database.user"], p["database.hostname"], cmpOr(p["database.port"], "5432"), p["database.dbname"])
	fmt.Fprintf(&b, "pipeline = %q\n\nsource \"postgres\" {\n  dsn    = env(\"WALCAST_SOURCE_DSN\")\n  tables = [%s]\n", name, quoteList(tables))
	if s := p["slot.name"]; s != "" {
		fmt.Fprintf(&b, "  slot   = %q\n", s)
	}
	if s := p["publication.name"]; s != "" {
		fmt.Fprintf(&b, "  publication = %q\n", s)
	}
	b.WriteString("}\n")
	outbox, outboxTable, outboxCarried, outboxSkipped := debeziumOutbox(p, tables)
	skipped = append(skipped, outboxSkipped...)
	carried := append(slices.Clone(debeziumCarried), outboxCarried...)
	if outboxTable != "" {
		// The router's events go to a sink of their own, in walcast's
		// format (the outbox's body is the payload, not a change event).
		fmt.Fprintf(&b, "\nsink \"kafka\" \"outbox\" {\n  tables = [%q]\n%s  config {\n    brokers = [env(\"KAFKA_BROKERS\")]\n  }\n}\n", outboxTable, outbox)
		tables = slices.DeleteFunc(slices.Clone(tables), func(t string) bool { return t == outboxTable })
	}
	if len(tables) == 0 {
		return b.String(), notCarried(skipped, p, carried), nil
	}
	if outboxTable != "" {
		fmt.Fprintf(&b, "\nsink \"kafka\" \"kafka\" {\n  tables = [%s]\n  format = \"debezium\"\n  debezium {\n", quoteList(tables))
	} else {
		b.WriteString("\nsink \"kafka\" \"kafka\" {\n  format = \"debezium\"\n  debezium {\n")
	}
	fmt.Fprintf(&b, "    name                  = %q\n", prefix)
	// Kafka Connect's JSON converter writes schemas unless told not to.
	fmt.Fprintf(&b, "    schemas               = %v\n", p["value.converter.schemas.enable"] != "false")
	if m := p["decimal.handling.mode"]; m != "" {
		if slices.Contains([]string{"precise", "double", "string"}, m) {
			fmt.Fprintf(&b, "    decimal_handling_mode = %q\n", m)
		} else {
			skip("decimal.handling.mode", "walcast knows precise, double and string")
		}
	}
	b.WriteString("  }\n  config {\n    brokers      = [env(\"KAFKA_BROKERS\")]\n")
	fmt.Fprintf(&b, "    topic_prefix = %q\n", prefix)
	if p["tombstones.on.delete"] == "false" {
		b.WriteString("    tombstones   = false\n")
	}
	b.WriteString("  }\n}\n")
	return b.String(), notCarried(skipped, p, carried), nil
}

// notCarried lists, after skipped, every setting of p not carried over,
// with why.
func notCarried(skipped []string, p map[string]string, carried []string) []string {
	var keys []string
	for k := range p {
		if !slices.Contains(carried, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		skipped = append(skipped, fmt.Sprintf("%s = %s: %s", k, p[k], debeziumWhy(k)))
	}
	return skipped
}

// debeziumWhy says why a setting is not carried over.
func debeziumWhy(key string) string {
	switch {
	case strings.HasPrefix(key, "snapshot."):
		return "walcast streams from the slot's creation; run walcast backfill for the rows that exist"
	case strings.HasPrefix(key, "transforms"):
		return "single message transforms have no equivalent; use the sink's tables and ops"
	case strings.HasPrefix(key, "column.") || key == "message.key.columns":
		return "walcast sends every published column and keys rows by their replica identity; use a publication column list"
	case strings.HasPrefix(key, "database.ssl"):
		return "put sslmode and the certificate files in the dsn"
	}
	return "no walcast equivalent"
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
