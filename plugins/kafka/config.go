package main

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/clienttls"
)

const (
	defaultTopicPrefix     = "walcast"
	defaultCheckpointTopic = "walcast.checkpoints"
	defaultClientID        = "walcast"
	// defaultTxnTimeout is above the host's default deliver_timeout (2m),
	// and Deliver aborts on its own well before it (see txnBudget), so the
	// broker never times a live transaction out: a fencing error then
	// really means another producer took the transactional id over.
	defaultTxnTimeout = 3 * time.Minute
	// defaultMaxMessageBytes is franz-go's and Kafka's default limit on a
	// record batch, compressed.
	defaultMaxMessageBytes = 1_000_012
)

// configFields declares the config block. Nested settings are string maps
// (`tls = { ca_file = "..." }`) because that is what the host's config
// decoding offers; their keys are checked here.
var configFields = []pluginkit.ConfigField{
	{Name: "brokers", Type: pluginkit.TypeStringList, Required: true, Doc: `Seed brokers, "host:port".`},
	{Name: "topic_prefix", Type: pluginkit.TypeString, Doc: `Events go to "<topic_prefix>.<schema>.<table>", each character Kafka does not allow in a topic name replaced by "_". Default "walcast".`},
	{Name: "topics", Type: pluginkit.TypeStringMap, Doc: `Per-table topic names, "schema.table" = "topic", instead of the derived name.`},
	{Name: "tombstones", Type: pluginkit.TypeBool, Doc: "true (default): a delete is followed by a tombstone (same key, null value), and an update that changes the key is preceded by a delete and a tombstone for the old key, so compacted topics forget deleted rows. false: one record per event."},
	{Name: "eos", Type: pluginkit.TypeBool, Doc: "true (default): one Kafka transaction per batch, exactly once into the topic for read_committed readers. false: idempotent producer, at least once."},
	{Name: "transactional_id", Type: pluginkit.TypeString, Doc: `Kafka transactional id (eos only); also the key of this sink's checkpoint record. Must be unique per sink and stable across restarts: it fences zombie producers. Default "walcast-<sink id>".`},
	{Name: "checkpoint_topic", Type: pluginkit.TypeString, Doc: `Compacted topic holding the last event id committed per transactional id (eos only). Default "walcast.checkpoints".`},
	{Name: "transaction_timeout", Type: pluginkit.TypeDuration, Doc: `How long the broker lets a transaction stay open before it aborts it; also bounds one Deliver. Default "3m".`},
	{Name: "max_message_bytes", Type: pluginkit.TypeNumber, Doc: "Largest record batch the producer sends, in bytes; a larger event fails permanently. Keep it at or below the topics' max.message.bytes. Default 1000012."},
	{Name: "client_id", Type: pluginkit.TypeString, Doc: `Client id sent to the brokers. Default "walcast".`},
	{Name: "compression", Type: pluginkit.TypeString, Doc: `none (default), gzip, snappy, lz4 or zstd.`},
	{Name: "create_topics", Type: pluginkit.TypeStringMap, Doc: `Topic creation: enabled ("true" by default: missing topics are created), partitions and replication_factor (default -1: the broker's defaults).`},
	{Name: "tls", Type: pluginkit.TypeStringMap, Doc: `TLS: enabled ("true" when the map is set), ca_file, cert_file, key_file, server_name, insecure_skip_verify.`},
	{Name: "sasl", Type: pluginkit.TypeStringMap, Doc: `SASL: mechanism (plain, scram-sha-256 or scram-sha-512), username, password.`},
	{Name: "cloudevents_mode", Type: pluginkit.TypeString, Doc: `With format = "cloudevents": "structured" (default, the event as the record value, content-type application/cloudevents+json) or "binary" (attributes in ce_* headers, the envelope as the value).`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	Brokers            []string          `json:"brokers"`
	TopicPrefix        string            `json:"topic_prefix"`
	Topics             map[string]string `json:"topics"`
	Tombstones         *bool             `json:"tombstones"`
	EOS                *bool             `json:"eos"`
	TransactionalID    string            `json:"transactional_id"`
	CheckpointTopic    string            `json:"checkpoint_topic"`
	TransactionTimeout string            `json:"transaction_timeout"`
	MaxMessageBytes    *int64            `json:"max_message_bytes"`
	ClientID           string            `json:"client_id"`
	Compression        string            `json:"compression"`
	CreateTopics       map[string]string `json:"create_topics"`
	TLS                map[string]string `json:"tls"`
	SASL               map[string]string `json:"sasl"`
	CEMode             string            `json:"cloudevents_mode"`
}

// settings is the validated config.
type settings struct {
	brokers         []string
	topicPrefix     string
	topics          map[string]string // "schema.table" -> topic
	tombstones      bool
	eos             bool
	txnID           string
	checkpointTopic string
	txnTimeout      time.Duration
	clientID        string
	maxMessageBytes int32
	compression     kgo.CompressionCodec
	create          bool
	partitions      int32
	replication     int16
	tls             *tls.Config
	sasl            kgo.Opt // nil: no SASL
	saslMechanism   string
	saslUser        string
	ceBinary        bool // CloudEvents in binary mode (cloudevents.go)
}

// legalTopic is Kafka's rule for topic names.
var legalTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func decodeConfig(raw json.RawMessage, id pluginkit.Identity, tables []string) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st, err := parseConfig(c, id)
	if err != nil {
		return st, err
	}
	// Every topic problem at once, so that validate lists them all.
	return st, errors.Join(parseTopics(&st, c.Topics), checkTopics(st, tables))
}

