package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// cluster is the target PostgreSQL of the package's tests (each test
// makes its own database in it); tests that stop a server start their own.
var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	db, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return db
}

func cfgJSON(t testing.TB, kv map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(kv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invalidConfigs are config blocks Configure must refuse, at the attribute.
var invalidConfigs = []sinktest.InvalidConfig{
	{Name: "bad mode", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1/db","mode":"audit"}`), Field: "mode"},
	{Name: "unparsable dsn", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1:notaport/db"}`), Field: "dsn"},
	{Name: "bad target", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1/db","tables":{"public.orders":"a.b.c"}}`), Field: "tables"},
	{Name: "bad checkpoint table", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1/db","checkpoint_table":"a.b.c"}`), Field: "checkpoint_table"},
	{Name: "mirror attribute in history mode", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1/db","mode":"history","create_tables":false}`), Field: "create_tables"},
	{Name: "wrong type", Config: json.RawMessage(`{"dsn":"postgres://x@127.0.0.1/db","create_tables":"yes"}`), Field: "create_tables"},
}

// ownCluster starts a target of the test's own, for faults that stop it.
func ownCluster(t *testing.T) (dsn string, c *pgtest.Cluster) {
	t.Helper()
	c = pgtest.New(t, pgtest.Options{})
	return c.Database(t), c
}

// freeze stops every process of the cluster (SIGSTOP): connections stay
// open and nothing answers, new ones included, until thaw.
func freeze(t testing.TB, c *pgtest.Cluster) (thaw func()) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Data, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{pm}
	if kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pm, pm)); err == nil {
		for _, f := range strings.Fields(string(kids)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	return func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// faults are the whole-target failures of the conformance suite: the
// server frozen (Hang), and stopped (refusing connections) then up again.
func faults(t *testing.T, c *pgtest.Cluster) (hang func() func(), fs []sinktest.Fault) {
	hang = func() func() { return freeze(t, c) }
	stop := func() func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx, "fast"); err != nil {
			t.Fatal(err)
		}
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hang, []sinktest.Fault{{Name: "server stopped", Inject: stop, Want: pluginkit.KindRetryable}}
}

// nulByte makes the target refuse the event: it becomes an insert of a
// row holding U+0000, which PostgreSQL's text and jsonb cannot hold,
// while the rest of the batch is taken.
var nulByte = sinktest.EventFault{
	Name: "value jsonb cannot hold",
	Spoil: func(ev pluginkit.Event) pluginkit.Event {
		var env map[string]any
		if err := json.Unmarshal(ev.Payload, &env); err != nil {
			panic(err)
		}
		env["op"], env["key"], env["old"] = "insert", map[string]any{"id": 999}, nil
		env["new"] = map[string]any{"id": 999, "nul": "\u0000"}
		ev.Op, ev.Key = pluginkit.OpInsert, []byte(`{"id":999}`)
		ev.Payload, _ = json.Marshal(env)
		return ev
	},
	Want: pluginkit.KindPermanent,
}

// TestConformanceMirror runs the conformance suite against mirror mode on
// a real PostgreSQL. What arrived is checked by the mirror tests, which
// compare tables: mirror mode keeps rows, not the payloads the suite
// compares.
func TestConformanceMirror(t *testing.T) {
	dsn, c := ownCluster(t)
	hang, fs := faults(t, c)
	sinktest.Run(t, sinktest.Config{
		NewBatch:       func() pluginkit.BatchSink { return New() },
		Config:         cfgJSON(t, map[string]any{"dsn": dsn}),
		InvalidConfigs: invalidConfigs,
		Hang:           hang,
		Faults:         fs,
		EventFaults:    []sinktest.EventFault{nulByte},
	})
}

// TestConformanceHistory runs the conformance suite against history mode,
// reading back every stored event and rebuilding the envelope from its
// columns: byte for byte what was delivered, so every field is kept.
func TestConformanceHistory(t *testing.T) {
	dsn, c := ownCluster(t)
	hang, fs := faults(t, c)
	db, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	sinktest.Run(t, sinktest.Config{
		NewBatch:       func() pluginkit.BatchSink { return New() },
		Config:         cfgJSON(t, map[string]any{"dsn": dsn, "mode": "history"}),
		InvalidConfigs: invalidConfigs,
		Received:       func() [][]byte { return historyPayloads(t, db) },
		Hang:           hang,
		Faults:         fs,
		EventFaults:    []sinktest.EventFault{nulByte},
		// A replayed event already in the table is not stored twice
		// (exactly one row per event id), so it does not arrive again.
		Skip: []string{"Deliver/Batches/Replay"},
	})
}

// envelope is the sinktest's encoding of an event.
type envelope struct {
	ID              string          `json:"id"`
	CommitLSN       string          `json:"commit_lsn"`
	Xid             uint32          `json:"xid"`
	CommitTime      string          `json:"commit_time"`
	Schema          string          `json:"schema"`
	Table           string          `json:"table"`
	Op              string          `json:"op"`
	Key             json.RawMessage `json:"key"`
	New             json.RawMessage `json:"new"`
	Old             json.RawMessage `json:"old"`
	Unchanged       []string        `json:"unchanged,omitempty"`
	Cascade         *bool           `json:"cascade,omitempty"`
	RestartIdentity *bool           `json:"restart_identity,omitempty"`
}

// historyPayloads reads the history table in commit order and encodes each
// row as an envelope; a table that is not there yet holds nothing.
func historyPayloads(t testing.TB, db *pgxpool.Pool) [][]byte {
	rows, err := db.Query(context.Background(), `SELECT id, lsn::text, xid, commit_time, schema_name, table_name, op,
		coalesce(key::text, 'null'), coalesce(new::text, 'null'), coalesce(old::text, 'null'), unchanged, "cascade", restart_identity
		FROM public.walcast_history h ORDER BY h.lsn, h.idx`)
	if err != nil {
		t.Logf("read history: %v", err)
		return nil
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var e envelope
		var ct time.Time
		var key, nw, old string
		if err := rows.Scan(&e.ID, &e.CommitLSN, &e.Xid, &ct, &e.Schema, &e.Table, &e.Op, &key, &nw, &old, &e.Unchanged, &e.Cascade, &e.RestartIdentity); err != nil {
			t.Errorf("read history: %v", err)
			return nil
		}
		e.CommitTime = ct.UTC().Format("2006-01-02T15:04:05.000000Z07:00")
		e.Key, e.New, e.Old = reencode(t, key), reencode(t, nw), reencode(t, old)
		b, err := json.Marshal(e)
		if err != nil {
			t.Errorf("encode: %v", err)
		}
		out = append(out, b)
	}
	return out
}

// reencode turns jsonb's text (keys reordered, spaces added) back into the
// compact, key-sorted encoding the suite's events use.
func reencode(t testing.TB, s string) json.RawMessage {
	var v any
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Errorf("decode %q: %v", s, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Errorf("encode %q: %v", s, err)
	}
	return b
}
