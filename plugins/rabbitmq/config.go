package main

import (
	"cmp"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/clienttls"
)

const (
	defaultExchange     = "walcast"
	defaultExchangeType = "topic"
	defaultRoutingKey   = "{schema}.{table}"
	// defaultMaxMessageBytes is RabbitMQ's default max_message_size
	// (128 MiB): a larger message makes the broker close the channel.
	defaultMaxMessageBytes = 128 << 20
	// maxRoutingKey is AMQP 0-9-1's limit on a routing key (a short
	// string), in bytes.
	maxRoutingKey = 255
)

// configFields declares the config block for `walcast validate`.
var configFields = []pluginkit.ConfigField{
	{Name: "url", Type: pluginkit.TypeString, Required: true, Doc: `The broker, "amqp://user@host:5672/vhost", or "amqps://..." for TLS.`},
	{Name: "username", Type: pluginkit.TypeString, Doc: "The user, instead of the one in url."},
	{Name: "password", Type: pluginkit.TypeString, Doc: `The password, when it should not be written in url (password = env("RABBITMQ_PASSWORD")).`},
	{Name: "exchange", Type: pluginkit.TypeString, Doc: `The exchange messages are published to. Default "walcast"; "" is the default exchange (routing key = queue name).`},
	{Name: "exchange_type", Type: pluginkit.TypeString, Doc: `The type the exchange is declared with: topic (default), direct, fanout or headers.`},
	{Name: "declare_exchange", Type: pluginkit.TypeBool, Doc: "true (default): declare the exchange (durable) when the sink connects; false: it must exist."},
	{Name: "routing_key", Type: pluginkit.TypeString, Doc: `The routing key of each message: {schema}, {table} and {op} are replaced by the event's. Default "{schema}.{table}". With a route, the route is the routing key.`},
	{Name: "mandatory", Type: pluginkit.TypeBool, Doc: "true (default): a message no queue is bound for is returned by the broker and retried, never dropped; false: the broker drops it."},
	{Name: "max_message_bytes", Type: pluginkit.TypeNumber, Doc: "Events larger than this are refused (parked) without being sent; keep it at or below the broker's max_message_size. Default 134217728."},
	{Name: "tls", Type: pluginkit.TypeStringMap, Doc: "TLS for amqps:// URLs: ca_file, cert_file, key_file (client certificate), server_name, insecure_skip_verify."},
}

type config struct {
	URL             string            `json:"url"`
	Username        string            `json:"username"`
	Password        string            `json:"password"`
	Exchange        *string           `json:"exchange"`
	ExchangeType    string            `json:"exchange_type"`
	DeclareExchange *bool             `json:"declare_exchange"`
	RoutingKey      string            `json:"routing_key"`
	Mandatory       *bool             `json:"mandatory"`
	MaxMessageBytes *int64            `json:"max_message_bytes"`
	TLS             map[string]string `json:"tls"`
}

// settings is the validated config.
type settings struct {
	url          string // with the credentials
	broker       string // scheme://host:port/vhost, for messages: never a password
	user         string
	tls          *tls.Config
	exchange     string
	exchangeType string
	declare      bool
	routingKey   string
	mandatory    bool
	maxBytes     int64
	name         string // the connection name the broker shows
}

