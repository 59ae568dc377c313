package cli

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A Sequin configuration (sequin.yaml, Sequin's docs/reference/sequin-yaml.mdx)
// holds databases, http_endpoints and sinks, each sink one table of one
// database to one destination. A walcast pipeline reads one database, so
// the import writes the pipeline of one database with a sink per Sequin
// sink of it: format = "sequin" (Sequin's message), its table as the
// sink's tables, its actions as ops, its batch size.

type sequinConfig struct {
	Databases     []sequinDatabase `yaml:"databases"`
	HTTPEndpoints []sequinEndpoint `yaml:"http_endpoints"`
	Sinks         []yaml.Node      `yaml:"sinks"`
}

type sequinDatabase struct {
	Name            string `yaml:"name"`
	Username        string `yaml:"username"`
	Password        string `yaml:"password"`
	Hostname        string `yaml:"hostname"`
	Port            any    `yaml:"port"`
	Database        string `yaml:"database"`
	SlotName        string `yaml:"slot_name"`
	PublicationName string `yaml:"publication_name"`
	Tables          []struct {
		TableName   string `yaml:"table_name"`
		TableSchema string `yaml:"table_schema"`
	} `yaml:"tables"`
}

type sequinEndpoint struct {
	Name             string          `yaml:"name"`
	URL              string          `yaml:"url"`
	Headers          []sequinKeyPair `yaml:"headers"`
	EncryptedHeaders []sequinKeyPair `yaml:"encrypted_headers"`
}

type sequinKeyPair struct {
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
}

// sequinSink is one sink; Destination keeps every key so that the ones
// not carried over can be listed.
type sequinSink struct {
	Name        string         `yaml:"name"`
	Database    string         `yaml:"database"`
	Table       string         `yaml:"table"`
	BatchSize   int            `yaml:"batch_size"`
	Status      string         `yaml:"status"`
	Actions     []string       `yaml:"actions"`
	Destination map[string]any `yaml:"destination"`
}

// sequinTopLevel and sequinSinkKeys are what the import reads; any other
// key is listed as not carried over.
var (
	sequinTopLevel = []string{"databases", "http_endpoints", "sinks"}
	sequinSinkKeys = []string{"name", "database", "table", "batch_size", "status", "actions", "destination"}
	// sequinEnvRef is Sequin's environment substitution, ${VAR} or
	// ${VAR:-default}.
	sequinEnvRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)
)

func cmdImportSequin(args []string, stdout, stderr io.Writer) int {
	var database string
	return runImport("sequin", "sequin.yaml", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&database, "database", "", "the `name` of the database to import, when the file has several")
	}, func(raw []byte) (string, []string, error) {
		return importSequin(raw, database)
	})
}

// sequinImport is one import under way: what it writes and what it left
// out.
type sequinImport struct {
	b       strings.Builder
	skipped []string
}

func (im *sequinImport) skip(format string, args ...any) {
	im.skipped = append(im.skipped, fmt.Sprintf(format, args...))
}

// importSequin writes the pipeline of one database of a Sequin
// configuration and lists what it left out.
func importSequin(raw []byte, database string) (string, []string, error) {
	var cfg sequinConfig
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", nil, fmt.Errorf("read YAML: %w", err)
	}
	db, err := sequinPick(cfg.Databases, database)
	if err != nil {
		return "", nil, err
	}
	im := &sequinImport{}
	var top map[string]yaml.Node
	yaml.Unmarshal(raw, &top)
	for _, k := range sortedKeys(top) {
		if !slices.Contains(sequinTopLevel, k) {
			im.skip("%s: no walcast equivalent (walcast keeps no accounts, users, tokens, transforms or change retention)", k)
		}
	}
	for _, other := range cfg.Databases {
		if other.Name != db.Name {
			im.skip("database %s and its sinks: a pipeline reads one database; run walcast import sequin --database %s for it", other.Name, other.Name)
		}
	}
	if db.Password != "" {
		im.skip("databases[%s].password: not written; put it in $WALCAST_SOURCE_DSN", db.Name)
	}
	var sinks []sequinSink
	tables := sequinTables(db)
	for i := range cfg.Sinks {
		s, ok := im.sink(&cfg.Sinks[i], db.Name)
		if ok {
			sinks = append(sinks, s)
			if !slices.Contains(tables, s.Table) {
				tables = append(tables, s.Table)
			}
		}
	}
	if len(tables) == 0 {
		return "", nil, fmt.Errorf("database %s names no table and has no sink; walcast captures named tables", db.Name)
	}
	im.source(db, tables)
	for _, s := range sinks {
		im.writeSink(s, cfg.HTTPEndpoints)
	}
	return im.b.String(), im.skipped, nil
}

