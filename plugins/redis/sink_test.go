package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// conformanceStream receives every table of the suite, so that Received
// reads one stream in the order entries were appended.
const conformanceStream = "conformance"

func TestConformance(t *testing.T) {
	srv := startRedis(t, "--proto-max-bulk-len", "1mb")
	c := srv.client(t, "")
	cfg := fmt.Sprintf(`{"address":%q,"streams":{"public.orders":%q,"public.customers":%q,"billing.invoices":%q},"timeout":"2s"}`,
		srv.Addr, conformanceStream, conformanceStream, conformanceStream)
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return newSink(discardLogger()) },
		Config:   json.RawMessage(cfg),
		Received: func() [][]byte {
			var out [][]byte
			for _, e := range entries(t, c, conformanceStream) {
				out = append(out, []byte(e["event"].(string)))
			}
			return out
		},
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "url instead of address", Config: json.RawMessage(`{"address":"redis://u:p@h:6379"}`), Field: "address"},
			{Name: "negative maxlen", Config: json.RawMessage(`{"address":"h:6379","maxlen":-1}`), Field: "maxlen"},
		},
		Hang: srv.Pause,
		Faults: []sinktest.Fault{{
			Name:   "server down",
			Inject: func() func() { srv.Stop(); return srv.Start },
			Want:   pluginkit.KindRetryable,
		}},
		EventFaults: []sinktest.EventFault{{
			Name: "larger than proto-max-bulk-len",
			Spoil: func(ev pluginkit.Event) pluginkit.Event {
				ev.Payload = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
				return ev
			},
			Want: pluginkit.KindPermanent,
		}},
	})
}

func TestConfigure(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, cfg, field string // field empty: valid
	}{
		{name: "minimal", cfg: `{"address":"127.0.0.1:6379"}`},
		{name: "full", cfg: `{"address":"r:6379","username":"walcast","password":"p","db":2,"stream_prefix":"cdc","streams":{"public.a":"a"},
			"maxlen":1000,"maxlen_exact":true,"checkpoint_key":"cp","timeout":"3s","max_entry_bytes":1048576,"tls":{"server_name":"r","insecure_skip_verify":"true"}}`},
		{name: "no address", cfg: `{}`, field: "address"},
		{name: "address without port", cfg: `{"address":"redis"}`, field: "address"},
		{name: "url", cfg: `{"address":"rediss://:secret@r:6379/0"}`, field: "address"},
		{name: "fractional db", cfg: `{"address":"r:6379","db":1.5}`, field: "db"},
		{name: "exact without maxlen", cfg: `{"address":"r:6379","maxlen_exact":true}`, field: "maxlen_exact"},
		{name: "tiny max entry", cfg: `{"address":"r:6379","max_entry_bytes":10}`, field: "max_entry_bytes"},
		{name: "short timeout", cfg: `{"address":"r:6379","timeout":"1ms"}`, field: "timeout"},
		{name: "bad streams key", cfg: `{"address":"r:6379","streams":{"nodot":"x"}}`, field: "streams"},
		{name: "stream is the checkpoint", cfg: `{"address":"r:6379","checkpoint_key":"x","streams":{"public.a":"x"}}`, field: "streams"},
		{name: "missing ca file", cfg: fmt.Sprintf(`{"address":"r:6379","tls":{"ca_file":%q}}`, filepath.Join(dir, "none.pem")), field: "tls"},
		{name: "cert without key", cfg: `{"address":"r:6379","tls":{"cert_file":"c.pem"}}`, field: "tls"},
		{name: "unknown tls key", cfg: `{"address":"r:6379","tls":{"verify":"no"}}`, field: "tls"},
		{name: "unknown attribute", cfg: `{"address":"r:6379","topic":"x"}`, field: "topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(tt.cfg)})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				return
			}
			var ce *pluginkit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("Configure = %v, want a ConfigError for %q", err, tt.field)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// Two tables that would share a stream are reported at the table.
func TestStreamCollision(t *testing.T) {
	err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{
		Config: json.RawMessage(`{"address":"r:6379","streams":{"public.b":"walcast:public.a"}}`),
		Tables: []string{"public.a", "public.b"},
	})
	var ce *pluginkit.ConfigError
	if !errors.As(err, &ce) || ce.Table != "public.b" || !strings.Contains(ce.Msg, "public.a") {
		t.Fatalf("Configure = %v, want a ConfigError at table public.b naming public.a", err)
	}
}

func TestDefaults(t *testing.T) {
	st, err := decodeConfig(json.RawMessage(`{"address":"r:6379"}`), pluginkit.Identity{Pipeline: "shop", SinkID: "cache"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.checkpointKey != "walcast:checkpoint:shop:cache" || st.streamFor("public", "orders") != "walcast:public.orders" || st.streamFor("", "") != "walcast:message" || st.maxLen != 0 {
		t.Errorf("defaults = %+v", st)
	}
	if info := newSink(discardLogger()).Info(); !info.Ordered || info.BatchSize != defaultBatchSize {
		t.Errorf("Info() = %+v; checkpoint filtering needs ordered delivery", info)
	}
}

// openSink configures and opens a sink against addr; extra is merged into
// the config.
func openSink(t *testing.T, addr string, extra map[string]any) (*Sink, pluginkit.OpenResult) {
	t.Helper()
	s := newSink(discardLogger())
	res, err := configureOpen(t, s, addr, extra)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s, res
}

func configureOpen(t *testing.T, s *Sink, addr string, extra map[string]any) (pluginkit.OpenResult, error) {
	t.Helper()
	cfg := map[string]any{"address": addr, "timeout": "2s"}
	for k, v := range extra {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.Configure(ctx, pluginkit.Setup{Config: raw, Sink: pluginkit.Identity{Pipeline: "p", SinkID: "r"}}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s.Open(ctx)
}

// events makes n events of public.items with ids 0/<lsn>:i.
func events(lsn uint64, n int) []pluginkit.Event {
	out := make([]pluginkit.Event, n)
	for i := range out {
		id := pluginkit.EventID{CommitLSN: lsn, Index: uint64(i)}
		key := fmt.Sprintf(`{"id":%d}`, i%7)
		out[i] = pluginkit.Event{
			ID: id, Schema: "public", Table: "items", Op: pluginkit.OpUpdate, Key: []byte(key),
			Payload: fmt.Appendf(nil, `{"id":%q,"key":%s}`, id, key),
		}
	}
	return out
}

func deliver(t *testing.T, s *Sink, b pluginkit.Batch) pluginkit.DeliverResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Deliver(ctx, b)
	if err != nil {
		t.Fatalf("Deliver %s..%s: %v", b.Events[0].ID, b.Events[len(b.Events)-1].ID, err)
	}
	return res
}

// assertOnce checks that the stream holds exactly want's ids, once each,
// in order, with the event's payload.
func assertOnce(t *testing.T, got []map[string]any, want ...[]pluginkit.Event) {
	t.Helper()
	var all []pluginkit.Event
	for _, w := range want {
		all = append(all, w...)
	}
	if len(got) != len(all) {
		t.Fatalf("the stream holds %d entries %v, want %d", len(got), ids(got), len(all))
	}
	for i, e := range all {
		g := got[i]
		if g["id"] != e.ID.String() || g["event"] != string(e.Payload) || g["op"] != string(e.Op) || g["table"] != "public.items" || g["key"] != string(e.Key) {
			t.Fatalf("entry %d = %v, want event %s", i, g, e.ID)
		}
	}
}