func decodeConfig(raw json.RawMessage, id pluginkit.Identity) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st := settings{
		exchange:     defaultExchange,
		exchangeType: cmp.Or(c.ExchangeType, defaultExchangeType),
		declare:      c.DeclareExchange == nil || *c.DeclareExchange,
		routingKey:   cmp.Or(c.RoutingKey, defaultRoutingKey),
		mandatory:    c.Mandatory == nil || *c.Mandatory,
		maxBytes:     defaultMaxMessageBytes,
		name:         "walcast " + cmp.Or(id.Pipeline, "walcast") + "/" + cmp.Or(id.SinkID, "rabbitmq"),
	}
	if c.Exchange != nil {
		st.exchange = *c.Exchange
	}
	var errs []error
	errs = append(errs, parseURL(&st, c))
	switch st.exchangeType {
	case "topic", "direct", "fanout", "headers":
	default:
		errs = append(errs, &pluginkit.ConfigError{Field: "exchange_type", Msg: fmt.Sprintf("%q: want topic, direct, fanout or headers", c.ExchangeType)})
	}
	if st.exchange == "" && c.DeclareExchange != nil && *c.DeclareExchange {
		errs = append(errs, &pluginkit.ConfigError{Field: "declare_exchange", Msg: `the default exchange "" cannot be declared`})
	}
	st.declare = st.declare && st.exchange != ""
	if err := checkPattern(st.routingKey); err != nil {
		errs = append(errs, &pluginkit.ConfigError{Field: "routing_key", Msg: err.Error()})
	}
	if c.MaxMessageBytes != nil {
		if n := *c.MaxMessageBytes; n < 1 || n > 512<<20 {
			errs = append(errs, &pluginkit.ConfigError{Field: "max_message_bytes", Msg: fmt.Sprintf("must be between 1 and 536870912 (RabbitMQ's largest max_message_size), not %d", n)})
		} else {
			st.maxBytes = n
		}
	}
	errs = append(errs, parseTLS(&st, c.TLS))
	return st, errors.Join(errs...)
}

func parseURL(st *settings, c config) error {
	bad := func(msg string) error { return &pluginkit.ConfigError{Field: "url", Msg: msg} }
	if c.URL == "" {
		return bad(`is required: the broker, e.g. "amqp://walcast@rabbit:5672/"`)
	}
	u, err := amqp.ParseURI(c.URL)
	if err != nil {
		// ParseURI's errors repeat nothing of the URL.
		return bad(fmt.Sprintf("not an AMQP URL (amqp://user:password@host:port/vhost): %v", err))
	}
	if c.Username != "" {
		u.Username = c.Username
	}
	if c.Password != "" {
		u.Password = c.Password
	}
	st.url, st.user = u.String(), u.Username
	st.broker = fmt.Sprintf("%s://%s:%d/%s", u.Scheme, u.Host, u.Port, url.PathEscape(u.Vhost))
	if u.Scheme == "amqps" {
		st.tls = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Host}
	}
	return nil
}

// checkPattern accepts a routing key pattern whose placeholders are known.
func checkPattern(p string) error {
	rest := p
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return fmt.Errorf("%q: an unclosed {", p)
		}
		switch rest[i : i+j+1] {
		case "{schema}", "{table}", "{op}":
		default:
			return fmt.Errorf("%q: unknown placeholder %s; want {schema}, {table} or {op}", p, rest[i:i+j+1])
		}
		rest = rest[i+j+1:]
	}
}

// routingKeyOf is e's routing key: the route the sink's route expression
// chose, else the pattern filled in for e.
func (st settings) routingKeyOf(e *pluginkit.Event) string {
	if e.Route != "" {
		return e.Route
	}
	r := strings.NewReplacer("{schema}", e.Schema, "{table}", e.Table, "{op}", string(e.Op))
	return r.Replace(st.routingKey)
}

// parseTLS refines the TLS an amqps:// URL turned on with the tls map; the
// URL's host stays the name verified unless server_name says otherwise.
func parseTLS(st *settings, m map[string]string) error {
	if m == nil {
		return nil
	}
	if st.tls == nil {
		return &pluginkit.ConfigError{Field: "tls", Msg: `applies to amqps:// URLs only: make url start with amqps://`}
	}
	cfg, err := clienttls.Decode(m, clienttls.Settings)
	if err != nil {
		return err
	}
	if cfg.ServerName == "" {
		cfg.ServerName = st.tls.ServerName // the URL's host
	}
	st.tls = cfg
	return nil
}
