package main

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/clienttls"
)

const (
	defaultSubjectPrefix = "walcast"
	defaultStream        = "WALCAST"
	// defaultWindow is both the duplicate window of a stream the sink
	// creates and the shortest one it accepts: NATS's own default, and
	// longer than the host's first retries (retry_base 30 s, then 1 min).
	defaultWindow     = 2 * time.Minute
	defaultAckTimeout = 30 * time.Second
	defaultTimeout    = 5 * time.Second
)

// configFields declares the config block.
var configFields = []pluginkit.ConfigField{
	{Name: "servers", Type: pluginkit.TypeStringList, Required: true, Doc: `NATS server URLs, "nats://host:4222" (tls:// for TLS).`},
	{Name: "subject_prefix", Type: pluginkit.TypeString, Doc: `Events of schema.table are published to "<subject_prefix>.<schema>.<table>", each '.', '*', '>' or space in a name replaced by "_"; with a route, to "<subject_prefix>.<route>". Default "walcast".`},
	{Name: "subjects", Type: pluginkit.TypeStringMap, Doc: `Per-table subjects, "schema.table" = "subject", instead of the derived one.`},
	{Name: "stream", Type: pluginkit.TypeString, Doc: `The JetStream stream that must store the events (Nats-Expected-Stream on every message). Default "WALCAST".`},
	{Name: "create_stream", Type: pluginkit.TypeBool, Doc: `true (default): create the stream when missing, on "<subject_prefix>.>" and the subjects, file storage, duplicate_window.`},
	{Name: "duplicate_window", Type: pluginkit.TypeDuration, Doc: `Duplicate window of a stream the sink creates. Default "2m".`},
	{Name: "replicas", Type: pluginkit.TypeNumber, Doc: `Replicas of a stream the sink creates (1 to 5). Default 1.`},
	{Name: "min_duplicate_window", Type: pluginkit.TypeDuration, Doc: `Open refuses a stream whose duplicate window is shorter: past the window a redelivered event is stored again. Default "2m".`},
	{Name: "ack_timeout", Type: pluginkit.TypeDuration, Doc: `How long a publish waits for the stream's acknowledgement. Default "30s".`},
	{Name: "timeout", Type: pluginkit.TypeDuration, Doc: `Connect timeout, and the timeout of JetStream API requests. Default "5s".`},
	{Name: "name", Type: pluginkit.TypeString, Doc: `Connection name the server shows. Default "walcast-<pipeline>-<sink id>".`},
	{Name: "username", Type: pluginkit.TypeString, Doc: `User of user/password authentication.`},
	{Name: "password", Type: pluginkit.TypeString, Doc: `Password of username.`},
	{Name: "token", Type: pluginkit.TypeString, Doc: `Token authentication.`},
	{Name: "nkey_seed_file", Type: pluginkit.TypeString, Doc: `File holding an NKey seed (SU...): NKey authentication.`},
	{Name: "credentials_file", Type: pluginkit.TypeString, Doc: `A .creds file (user JWT and NKey seed): decentralised JWT authentication.`},
	{Name: "tls", Type: pluginkit.TypeStringMap, Doc: `TLS: enabled ("true" when the map is set), ca_file, cert_file, key_file, server_name, insecure_skip_verify.`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	Servers            []string          `json:"servers"`
	SubjectPrefix      string            `json:"subject_prefix"`
	Subjects           map[string]string `json:"subjects"`
	Stream             string            `json:"stream"`
	CreateStream       *bool             `json:"create_stream"`
	DuplicateWindow    string            `json:"duplicate_window"`
	Replicas           *float64          `json:"replicas"`
	MinDuplicateWindow string            `json:"min_duplicate_window"`
	AckTimeout         string            `json:"ack_timeout"`
	Timeout            string            `json:"timeout"`
	Name               string            `json:"name"`
	Username           string            `json:"username"`
	Password           string            `json:"password"`
	Token              string            `json:"token"`
	NkeySeedFile       string            `json:"nkey_seed_file"`
	CredentialsFile    string            `json:"credentials_file"`
	TLS                map[string]string `json:"tls"`
}

// settings is the validated config.
type settings struct {
	servers       []string
	subjectPrefix string
	subjects      map[string]string // "schema.table" -> subject
	stream        string
	create        bool
	window        time.Duration
	replicas      int
	minWindow     time.Duration
	ackTimeout    time.Duration
	timeout       time.Duration
	name          string
	username      string
	password      string
	token         string
	nkeySeedFile  string
	credsFile     string
	tls           *tls.Config
}

func decodeConfig(raw json.RawMessage, id pluginkit.Identity, tables []string) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st := settings{
		subjectPrefix: cmp.Or(c.SubjectPrefix, defaultSubjectPrefix),
		stream:        cmp.Or(c.Stream, defaultStream),
		create:        c.CreateStream == nil || *c.CreateStream,
		window:        defaultWindow,
		replicas:      1,
		minWindow:     defaultWindow,
		ackTimeout:    defaultAckTimeout,
		timeout:       defaultTimeout,
		name:          cmp.Or(c.Name, "walcast-"+cmp.Or(id.Pipeline, "walcast")+"-"+cmp.Or(id.SinkID, "nats")),
		username:      c.Username,
		password:      c.Password,
		token:         c.Token,
		nkeySeedFile:  c.NkeySeedFile,
		credsFile:     c.CredentialsFile,
	}
	for _, step := range []func() error{
		func() error { return parseServers(&st, c.Servers) },
		func() error { return parseNames(&st) },
		func() error { return parseDurations(&st, c) },
		func() error { return parseAuth(st) },
		func() (err error) { st.tls, err = clienttls.Decode(c.TLS, clienttls.SettingsAndEnabled); return err },
	} {
		if err := step(); err != nil {
			return st, err
		}
	}
	return st, errors.Join(parseSubjects(&st, c.Subjects), checkSubjects(st, tables))
}