func parseConfig(c config, id pluginkit.Identity) (settings, error) {
	st := settings{
		topicPrefix:     cmp.Or(c.TopicPrefix, defaultTopicPrefix),
		tombstones:      c.Tombstones == nil || *c.Tombstones,
		eos:             c.EOS == nil || *c.EOS,
		checkpointTopic: cmp.Or(c.CheckpointTopic, defaultCheckpointTopic),
		clientID:        cmp.Or(c.ClientID, defaultClientID),
		txnTimeout:      defaultTxnTimeout,
		maxMessageBytes: defaultMaxMessageBytes,
		create:          true,
		partitions:      -1,
		replication:     -1,
	}
	for _, step := range []func() error{
		func() error { return parseBrokers(&st, c.Brokers) },
		func() error { return parseNames(&st, c, id) },
		func() error { return parseLimits(&st, c) },
		func() error { return parseCompression(&st, c.Compression) },
		func() error { return parseCreateTopics(&st, c.CreateTopics) },
		func() (err error) { st.tls, err = clienttls.Decode(c.TLS, clienttls.SettingsAndEnabled); return err },
		func() error { return parseSASL(&st, c.SASL) },
		func() error { return parseCEMode(&st, c.CEMode) },
	} {
		if err := step(); err != nil {
			return st, err
		}
	}
	return st, nil
}

func parseBrokers(st *settings, brokers []string) error {
	if len(brokers) == 0 {
		return &pluginkit.ConfigError{Field: "brokers", Msg: `is required: at least one "host:port"`}
	}
	for _, b := range brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			return &pluginkit.ConfigError{Field: "brokers", Msg: fmt.Sprintf(`%q is not "host:port"`, b)}
		}
	}
	st.brokers = slices.Clone(brokers)
	return nil
}

// parseNames checks the topic names and sets the transactional id.
func parseNames(st *settings, c config, id pluginkit.Identity) error {
	// The prefix plus ".<schema>.<table>" must still be a legal name.
	if !legalTopic.MatchString(st.topicPrefix) || len(st.topicPrefix) > 200 {
		return &pluginkit.ConfigError{Field: "topic_prefix", Msg: fmt.Sprintf("%q: a Kafka topic name uses only letters, digits, '.', '_' and '-' (at most 200 characters for the prefix)", st.topicPrefix)}
	}
	if !legalTopic.MatchString(st.checkpointTopic) {
		return &pluginkit.ConfigError{Field: "checkpoint_topic", Msg: fmt.Sprintf("%q is not a legal Kafka topic name", st.checkpointTopic)}
	}
	// The default follows the sink's id, which the host passes and which
	// stays stable across restarts; a host that does not name the sink
	// (tests calling Configure directly) gets one derived from the prefix.
	def := "walcast-" + st.topicPrefix
	if id.SinkID != "" {
		def = "walcast-" + id.SinkID
	}
	st.txnID = cmp.Or(c.TransactionalID, def)
	if c.TransactionalID != "" && !st.eos {
		return &pluginkit.ConfigError{Field: "transactional_id", Msg: "only applies with eos = true"}
	}
	return nil
}