// sequinPick is the database to import: the one named, or the only one.
func sequinPick(dbs []sequinDatabase, name string) (sequinDatabase, error) {
	var names []string
	for _, d := range dbs {
		if d.Name == name || (name == "" && len(dbs) == 1) {
			return d, nil
		}
		names = append(names, d.Name)
	}
	switch {
	case len(dbs) == 0:
		return sequinDatabase{}, fmt.Errorf("no databases; walcast imports a configuration with at least one")
	case name == "":
		return sequinDatabase{}, fmt.Errorf("%d databases (%s); a pipeline reads one: choose it with --database", len(dbs), strings.Join(names, ", "))
	}
	return sequinDatabase{}, fmt.Errorf("no database named %q (the file has %s)", name, strings.Join(names, ", "))
}

// sequinTables are a database's tables as "schema.table".
func sequinTables(db sequinDatabase) []string {
	var out []string
	for _, t := range db.Tables {
		out = append(out, qualified(t.TableSchema, t.TableName))
	}
	return out
}

// qualified adds Sequin's default schema, public, to a table name.
func qualified(schema, table string) string {
	if strings.Contains(table, ".") {
		return table
	}
	return cmpOr(schema, "public") + "." + table
}

// sink reads one sink of the file; ok is false when it is not carried
// over (another database, disabled, a destination walcast has no
// importer for), which is listed.
func (im *sequinImport) sink(node *yaml.Node, database string) (s sequinSink, ok bool) {
	if err := node.Decode(&s); err != nil {
		im.skip("sink at line %d: %v", node.Line, err)
		return s, false
	}
	if s.Database != database {
		return s, false // listed with its database
	}
	typ, _ := s.Destination["type"].(string)
	switch {
	case s.Status == "disabled":
		im.skip("sink %s: disabled in Sequin; add it by hand when it is wanted", s.Name)
		return s, false
	case typ != "webhook" && typ != "kafka":
		im.skip("sink %s: destination type %q; walcast imports webhook and kafka destinations (write the sink by hand, see docs/sinks.md)", s.Name, typ)
		return s, false
	case s.Table == "":
		im.skip("sink %s: no table", s.Name)
		return s, false
	}
	s.Table = qualified("", s.Table)
	var keys map[string]yaml.Node
	node.Decode(&keys)
	for _, k := range sortedKeys(keys) {
		if !slices.Contains(sequinSinkKeys, k) {
			im.skip("sinks[%s].%s: %s", s.Name, k, sequinWhy(k))
		}
	}
	return s, true
}

// sequinWhy says why a sink setting is not carried over.
func sequinWhy(key string) string {
	switch key {
	case "filters":
		return "row filters have no equivalent; the sink gets every row of its table: filter in the consumer"
	case "transform":
		return "transforms have no equivalent; the sink delivers Sequin's whole message"
	case "group_column_names":
		return "walcast orders each row's changes by its key, not by other columns"
	}
	return "no walcast equivalent"
}

// source writes the pipeline's header and source block.
func (im *sequinImport) source(db sequinDatabase, tables []string) {
	b := &im.b
	fmt.Fprintf(b, "# Imported from a Sequin configuration (database %s) by walcast import sequin.\n", db.Name)
	port := "5432"
	if db.Port != nil {
		port = fmt.Sprint(db.Port)
	}
	fmt.Fprintf(b, "# Set WALCAST_SOURCE_DSN=postgres://%s:PASSWORD@%s:%s/%s and the variables named below.\n",
		cmpOr(db.Username, "postgres"), db.Hostname, port, db.Database)
	fmt.Fprintf(b, "pipeline = %q\n\nsource \"postgres\" {\n  dsn    = env(\"WALCAST_SOURCE_DSN\")\n  tables = [%s]\n", id(db.Name), quoteList(tables))
	if db.SlotName != "" {
		fmt.Fprintf(b, "  slot   = %s\n", im.hclString("slot_name", db.SlotName))
	}
	if db.PublicationName != "" {
		fmt.Fprintf(b, "  publication = %s\n", im.hclString("publication_name", db.PublicationName))
	}
	b.WriteString("}\n")
}

// writeSink writes one sink block.
func (im *sequinImport) writeSink(s sequinSink, endpoints []sequinEndpoint) {
	b := &im.b
	typ := s.Destination["type"].(string)
	fmt.Fprintf(b, "\nsink %q %q {\n  format = \"sequin\"\n  tables = [%q]\n", typ, id(s.Name), s.Table)
	if len(s.Actions) > 0 {
		// Sequin delivers a backfill's rows whatever the actions.
		fmt.Fprintf(b, "  ops    = [%s]\n", quoteList(append(slices.Clone(s.Actions), "read")))
	}
	// Sequin's default batch is one message.
	fmt.Fprintf(b, "  delivery {\n    batch_size = %d\n  }\n  config {\n", max(s.BatchSize, 1))
	if typ == "webhook" {
		im.webhookConfig(s, endpoints)
	} else {
		im.kafkaConfig(s)
	}
	for _, k := range sortedKeys(s.Destination) {
		im.skip("sinks[%s].destination.%s: no walcast equivalent", s.Name, k)
	}
	b.WriteString("  }\n}\n")
}

