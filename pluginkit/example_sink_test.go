package pluginkit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// lineSink is a small but complete BatchSink: it keeps the payloads it is
// given, one line each, and refuses payloads over a size limit one by one.
type lineSink struct {
	cfg struct {
		Prefix   string `json:"prefix"`
		MaxBytes int    `json:"max_bytes"`
	}
	name  pluginkit.Identity
	lines []string
}

var _ pluginkit.BatchSink = (*lineSink)(nil)

func (s *lineSink) Info() pluginkit.Info {
	return pluginkit.Info{Name: "lines", Version: "v1.0.0", Config: []pluginkit.ConfigField{
		{Name: "prefix", Type: pluginkit.TypeString, Required: true, Doc: "Written before every line."},
		{Name: "max_bytes", Type: pluginkit.TypeNumber, Doc: "The largest payload taken; larger ones are refused."},
	}}
}

func (s *lineSink) Configure(_ context.Context, setup pluginkit.Setup) error {
	if err := pluginkit.DecodeConfig(setup.Config, &s.cfg); err != nil {
		return err
	}
	if s.cfg.Prefix == "" {
		return &pluginkit.ConfigError{Field: "prefix", Msg: "is required"}
	}
	s.name = setup.Sink
	return nil
}

func (s *lineSink) Open(context.Context) (pluginkit.OpenResult, error) {
	return pluginkit.OpenResult{}, nil
}

func (s *lineSink) Deliver(_ context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	failed := map[int]error{}
	for i, e := range b.Events {
		if s.cfg.MaxBytes > 0 && len(e.Payload) > s.cfg.MaxBytes {
			failed[i] = pluginkit.Permanent(fmt.Errorf("event %s: %d bytes, the limit is %d", e.ID, len(e.Payload), s.cfg.MaxBytes))
			continue
		}
		s.lines = append(s.lines, fmt.Sprintf("%s %s %s", s.cfg.Prefix, e.ID, e.Payload))
	}
	if len(failed) > 0 {
		return pluginkit.DeliverResult{}, &pluginkit.BatchError{Failed: failed}
	}
	return pluginkit.DeliverResult{}, nil
}

func (s *lineSink) Close(context.Context) error { return nil }

