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

func TestConformance(t *testing.T) {
	srv := startNATS(t, "max_payload: 65536")
	cfg := fmt.Sprintf(`{"servers":[%q],"stream":"CONF","timeout":"2s","ack_timeout":"2s"}`, srv.url())
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return newSink(discardLogger()) },
		Config:   json.RawMessage(cfg),
		Received: func() [][]byte {
			var out [][]byte
			// A connection per read: one kept open would reconnect
			// after the suite restarts the server, and its goroutines
			// would count as the sink's leaks.
			for _, m := range srv.readOnce(t, "CONF") {
				out = append(out, []byte(m.Data))
			}
			return out
		},
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "credentials in the URL", Config: json.RawMessage(`{"servers":["nats://u:p@h:4222"]}`), Field: "servers"},
			{Name: "wildcard prefix", Config: json.RawMessage(`{"servers":["nats://h:4222"],"subject_prefix":"a.*"}`), Field: "subject_prefix"},
			{Name: "two ways to authenticate", Config: json.RawMessage(`{"servers":["nats://h:4222"],"username":"u","token":"t"}`), Field: "token"},
		},
		Hang: srv.Pause,
		Faults: []sinktest.Fault{{
			Name:   "server down",
			Inject: func() func() { srv.Stop(); return srv.Start },
			Want:   pluginkit.KindRetryable,
		}},
		EventFaults: []sinktest.EventFault{{
			Name: "larger than max_payload",
			Spoil: func(ev pluginkit.Event) pluginkit.Event {
				ev.Payload = []byte(`{"pad":"` + strings.Repeat("x", 100<<10) + `"}`)
				return ev
			},
			Want: pluginkit.KindPermanent,
		}},
		// The suite replays events the stream already holds, within its
		// duplicate window: the stream keeps its one copy, which is what
		// a replay of this sink must do (TestReplay). Parked events it
		// never stored are stored by a replay.
		Skip: []string{"Deliver/Batches/Replay"},
	})
}

