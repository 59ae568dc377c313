package main

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/clienttls"
)

const (
	defaultStreamPrefix = "walcast"
	defaultTimeout      = 10 * time.Second
	// defaultMaxEntryBytes is Redis's default proto-max-bulk-len: the
	// largest value one command may carry. Open lowers it to the server's
	// own setting when it may read it.
	defaultMaxEntryBytes = 512 << 20
)

// configFields declares the config block.
var configFields = []pluginkit.ConfigField{
	{Name: "address", Type: pluginkit.TypeString, Required: true, Doc: `The Redis server, "host:port".`},
	{Name: "username", Type: pluginkit.TypeString, Doc: `ACL user (Redis 6+); empty: the default user.`},
	{Name: "password", Type: pluginkit.TypeString, Doc: `Password of username, or the requirepass of a server without ACL users.`},
	{Name: "db", Type: pluginkit.TypeNumber, Doc: `Database number (SELECT). Default 0.`},
	{Name: "stream_prefix", Type: pluginkit.TypeString, Doc: `Events of schema.table go to the stream "<stream_prefix>:<schema>.<table>"; with a route, to "<stream_prefix>:<route>". Default "walcast".`},
	{Name: "streams", Type: pluginkit.TypeStringMap, Doc: `Per-table stream keys, "schema.table" = "key", instead of the derived name.`},
	{Name: "maxlen", Type: pluginkit.TypeNumber, Doc: `Trim each stream to about this many entries on every XADD (MAXLEN ~); 0 (default): never trim.`},
	{Name: "maxlen_exact", Type: pluginkit.TypeBool, Doc: `true: trim to exactly maxlen (MAXLEN =, slower); false (default): Redis trims whole nodes, keeping at least maxlen.`},
	{Name: "checkpoint_key", Type: pluginkit.TypeString, Doc: `Hash holding this sink's checkpoint (fields "id" and "id_epoch") and fencing epoch, written in every batch's MULTI/EXEC. Must be unique per sink and stable. Default "walcast:checkpoint:<pipeline>:<sink id>".`},
	{Name: "timeout", Type: pluginkit.TypeDuration, Doc: `Dial, read and write timeout of one command. Default "10s".`},
	{Name: "max_entry_bytes", Type: pluginkit.TypeNumber, Doc: `An event larger than this is refused (parked) without being sent. Default: the server's proto-max-bulk-len when readable, else 536870912.`},
	{Name: "tls", Type: pluginkit.TypeStringMap, Doc: `TLS: enabled ("true" when the map is set), ca_file, cert_file, key_file, server_name, insecure_skip_verify.`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	Address       string            `json:"address"`
	Username      string            `json:"username"`
	Password      string            `json:"password"`
	DB            *float64          `json:"db"`
	StreamPrefix  string            `json:"stream_prefix"`
	Streams       map[string]string `json:"streams"`
	MaxLen        *float64          `json:"maxlen"`
	MaxLenExact   bool              `json:"maxlen_exact"`
	CheckpointKey string            `json:"checkpoint_key"`
	Timeout       string            `json:"timeout"`
	MaxEntryBytes *float64          `json:"max_entry_bytes"`
	TLS           map[string]string `json:"tls"`
}

// settings is the validated config.
type settings struct {
	address       string
	username      string
	password      string
	db            int
	streamPrefix  string
	streams       map[string]string // "schema.table" -> stream key
	maxLen        int64
	maxLenExact   bool
	checkpointKey string
	timeout       time.Duration
	maxEntryBytes int64
	// maxEntrySet: max_entry_bytes was written, so the server's own limit
	// does not replace it.
	maxEntrySet bool
	tls         *tls.Config
}

func decodeConfig(raw json.RawMessage, id pluginkit.Identity, tables []string) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st := settings{
		address:       c.Address,
		username:      c.Username,
		password:      c.Password,
		streamPrefix:  cmp.Or(c.StreamPrefix, defaultStreamPrefix),
		maxLenExact:   c.MaxLenExact,
		checkpointKey: cmp.Or(c.CheckpointKey, "walcast:checkpoint:"+cmp.Or(id.Pipeline, "walcast")+":"+cmp.Or(id.SinkID, "redis")),
		timeout:       defaultTimeout,
		maxEntryBytes: defaultMaxEntryBytes,
	}
	for _, step := range []func() error{
		func() error { return parseAddress(st.address) },
		func() error { return parseNumbers(&st, c) },
		func() error { return parseTimeout(&st, c.Timeout) },
		func() (err error) { st.tls, err = clienttls.Decode(c.TLS, clienttls.SettingsAndEnabled); return err },
	} {
		if err := step(); err != nil {
			return st, err
		}
	}
	return st, errors.Join(parseStreams(&st, c.Streams), checkStreams(st, tables))
}