// A sink is a BatchSink. Its main serves it (see ServeBatch); here the
// calls the host makes are made directly, as a test would.
func Example() {
	s := &lineSink{}
	ctx := context.Background()
	err := s.Configure(ctx, pluginkit.Setup{
		Config: json.RawMessage(`{"prefix":"orders","max_bytes":20}`),
		Sink:   pluginkit.Identity{Pipeline: "shop", SinkID: "audit"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := s.Open(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{
		{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":1}`)},
		{ID: pluginkit.MustParseEventID("0/16B3748:1"), Payload: []byte(`{"id":2,"note":"far too long"}`)},
	}})
	fmt.Println(strings.Join(s.lines, "\n"))
	fmt.Println(err)
	// Output:
	// orders 0/16B3748:0 {"id":1}
	// 1 of the batch's events failed: event 1: event 0/16B3748:1: 30 bytes, the limit is 20
}

// A plugin's main is one call. ServeBatch speaks sink protocol version 2,
// which a BatchSink needs.
func ExampleServeBatch() {
	pluginkit.ServeBatch(&lineSink{})
}

// A Sink, the first version of the interface, is served with Serve, which
// speaks every protocol version, so it also runs under older hosts.
func ExampleServe() {
	var legacy pluginkit.Sink // a sink written against Sink
	pluginkit.Serve(legacy)
}

// DecodeConfig reports an attribute of the wrong type, or one the sink
// does not have, as a *ConfigError naming it: the host points at that
// attribute's line in the pipeline file.
func ExampleDecodeConfig() {
	var cfg struct {
		URL     string `json:"url"`
		Retries int    `json:"retries"`
	}
	for _, raw := range []string{`{"url":"https://example.com","retries":3}`, `{"url":"x","retries":"3"}`, `{"url":"x","proxy":"y"}`} {
		err := pluginkit.DecodeConfig(json.RawMessage(raw), &cfg)
		var ce *pluginkit.ConfigError
		if errors.As(err, &ce) {
			fmt.Printf("%s: %s\n", ce.Field, ce.Msg)
			continue
		}
		fmt.Println(cfg.URL, cfg.Retries)
	}
	// Output:
	// https://example.com 3
	// retries: must be a int
	// proxy: is not an attribute of this sink
}

// A BatchError names the events that failed; every other event of the
// batch counts as written. Each event's error is classified like a
// Deliver error.
func ExampleBatchError() {
	err := &pluginkit.BatchError{Failed: map[int]error{
		4: pluginkit.Permanent(errors.New("schema rejected")),
		1: pluginkit.Throttled(2*time.Second, errors.New("partition quota")),
	}}
	fmt.Println(err)
	for _, i := range []int{1, 4} {
		kind, after := pluginkit.KindOf(err.Failed[i])
		fmt.Println(i, kind, after)
	}
	// Output:
	// 2 of the batch's events failed: event 1: throttled for 2s: partition quota; event 4: schema rejected
	// 1 throttled 2s
	// 4 permanent 0s
}

// Throttled asks the host to pause the sink, without counting an attempt,
// when the destination says so (HTTP 429 with Retry-After: 30, say).
func ExampleThrottled() {
	err := pluginkit.Throttled(30*time.Second, errors.New("HTTP 429 Too Many Requests"))
	kind, after := pluginkit.KindOf(err)
	fmt.Println(kind, after, err)
	// Output:
	// throttled 30s throttled for 30s: HTTP 429 Too Many Requests
}

// Permanent says retrying the same events cannot succeed: the host parks
// them at once (a batch is split first, so that only the event that fails
// on its own is parked).
func ExamplePermanent() {
	err := fmt.Errorf("POST batch: %w", pluginkit.Permanent(errors.New("HTTP 413: body too large")))
	kind, _ := pluginkit.KindOf(err)
	fmt.Println(kind, err)
	// Output:
	// permanent POST batch: HTTP 413: body too large
}

// Fatal says the sink cannot deliver anything any more: the host stops
// the pipeline rather than park every later event.
func ExampleFatal() {
	err := pluginkit.Fatal(errors.New("fenced: another producer owns the transactional id"))
	kind, _ := pluginkit.KindOf(err)
	fmt.Println(kind)
	// Output:
	// fatal
}

// Retryable marks an error the host retries with backoff; any error not
// classified by this package is retryable too.
func ExampleRetryable() {
	for _, err := range []error{pluginkit.Retryable(errors.New("connection reset")), errors.New("timeout")} {
		kind, _ := pluginkit.KindOf(err)
		fmt.Println(kind)
	}
	// Output:
	// retryable
	// retryable
}

// ConfigErrors returns every attribute Configure rejected, when it reports
// several at once with errors.Join.
func ExampleConfigErrors() {
	err := errors.Join(
		&pluginkit.ConfigError{Field: "url", Msg: "scheme must be http or https"},
		&pluginkit.ConfigError{Field: "topics", Table: "public.orders", Msg: "names no topic"},
	)
	for _, ce := range pluginkit.ConfigErrors(err) {
		fmt.Printf("%s (%q): %s\n", ce.Field, ce.Table, ce.Msg)
	}
	// Output:
	// url (""): scheme must be http or https
	// topics ("public.orders"): names no topic
}

// NewLogger's lines reach the host's log, tagged with the sink's id. Call
// it before Serve, in main or the sink's constructor.
func ExampleNewLogger() {
	log := pluginkit.NewLogger()
	log.Info("connected", "brokers", 3)
}

// A sink without a version of its own reports the module version it was
// built from.
func ExampleBuildVersion() {
	_ = pluginkit.Info{Name: "lines", Version: pluginkit.BuildVersion()}
}

// A Sink reads in the context what a BatchSink finds in Setup: its
// identity and its tables, in Configure.
func ExampleIdentityFrom() {
	configure := func(ctx context.Context, raw json.RawMessage) error {
		id := pluginkit.IdentityFrom(ctx) // zero when the caller did not name the sink
		txnID := "walcast-" + id.SinkID
		_ = txnID
		for _, table := range pluginkit.TablesFrom(ctx) {
			_ = table // check that the sink can route it
		}
		return nil
	}
	_ = configure
}

// A Sink reads in the context what a BatchSink finds in Batch: whether
// the batch is a replay, and whether events were dropped before it.
func ExampleIsReplay() {
	deliver := func(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error) {
		if pluginkit.GapBefore(ctx) {
			_ = "tell clients events were dropped here"
		}
		if pluginkit.IsReplay(ctx) {
			_ = "write the events even at or below the sink's own checkpoint"
		}
		return pluginkit.DeliverResult{}, nil
	}
	_ = deliver
}