// webhookConfig writes a webhook sink's config from its HTTP endpoint.
func (im *sequinImport) webhookConfig(s sequinSink, endpoints []sequinEndpoint) {
	d := s.Destination
	name, _ := d["http_endpoint"].(string)
	path, _ := d["http_endpoint_path"].(string)
	delete(d, "type")
	delete(d, "http_endpoint")
	delete(d, "http_endpoint_path")
	i := slices.IndexFunc(endpoints, func(e sequinEndpoint) bool { return e.Name == name })
	if i < 0 || endpoints[i].URL == "" {
		im.skip("sinks[%s]: http endpoint %q has no url (local and webhook.site endpoints are Sequin Cloud's); set url by hand", s.Name, name)
		fmt.Fprintf(&im.b, "    url = env(\"WEBHOOK_URL\")\n")
		return
	}
	e := endpoints[i]
	fmt.Fprintf(&im.b, "    url = %s\n", im.hclString("url", strings.TrimRight(e.URL, "/")+path))
	if len(e.Headers)+len(e.EncryptedHeaders) == 0 {
		return
	}
	im.b.WriteString("    headers = {\n")
	for _, h := range e.Headers {
		fmt.Fprintf(&im.b, "      %q = %s\n", h.Key, im.hclString("header "+h.Key, h.Value))
	}
	for _, h := range e.EncryptedHeaders {
		v := envName(id(e.Name) + "_" + id(h.Key))
		fmt.Fprintf(&im.b, "      %q = env(%q)\n", h.Key, v)
		im.skip("http_endpoints[%s].encrypted_headers %s: not written; put its value in $%s", e.Name, h.Key, v)
	}
	im.b.WriteString("    }\n")
}

// kafkaConfig writes a kafka sink's config from its destination.
func (im *sequinImport) kafkaConfig(s sequinSink) {
	d := s.Destination
	str := func(k string) string {
		v := d[k]
		delete(d, k)
		if v == nil {
			return ""
		}
		return fmt.Sprint(v)
	}
	str("type")
	var brokers []string
	for h := range strings.SplitSeq(str("hosts"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			brokers = append(brokers, im.hclString("hosts", h))
		}
	}
	fmt.Fprintf(&im.b, "    brokers = [%s]\n", strings.Join(brokers, ", "))
	if topic := str("topic"); topic != "" {
		fmt.Fprintf(&im.b, "    topics  = { %q = %s }\n", s.Table, im.hclString("topic", topic))
	}
	if str("tls") == "true" {
		im.b.WriteString("    tls     = { enabled = \"true\" }\n")
	}
	user, pass, mech := str("username"), str("password"), str("sasl_mechanism")
	if user != "" || mech != "" {
		v := envName(id(s.Name) + "_KAFKA_PASSWORD")
		fmt.Fprintf(&im.b, "    sasl    = { mechanism = %q, username = %s, password = env(%q) }\n",
			strings.ReplaceAll(cmpOr(mech, "plain"), "_", "-"), im.hclString("username", user), v)
		if pass != "" {
			im.skip("sinks[%s].destination.password: not written; put it in $%s", s.Name, v)
		}
	}
}

// hclString is s as an HCL string, Sequin's ${VAR} and ${VAR:-default}
// references turned into walcast's env("VAR") (a default is listed: env
// has none), and every other ${ or %{ escaped.
func (im *sequinImport) hclString(what, s string) string {
	var b strings.Builder
	b.WriteByte('"')
	last := 0
	for _, m := range sequinEnvRef.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(hclEscape(s[last:m[0]]))
		name := s[m[2]:m[3]]
		fmt.Fprintf(&b, "${env(%q)}", name)
		if m[4] >= 0 {
			im.skip("%s: the default of ${%s%s}: walcast's env() has none; set %s", what, name, s[m[4]:m[5]], name)
		}
		last = m[1]
	}
	b.WriteString(hclEscape(s[last:]))
	b.WriteByte('"')
	return b.String()
}

// hclEscape escapes s for the inside of an HCL quoted string.
func hclEscape(s string) string {
	q := fmt.Sprintf("%q", s)
	q = q[1 : len(q)-1]
	return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(q)
}

// id is a name as a walcast name: lower case, runs of anything but
// letters, digits and _ as one _.
func id(s string) string {
	return strings.Trim(pipelineChar.ReplaceAllString(strings.ToLower(s), "_"), "_")
}

// envName is the environment variable the pipeline reads a secret from.
func envName(s string) string { return "SEQUIN_" + strings.ToUpper(s) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