func parseServers(st *settings, servers []string) error {
	if len(servers) == 0 {
		return &pluginkit.ConfigError{Field: "servers", Msg: `is required: at least one "nats://host:4222"`}
	}
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.Port() == "" {
			return &pluginkit.ConfigError{Field: "servers", Msg: fmt.Sprintf(`%q is not a server URL such as "nats://host:4222"`, redactURL(s))}
		}
		switch u.Scheme {
		case "nats", "tls":
		default:
			return &pluginkit.ConfigError{Field: "servers", Msg: fmt.Sprintf(`%s: scheme %q; want nats:// or tls://`, redactURL(s), u.Scheme)}
		}
		if u.User != nil {
			return &pluginkit.ConfigError{Field: "servers", Msg: fmt.Sprintf(`%s: put credentials in username and password (or token), not in the URL`, redactURL(s))}
		}
	}
	st.servers = slices.Clone(servers)
	return nil
}

// redactURL cuts a URL to its scheme and host: it may hold a password.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "(an unreadable URL)"
	}
	return u.Scheme + "://" + u.Host
}

// parseNames checks the subject prefix and the stream name.
func parseNames(st *settings) error {
	for _, tok := range strings.Split(st.subjectPrefix, ".") {
		if tok == "" || mapSubjectToken(tok) != tok {
			return &pluginkit.ConfigError{Field: "subject_prefix", Msg: fmt.Sprintf("%q: a subject is tokens separated by '.', each without spaces, '*' or '>'", st.subjectPrefix)}
		}
	}
	if strings.ContainsAny(st.stream, ". *>/\\\t\r\n") || len(st.stream) > 255 {
		return &pluginkit.ConfigError{Field: "stream", Msg: fmt.Sprintf("%q: a stream name has no '.', '*', '>', '/', '\\' or spaces", st.stream)}
	}
	return nil
}

func parseDurations(st *settings, c config) error {
	for _, d := range []struct {
		field, value string
		min          time.Duration
		dst          *time.Duration
	}{
		{"duplicate_window", c.DuplicateWindow, time.Second, &st.window},
		{"min_duplicate_window", c.MinDuplicateWindow, 0, &st.minWindow},
		{"ack_timeout", c.AckTimeout, 100 * time.Millisecond, &st.ackTimeout},
		{"timeout", c.Timeout, 100 * time.Millisecond, &st.timeout},
	} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v < d.min {
			return &pluginkit.ConfigError{Field: d.field, Msg: fmt.Sprintf("%q: want a duration of at least %s", d.value, d.min)}
		}
		*d.dst = v
	}
	if c.DuplicateWindow != "" && st.window < st.minWindow {
		return &pluginkit.ConfigError{Field: "duplicate_window", Msg: fmt.Sprintf("%s is shorter than min_duplicate_window (%s): the stream created would be refused", st.window, st.minWindow)}
	}
	if c.Replicas != nil {
		n := *c.Replicas
		if n != float64(int(n)) || n < 1 || n > 5 {
			return &pluginkit.ConfigError{Field: "replicas", Msg: fmt.Sprintf("must be a whole number from 1 to 5, not %v", n)}
		}
		st.replicas = int(n)
	}
	return nil
}