func parseLimits(st *settings, c config) error {
	if c.TransactionTimeout != "" {
		d, err := time.ParseDuration(c.TransactionTimeout)
		if err != nil || d < time.Second {
			return &pluginkit.ConfigError{Field: "transaction_timeout", Msg: fmt.Sprintf("must be a duration of at least 1s, not %q", c.TransactionTimeout)}
		}
		st.txnTimeout = d
	}
	if c.MaxMessageBytes != nil {
		if n := *c.MaxMessageBytes; n < 1024 || n > 1<<30 {
			return &pluginkit.ConfigError{Field: "max_message_bytes", Msg: fmt.Sprintf("must be between 1024 and 1073741824, not %d", n)}
		}
		st.maxMessageBytes = int32(*c.MaxMessageBytes)
	}
	return nil
}

func parseCompression(st *settings, name string) error {
	switch strings.ToLower(cmp.Or(name, "none")) {
	case "none":
		st.compression = kgo.NoCompression()
	case "gzip":
		st.compression = kgo.GzipCompression()
	case "snappy":
		st.compression = kgo.SnappyCompression()
	case "lz4":
		st.compression = kgo.Lz4Compression()
	case "zstd":
		st.compression = kgo.ZstdCompression()
	default:
		return &pluginkit.ConfigError{Field: "compression", Msg: fmt.Sprintf("%q: want none, gzip, snappy, lz4 or zstd", name)}
	}
	return nil
}

func parseCreateTopics(st *settings, m map[string]string) error {
	bad := func(msg string) error { return &pluginkit.ConfigError{Field: "create_topics", Msg: msg} }
	for k, v := range m {
		switch k {
		case "enabled":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad(fmt.Sprintf("enabled must be true or false, not %q", v))
			}
			st.create = b
		case "partitions":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n == 0 || n < -1 {
				return bad(fmt.Sprintf("partitions must be a positive number or -1 (broker default), not %q", v))
			}
			st.partitions = int32(n)
		case "replication_factor":
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil || n == 0 || n < -1 {
				return bad(fmt.Sprintf("replication_factor must be a positive number or -1 (broker default), not %q", v))
			}
			st.replication = int16(n)
		default:
			return bad(fmt.Sprintf("unknown key %q; want enabled, partitions or replication_factor", k))
		}
	}
	return nil
}

func parseSASL(st *settings, m map[string]string) error {
	if m == nil {
		return nil
	}
	bad := func(msg string) error { return &pluginkit.ConfigError{Field: "sasl", Msg: msg} }
	for k := range m {
		if k != "mechanism" && k != "username" && k != "password" {
			return bad(fmt.Sprintf("unknown key %q; want mechanism, username and password", k))
		}
	}
	user, pass := m["username"], m["password"]
	if user == "" {
		return bad("username is required")
	}
	mech := strings.ToLower(m["mechanism"])
	switch mech {
	case "plain":
		st.sasl = kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())
	case "scram-sha-256":
		st.sasl = kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())
	case "scram-sha-512":
		st.sasl = kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())
	default:
		return bad(fmt.Sprintf("mechanism %q: want plain, scram-sha-256 or scram-sha-512", m["mechanism"]))
	}
	st.saslMechanism, st.saslUser = mech, user
	return nil
}

// clientOpts are the options every client of the sink shares: where the
// brokers are and how to talk to them.
func (st settings) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(st.brokers...),
		kgo.ClientID(st.clientID),
	}
	if st.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(st.tls.Clone()))
	}
	if st.sasl != nil {
		opts = append(opts, st.sasl)
	}
	return opts
}
