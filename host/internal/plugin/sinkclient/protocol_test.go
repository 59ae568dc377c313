package sinkclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/proto/sink/wire"
)

// The sink protocol versions: the host speaks 1 and 2, a plugin built
// against the SDK as it was before version 2 runs unchanged, a plugin
// speaking only a version the host does not is refused before any call
// with both sides' versions named, and a version 2 plugin's per-event
// answers reach the scheduler.

// buildFrozenV1 builds testdata/frozenv1, a sink built against a frozen
// copy of the SDK from before protocol version 2, as its author would
// have built it: its own module, the frozen SDK through replace.
func buildFrozenV1(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), ExecutableName("frozen"))
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "testdata/frozenv1"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the frozen v1 sink: %v\n%s", err, out)
	}
	return bin
}

// buildFailOne builds testdata/failone, a version 2 sink of the current
// SDK that names the events it refuses.
func buildFailOne(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), ExecutableName("failone"))
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/failone").CombinedOutput(); err != nil {
		t.Fatalf("build failone: %v\n%s", err, out)
	}
	return bin
}

// readLines decodes the JSON lines of path into T.
func readLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

// keyed returns n events of one transaction, the i-th with key {"id":i}.
func keyed(n int) []pluginkit.Event {
	out := make([]pluginkit.Event, n)
	for i := range out {
		out[i] = pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x100, Index: uint64(i)}, Schema: "public", Table: "orders",
			Op: pluginkit.OpInsert, Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: fmt.Appendf(nil, `{"id":%d}`, i)}
	}
	return out
}

// A plugin built against the SDK from before version 2 speaks version 1
// with this host, and gets what that SDK reads from the context: its
// identity in Configure, the replay and gap flags in Deliver.
func TestFrozenV1Plugin(t *testing.T) {
	bin := buildFrozenV1(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	s, err := Start(t.Context(), Config{Path: bin, Pipeline: "shop", SinkID: "legacy", StartTimeout: time.Minute},
		json.RawMessage(fmt.Sprintf(`{"path":%q}`, out)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if v := s.p.Version(); v != wire.ProtocolV1 {
		t.Fatalf("negotiated protocol version %d, want 1", v)
	}
	// It predates Info.Routes: its description says no routes, so the
	// host refuses a route on it (config.RouteRefused).
	if info := s.Info(); info.Name != "frozen" || info.Version != "v1-frozen" || info.Routes {
		t.Fatalf("Info = %+v", info)
	}
	evs := keyed(3)
	for _, b := range []attempt.Batch{{Events: evs[:2]}, {Events: evs[2:], Replay: true, GapBefore: true}} {
		if res, err := s.Deliver(t.Context(), b); err != nil || len(res.Failed) != 0 {
			t.Fatalf("Deliver: %+v, %v", res, err)
		}
	}
	type line struct {
		ID, Pipeline, Sink string
		Replay, Gap        bool
	}
	got := readLines[line](t, out)
	want := []line{{"0/100:0", "shop", "legacy", false, false}, {"0/100:1", "shop", "legacy", false, false}, {"0/100:2", "shop", "legacy", true, true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the frozen sink wrote %+v, want %+v", got, want)
	}

	// A bad config still comes back as the attribute's error.
	_, err = Describe(t.Context(), Config{Path: bin, SinkID: "legacy"}, json.RawMessage(`{}`))
	if ce, ok := errors.AsType[*pluginkit.ConfigError](err); !ok || ce.Field != "path" {
		t.Errorf("Configure without path: %v, want a ConfigError for path", err)
	}
}

// A plugin that speaks only a version the host does not is refused when
// it starts, with both versions named and what to do.
func TestMismatchedVersionRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bin    string
		offer  []int
		want   string
		advice string
	}{
		{"v2 plugin, v1 host", buildFailOne(t), []int{wire.ProtocolV1},
			"the plugin speaks sink protocol version 2 and this walcast speaks version 1", "upgrade walcast"},
		{"v1 plugin, v2 host", buildFrozenV1(t), []int{wire.ProtocolV2},
			"the plugin speaks sink protocol version 1 and this walcast speaks version 2", "rebuild the plugin against a newer pluginkit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Launch(t.Context(), Config{Path: tc.bin, SinkID: "x", StartTimeout: time.Minute, protocols: tc.offer})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.advice) {
				t.Fatalf("Launch = %v, want %q and %q", err, tc.want, tc.advice)
			}
			t.Log(err)
		})
	}
}