// parseAuth checks that at most one way to authenticate is chosen and
// that its files can be read.
func parseAuth(st settings) error {
	var chosen []string
	if st.username != "" || st.password != "" {
		if st.username == "" {
			return &pluginkit.ConfigError{Field: "password", Msg: "needs username"}
		}
		chosen = append(chosen, "username")
	}
	if st.token != "" {
		chosen = append(chosen, "token")
	}
	for _, f := range []struct{ field, path string }{{"nkey_seed_file", st.nkeySeedFile}, {"credentials_file", st.credsFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return &pluginkit.ConfigError{Field: f.field, Msg: err.Error()}
		}
		chosen = append(chosen, f.field)
	}
	if len(chosen) > 1 {
		return &pluginkit.ConfigError{Field: chosen[1], Msg: fmt.Sprintf("choose one way to authenticate: %s", strings.Join(chosen, ", "))}
	}
	return nil
}

// subject is the subject e is published to: "<subject_prefix>.<route>"
// when the sink's route expression chose one, else its table's. A route
// that does not make a subject to publish to (an empty token, a wildcard,
// white space) is an error naming it: the event can never be published
// as routed, so it parks with the reason.
func (st settings) subject(e *pluginkit.Event) (string, error) {
	if e.Route == "" {
		return st.subjectFor(e.Schema, e.Table), nil
	}
	if !validSubject(e.Route) {
		return "", fmt.Errorf("event %s: route %q is not a subject suffix (tokens separated by '.', none empty, without '*', '>' or white space): fix the sink's route expression", e.ID, e.Route)
	}
	return st.subjectPrefix + "." + e.Route, nil
}

// subjectFor is the subject of schema.table's events.
func (st settings) subjectFor(schema, table string) string {
	if schema == "" && table == "" {
		// A message event (pg_logical_emit_message) names no table; an
		// empty token would make the subject invalid.
		return st.subjectPrefix + ".message"
	}
	if s, ok := st.subjects[schema+"."+table]; ok {
		return s
	}
	return st.subjectPrefix + "." + mapSubjectToken(schema) + "." + mapSubjectToken(table)
}

// mapSubjectToken replaces what a subject token cannot hold ('.', which
// separates tokens, the wildcards '*' and '>', white space and control
// characters) with "_".
func mapSubjectToken(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, s)
}

// validSubject reports whether s is a subject a message can be published
// to: non-empty tokens, no wildcards, no white space.
func validSubject(s string) bool {
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || mapSubjectToken(tok) != tok {
			return false
		}
	}
	return true
}

// parseSubjects checks the per-table subjects.
func parseSubjects(st *settings, m map[string]string) error {
	if len(m) == 0 {
		return nil
	}
	st.subjects = make(map[string]string, len(m))
	var errs []error
	for _, table := range slices.Sorted(maps.Keys(m)) {
		subj := m[table]
		switch {
		case !strings.Contains(table, "."):
			errs = append(errs, &pluginkit.ConfigError{Field: "subjects", Msg: fmt.Sprintf(`key %q: want "schema.table"`, table)})
		case !validSubject(subj):
			errs = append(errs, &pluginkit.ConfigError{Field: "subjects", Table: table,
				Msg: fmt.Sprintf("%q for %s is not a subject to publish to (tokens separated by '.', no '*', '>' or spaces)", subj, table)})
		default:
			st.subjects[table] = subj
		}
	}
	return errors.Join(errs...)
}

// checkSubjects reports every table whose subject would also be another
// table's: consumers could not tell their rows apart by subject.
func checkSubjects(st settings, tables []string) error {
	var errs []error
	bySubject := map[string]string{}
	for _, table := range tables {
		schema, name, ok := strings.Cut(table, ".")
		if !ok {
			continue
		}
		subj := st.subjectFor(schema, name)
		field := ""
		if _, ok := st.subjects[table]; ok {
			field = "subjects"
		}
		if other := bySubject[subj]; other != "" {
			errs = append(errs, &pluginkit.ConfigError{Field: field, Table: table,
				Msg: fmt.Sprintf("its subject %q is also the subject of %s: name a different one in subjects = { %q = \"...\" }", subj, other, table)})
			continue
		}
		bySubject[subj] = table
	}
	return errors.Join(errs...)
}