func parseAddress(addr string) error {
	if addr == "" {
		return &pluginkit.ConfigError{Field: "address", Msg: `is required: the Redis server as "host:port"`}
	}
	if strings.Contains(addr, "://") {
		return &pluginkit.ConfigError{Field: "address", Msg: fmt.Sprintf(`%q: write "host:port" (no URL); credentials go in username and password, TLS in tls`, redactURL(addr))}
	}
	if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
		return &pluginkit.ConfigError{Field: "address", Msg: fmt.Sprintf(`%q is not "host:port"`, addr)}
	}
	return nil
}

// redactURL cuts a URL to its scheme and host: a redis:// URL often holds
// a password.
func redactURL(s string) string {
	scheme, rest, _ := strings.Cut(s, "://")
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return scheme + "://" + rest
}

// wholeNumber checks that a JSON number is an integer within [lo, hi].
func wholeNumber(field string, v float64, lo, hi int64) (int64, error) {
	if v != float64(int64(v)) || int64(v) < lo || int64(v) > hi {
		return 0, &pluginkit.ConfigError{Field: field, Msg: fmt.Sprintf("must be a whole number from %d to %d, not %v", lo, hi, v)}
	}
	return int64(v), nil
}

func parseNumbers(st *settings, c config) error {
	if c.DB != nil {
		n, err := wholeNumber("db", *c.DB, 0, 1<<20)
		if err != nil {
			return err
		}
		st.db = int(n)
	}
	if c.MaxLen != nil {
		n, err := wholeNumber("maxlen", *c.MaxLen, 0, 1<<62)
		if err != nil {
			return err
		}
		st.maxLen = n
	}
	if c.MaxLenExact && st.maxLen == 0 {
		return &pluginkit.ConfigError{Field: "maxlen_exact", Msg: "needs maxlen: without it streams are never trimmed"}
	}
	if c.MaxEntryBytes != nil {
		n, err := wholeNumber("max_entry_bytes", *c.MaxEntryBytes, 1024, 1<<40)
		if err != nil {
			return err
		}
		st.maxEntryBytes, st.maxEntrySet = n, true
	}
	return nil
}

func parseTimeout(st *settings, s string) error {
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 100*time.Millisecond {
		return &pluginkit.ConfigError{Field: "timeout", Msg: fmt.Sprintf(`%q: want a duration of at least "100ms", such as "10s"`, s)}
	}
	st.timeout = d
	return nil
}

// streamOf is the stream key e is written to: "<stream_prefix>:<route>"
// when the sink's route expression chose one, else its table's.
func (st settings) streamOf(e *pluginkit.Event) string {
	if e.Route != "" {
		return st.streamPrefix + ":" + e.Route
	}
	return st.streamFor(e.Schema, e.Table)
}

// streamFor is the stream key of schema.table's events.
func (st settings) streamFor(schema, table string) string {
	if schema == "" && table == "" {
		return st.streamPrefix + ":message" // a message event names no table
	}
	if k, ok := st.streams[schema+"."+table]; ok {
		return k
	}
	return st.streamPrefix + ":" + schema + "." + table
}

// parseStreams checks the per-table stream keys.
func parseStreams(st *settings, m map[string]string) error {
	if len(m) == 0 {
		return nil
	}
	st.streams = make(map[string]string, len(m))
	var errs []error
	for _, table := range slices.Sorted(maps.Keys(m)) {
		key := m[table]
		switch {
		case !strings.Contains(table, "."):
			errs = append(errs, &pluginkit.ConfigError{Field: "streams", Msg: fmt.Sprintf(`key %q: want "schema.table"`, table)})
		case key == "":
			errs = append(errs, &pluginkit.ConfigError{Field: "streams", Table: table, Msg: fmt.Sprintf("the stream key for %s is empty", table)})
		case key == st.checkpointKey:
			errs = append(errs, &pluginkit.ConfigError{Field: "streams", Table: table, Msg: fmt.Sprintf("%q is the checkpoint key; name another stream", key)})
		default:
			st.streams[table] = key
		}
	}
	return errors.Join(errs...)
}

// checkStreams reports every table whose stream would also be another
// table's: consumers could not tell their rows apart by stream.
func checkStreams(st settings, tables []string) error {
	var errs []error
	byKey := map[string]string{}
	for _, table := range tables {
		schema, name, ok := strings.Cut(table, ".")
		if !ok {
			continue
		}
		key := st.streamFor(schema, name)
		field := ""
		if _, ok := st.streams[table]; ok {
			field = "streams"
		}
		switch {
		case byKey[key] != "":
			errs = append(errs, &pluginkit.ConfigError{Field: field, Table: table,
				Msg: fmt.Sprintf("its stream %q is also the stream of %s: name a different one in streams = { %q = \"...\" }", key, byKey[key], table)})
		case key == st.checkpointKey:
			errs = append(errs, &pluginkit.ConfigError{Field: field, Table: table,
				Msg: fmt.Sprintf("its stream %q is the checkpoint key: set checkpoint_key or streams", key)})
		default:
			byKey[key] = table
		}
	}
	return errors.Join(errs...)
}