// A version 2 plugin's answer names the failed events, with their kind;
// the others are taken.
func TestV2PluginNamesFailedEvents(t *testing.T) {
	bin := buildFailOne(t)
	out := filepath.Join(t.TempDir(), "calls.jsonl")
	s, err := Start(t.Context(), Config{Path: bin, Pipeline: "shop", SinkID: "one", StartTimeout: time.Minute},
		json.RawMessage(fmt.Sprintf(`{"path":%q,"fail_key":"{\"id\":7}","permanent":true}`, out)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if v := s.p.Version(); v != wire.ProtocolV2 {
		t.Fatalf("negotiated protocol version %d, want 2", v)
	}
	res, err := s.Deliver(t.Context(), attempt.Batch{Events: keyed(10), Replay: true})
	if err != nil || len(res.Failed) != 1 || res.Failed[0].Index != 7 {
		t.Fatalf("Deliver = %+v, %v; want event 7 named", res, err)
	}
	if kind, _ := attempt.KindOf(res.Failed[0].Err); kind != attempt.KindPermanent || res.Failed[0].Err.Error() != `the destination refuses key {"id":7}` {
		t.Errorf("event 7 failed with %q (%s)", res.Failed[0].Err, kind)
	}
	type call struct {
		Replay         bool
		Pipeline, Sink string
	}
	if calls := readLines[call](t, out); len(calls) != 1 || !calls[0].Replay || calls[0].Pipeline != "shop" || calls[0].Sink != "one" {
		t.Errorf("the plugin saw %+v, want one replay call by shop/one", calls)
	}
}

// memParked is walcast.parked in memory, for a scheduler over a real
// plugin.
type memParked struct {
	mu sync.Mutex
	ps []parking.Event
}

func (m *memParked) Park(_ context.Context, ps []parking.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ps = append(m.ps, ps...)
	return nil
}
func (m *memParked) Unpark(context.Context, string, []pluginkit.EventID) error { return nil }
func (m *memParked) ParkedRows(context.Context, string) ([]string, error)      { return nil, nil }
func (m *memParked) ListParked(context.Context, string, string) ([]parking.Event, error) {
	return nil, nil
}
func (m *memParked) ListParkedTable(context.Context, string, string, string) ([]parking.Event, error) {
	return nil, nil
}
func (m *memParked) ParkedRowOf(context.Context, string, pluginkit.EventID) (string, error) {
	return "", nil
}

func (m *memParked) parked() []parking.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]parking.Event(nil), m.ps...)
}

// A version 2 sink that fails one event of a batch of 100 on every
// attempt gets exactly that event parked after max_attempts, and the other
// 99 are delivered by the first attempt: the plugin sees the batch of 100
// once and the failing event alone max_attempts - 1 more times.
func TestOneOfAHundredParkedThroughThePlugin(t *testing.T) {
	bin := buildFailOne(t)
	out := filepath.Join(t.TempDir(), "calls.jsonl")
	sink, err := Start(t.Context(), Config{Path: bin, SinkID: "one", StartTimeout: time.Minute},
		json.RawMessage(fmt.Sprintf(`{"path":%q,"fail_key":"{\"id\":42}"}`, out)))
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(context.Background())

	const maxAttempts = 3
	tracker := ack.New([]ack.SinkSpec{{ID: "one", Durable: true}}, 0)
	queue := fanout.NewQueue(1000, true)
	store := &memParked{}
	s := schedule.New(schedule.Config{SinkID: "one", BatchSize: 100, MaxAttempts: maxAttempts, RetryBase: time.Millisecond, Parked: store},
		queue, tracker, sink)
	// Paused until all 100 events are held, so that they go as one batch.
	s.SetPaused(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, make(chan struct{})) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for _, e := range keyed(100) {
		seq, err := tracker.Add(e.ID)
		if err != nil {
			t.Fatal(err)
		}
		queue.C <- fanout.Item{Seq: seq, Event: e}
	}
	tracker.Commit(0x108)
	waitFor(t, 30*time.Second, "the scheduler to hold all 100 events", func() bool { return s.Stats.Held.Load() == 100 })
	s.SetPaused(false)
	waitFor(t, 30*time.Second, "every event resolved", func() bool { return tracker.Pending(0) == 0 })

	type call struct{ IDs, Failed []string }
	calls := readLines[call](t, out)
	if len(calls) != maxAttempts {
		t.Fatalf("the plugin got %d calls, want %d: %+v", len(calls), maxAttempts, calls)
	}
	if len(calls[0].IDs) != 100 {
		t.Fatalf("the first call carried %d events, want 100", len(calls[0].IDs))
	}
	for i, c := range calls[1:] {
		if len(c.IDs) != 1 || c.IDs[0] != "0/100:42" {
			t.Errorf("retry %d carried %v, want 0/100:42 alone", i+1, c.IDs)
		}
	}
	parked := store.parked()
	if len(parked) != 1 || parked[0].Event.ID.String() != "0/100:42" || parked[0].Attempts != maxAttempts {
		t.Fatalf("parked %+v, want 0/100:42 after %d attempts", parked, maxAttempts)
	}
	if d, a := s.Stats.Delivered.Load(), s.Stats.Attempts.Load(); d != 99 || a != maxAttempts {
		t.Errorf("delivered %d in %d attempts, want 99 in %d", d, a, maxAttempts)
	}
}