func TestConfigure(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, cfg, field string // field empty: valid
	}{
		{name: "minimal", cfg: `{"servers":["nats://127.0.0.1:4222"]}`},
		{name: "full", cfg: `{"servers":["nats://n1:4222","tls://n2:4222"],"subject_prefix":"cdc.pg","subjects":{"public.a":"orders.a"},"stream":"CDC",
			"create_stream":false,"duplicate_window":"10m","replicas":3,"min_duplicate_window":"5m","ack_timeout":"5s","timeout":"3s","name":"w",
			"username":"u","password":"p","tls":{"server_name":"n","insecure_skip_verify":"true"}}`},
		{name: "no servers", cfg: `{}`, field: "servers"},
		{name: "server without port", cfg: `{"servers":["nats://n"]}`, field: "servers"},
		{name: "http server", cfg: `{"servers":["http://n:4222"]}`, field: "servers"},
		{name: "password in URL", cfg: `{"servers":["nats://u:secret@n:4222"]}`, field: "servers"},
		{name: "bad prefix", cfg: `{"servers":["nats://n:4222"],"subject_prefix":"a b"}`, field: "subject_prefix"},
		{name: "bad stream", cfg: `{"servers":["nats://n:4222"],"stream":"a.b"}`, field: "stream"},
		{name: "window below the minimum", cfg: `{"servers":["nats://n:4222"],"duplicate_window":"30s"}`, field: "duplicate_window"},
		{name: "bad ack timeout", cfg: `{"servers":["nats://n:4222"],"ack_timeout":"soon"}`, field: "ack_timeout"},
		{name: "replicas 7", cfg: `{"servers":["nats://n:4222"],"replicas":7}`, field: "replicas"},
		{name: "password without user", cfg: `{"servers":["nats://n:4222"],"password":"p"}`, field: "password"},
		{name: "missing creds", cfg: fmt.Sprintf(`{"servers":["nats://n:4222"],"credentials_file":%q}`, filepath.Join(dir, "none.creds")), field: "credentials_file"},
		{name: "wildcard subject", cfg: `{"servers":["nats://n:4222"],"subjects":{"public.a":"a.>"}}`, field: "subjects"},
		{name: "bad tls", cfg: `{"servers":["nats://n:4222"],"tls":{"key_file":"k.pem"}}`, field: "tls"},
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

// Names a subject cannot hold become "_", and two tables that would share
// a subject are reported at the table.
func TestSubjects(t *testing.T) {
	st, err := decodeConfig(json.RawMessage(`{"servers":["nats://n:4222"]}`), pluginkit.Identity{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.subjectFor("public", "order items.v2*"); got != "walcast.public.order_items_v2_" {
		t.Errorf("subject = %q", got)
	}
	if got := st.subjectFor("", ""); got != "walcast.message" {
		t.Errorf("a message event's subject = %q, want walcast.message", got)
	}
	err = newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{
		Config: json.RawMessage(`{"servers":["nats://n:4222"]}`),
		Tables: []string{"public.a.b", "public.a_b"},
	})
	var ce *pluginkit.ConfigError
	if !errors.As(err, &ce) || ce.Table != "public.a_b" {
		t.Fatalf("Configure = %v, want a ConfigError at public.a_b", err)
	}
}

// openSink configures and opens a sink against srv; extra is merged into
// the config.
func openSink(t *testing.T, srv *natsServer, extra map[string]any, tables ...string) *Sink {
	t.Helper()
	s := newSink(discardLogger())
	if _, err := configureOpen(t, s, srv.url(), extra, tables...); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func configureOpen(t *testing.T, s *Sink, url string, extra map[string]any, tables ...string) (pluginkit.OpenResult, error) {
	t.Helper()
	cfg := map[string]any{"servers": []string{url}, "timeout": "2s", "ack_timeout": "5s"}
	for k, v := range extra {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.Configure(ctx, pluginkit.Setup{Config: raw, Tables: tables}); err != nil {
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

// assertStored checks that the stream holds exactly want's events, in
// order, each once, on the table's subject with its bytes.
func assertStored(t *testing.T, got []stored, want ...[]pluginkit.Event) {
	t.Helper()
	var all []pluginkit.Event
	for _, w := range want {
		all = append(all, w...)
	}
	if len(got) != len(all) {
		t.Fatalf("the stream holds %d messages, want %d", len(got), len(all))
	}
	for i, e := range all {
		if g := got[i]; g.ID != e.ID.String() || g.Data != string(e.Payload) || g.Subject != "walcast.public.items" {
			t.Fatalf("message %d = %+v, want event %s", i, g, e.ID)
		}
	}
}

// With a route, each event is published to "<subject_prefix>.<route>":
// events routed to two subjects arrive on each, every row's changes in
// commit order and none lost, and an event whose route is no subject
// parks alone, as permanent, naming the route.
func TestRoutes(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, map[string]any{"subject_prefix": "cdc"}, "public.items")
	if !s.Info().Routes {
		t.Fatal("Info.Routes is false: the host would refuse a route on the nats sink")
	}
	// Keys 0..6 (events' i%7): even keys to tenant.eu, odd to tenant_us.
	route := func(evs []pluginkit.Event) []pluginkit.Event {
		for i := range evs {
			var k struct{ ID int }
			_ = json.Unmarshal(evs[i].Key, &k)
			evs[i].Route = []string{"tenant.eu", "tenant_us"}[k.ID%2]
		}
		return evs
	}
	first, second := route(events(0x10, 30)), route(events(0x20, 30))
	deliver(t, s, pluginkit.Batch{Events: first})
	bad := second[3]
	second[3].Route = "tenant.*"
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: second})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[3] == nil {
		t.Fatalf("Deliver with one bad route = %v, want a BatchError naming event 3 only", err)
	}
	if kind, _ := pluginkit.KindOf(be.Failed[3]); kind != pluginkit.KindPermanent || !strings.Contains(be.Failed[3].Error(), `"tenant.*"`) {
		t.Fatalf("the bad route's error = %v, want permanent, naming the route", be.Failed[3])
	}

	got := srv.readOnce(t, "WALCAST")
	bySubject := map[string][]string{}
	for _, m := range got {
		bySubject[m.Subject] = append(bySubject[m.Subject], m.ID)
	}
	want := map[string][]string{}
	for _, e := range append(first, second...) {
		if e.ID == bad.ID {
			continue
		}
		subj := "cdc." + e.Route
		want[subj] = append(want[subj], e.ID.String())
	}
	if len(want) != 2 || fmt.Sprint(bySubject) != fmt.Sprint(want) {
		t.Fatalf("the stream holds, by subject:\n%v\nwant:\n%v", bySubject, want)
	}
}
