package sinktest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// destination is an in-memory stand-in for what a sink writes to.
type destination struct {
	mu      sync.Mutex
	events  [][]byte
	hanging chan struct{} // non-nil: writes wait until it is closed
	fail    error         // non-nil: writes fail with it
}

func (d *destination) received() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]byte(nil), d.events...)
}

func (d *destination) hang() func() {
	ch := make(chan struct{})
	d.mu.Lock()
	d.hanging = ch
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		d.hanging = nil
		d.mu.Unlock()
		close(ch)
	}
}

func (d *destination) failWith(err error) func() func() {
	return func() func() {
		d.mu.Lock()
		d.fail = err
		d.mu.Unlock()
		return func() {
			d.mu.Lock()
			d.fail = nil
			d.mu.Unlock()
		}
	}
}

// memSink is a correct sink over a destination, with switches that break
// it the ways the suite must notice.
type memSink struct {
	dst    *destination
	broken string

	mu     sync.Mutex
	last   pluginkit.EventID // the last event written
	topic  string
	open   bool
	closed bool
	stop   chan struct{}
}

var _ pluginkit.Sink = (*memSink)(nil)

func (s *memSink) Info() pluginkit.Info {
	name := "mem"
	if s.broken == "bad-name" {
		name = "Mem Sink"
	}
	return pluginkit.Info{
		Name:    name,
		Version: "v0.0.1",
		Config:  []pluginkit.ConfigField{{Name: "topic", Type: pluginkit.TypeString, Required: true, Doc: "Where events go."}},
	}
}

func (s *memSink) Configure(ctx context.Context, raw json.RawMessage) error {
	return s.configure(pluginkit.IdentityFrom(ctx), raw)
}

func (s *memSink) configure(id pluginkit.Identity, raw json.RawMessage) error {
	if id.Pipeline == "" || id.SinkID == "" {
		return fmt.Errorf("configured without an identity: %+v", id)
	}
	var c struct {
		Topic string `json:"topic"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return &pluginkit.ConfigError{Msg: err.Error()}
	}
	if c.Topic == "" || strings.ContainsAny(c.Topic, " /") {
		field := "topic"
		if s.broken == "wrong-field" {
			field = ""
		}
		return &pluginkit.ConfigError{Field: field, Msg: "must be a non-empty word"}
	}
	s.mu.Lock()
	s.topic = c.Topic
	s.mu.Unlock()
	return nil
}

func (s *memSink) Open(context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open = true
	s.stop = make(chan struct{})
	if s.broken == "leak" {
		go func() { <-make(chan struct{}) }() // never stopped
	}
	return pluginkit.OpenResult{}, nil
}

func (s *memSink) Deliver(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error) {
	return s.deliver(ctx, events, func(int, pluginkit.Event) bool { return true })
}

// deliver writes the events write accepts (by index).
func (s *memSink) deliver(ctx context.Context, events []pluginkit.Event, write func(int, pluginkit.Event) bool) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	open := s.open
	s.mu.Unlock()
	if !open {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	d := s.dst
	d.mu.Lock()
	hanging, fail := d.hanging, d.fail
	d.mu.Unlock()
	if hanging != nil {
		if s.broken == "ignore-context" {
			<-hanging
		} else {
			select {
			case <-hanging:
			case <-ctx.Done():
				return pluginkit.DeliverResult{}, fmt.Errorf("write to %s: %w", s.topic, ctx.Err())
			}
		}
	}
	if err := ctx.Err(); err != nil {
		if s.broken == "permanent-on-cancel" {
			return pluginkit.DeliverResult{}, pluginkit.Permanent(err)
		}
		return pluginkit.DeliverResult{}, fmt.Errorf("write to %s: %w", s.topic, err)
	}
	if fail != nil {
		return pluginkit.DeliverResult{}, fail
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var res pluginkit.DeliverResult
	for i, e := range events {
		p := e.Payload
		switch {
		case !write(i, e):
			continue
		case s.broken == "drop-last" && i == len(events)-1 && len(events) > 1:
			continue
		case s.broken == "skip-replay" && e.ID.Compare(s.last) <= 0:
			// Skipped as a duplicate below what it wrote, replay or not.
			res.Duplicates++
			continue
		case s.broken == "reencode":
			// Decoding and encoding again reorders keys: the bytes change.
			var v map[string]any
			if err := json.Unmarshal(p, &v); err != nil {
				return pluginkit.DeliverResult{}, pluginkit.Permanent(err)
			}
			p, _ = json.Marshal(v)
		}
		d.events = append(d.events, p)
		s.last = e.ID
	}
	return res, nil
}

func (s *memSink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && s.broken == "panic-on-second-close" {
		close(s.stop) // closing a closed channel panics
	}
	if s.open && !s.closed {
		close(s.stop)
	}
	s.open, s.closed = false, s.open || s.closed
	return nil
}

// memBatch is memSink as a BatchSink. Its destination refuses, one by
// one, the events whose payload holds "refused": it writes the others and
// names those in a BatchError.
type memBatch struct{ *memSink }

var _ pluginkit.BatchSink = memBatch{}

func (b memBatch) Configure(_ context.Context, setup pluginkit.Setup) error {
	return b.configure(setup.Sink, setup.Config)
}

func (b memBatch) Deliver(ctx context.Context, batch pluginkit.Batch) (pluginkit.DeliverResult, error) {
	failed := map[int]error{}
	res, err := b.deliver(ctx, batch.Events, func(i int, e pluginkit.Event) bool {
		if !bytes.Contains(e.Payload, []byte("refused")) {
			return true
		}
		if b.broken == "names-next-event" {
			i++
		}
		failed[i] = pluginkit.Permanent(fmt.Errorf("event %s refused", e.ID))
		return false
	})
	if err == nil && len(failed) > 0 {
		err = &pluginkit.BatchError{Failed: failed}
	}
	return res, err
}

// batchConfig returns the suite's config for a memBatch broken as named,
// with an event the destination refuses.
func batchConfig(broken string) sinktest.Config {
	cfg := config(broken)
	next := cfg.New
	cfg.New = nil
	cfg.NewBatch = func() pluginkit.BatchSink { return memBatch{next().(*memSink)} }
	cfg.EventFaults = []sinktest.EventFault{{
		Name: "refused event",
		Spoil: func(e pluginkit.Event) pluginkit.Event {
			e.Payload = []byte(`{"refused":true}`)
			return e
		},
		Want: pluginkit.KindPermanent,
	}}
	return cfg
}

// config returns the suite's config for a memSink broken as named.
func config(broken string) sinktest.Config {
	dst := &destination{}
	return sinktest.Config{
		New:    func() pluginkit.Sink { return &memSink{dst: dst, broken: broken} },
		Config: json.RawMessage(`{"topic":"orders"}`),
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "topic with a space", Config: json.RawMessage(`{"topic":"a b"}`), Field: "topic"},
		},
		Received: dst.received,
		// Writes are visible at once; a short wait keeps failing runs fast.
		ReceiveTimeout: 200 * time.Millisecond,
		Hang:           dst.hang,
		Faults: []sinktest.Fault{
			{Name: "throttled", Inject: dst.failWith(pluginkit.Throttled(3*time.Second, errors.New("slow down"))), Want: pluginkit.KindThrottled, RetryAfter: 3 * time.Second},
			{Name: "refused", Inject: dst.failWith(pluginkit.Permanent(errors.New("too large"))), Want: pluginkit.KindPermanent},
		},
	}
}

func TestRunPassesACorrectSink(t *testing.T) {
	sinktest.Run(t, config(""))
}

func TestRunPassesACorrectBatchSink(t *testing.T) {
	sinktest.Run(t, batchConfig(""))
}

// A sink that names things after its id sees the identity given.
func TestIdentity(t *testing.T) {
	var seen []pluginkit.Identity
	var mu sync.Mutex
	cfg := config("")
	next := cfg.New
	cfg.New = func() pluginkit.Sink { return &identitySink{Sink: next(), seen: &seen, mu: &mu} }
	cfg.Identity = pluginkit.Identity{Pipeline: "shop", SinkID: "billing"}
	sinktest.Run(t, cfg)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 || seen[0] != cfg.Identity {
		t.Fatalf("Configure saw %v, want %v", seen, cfg.Identity)
	}
}

type identitySink struct {
	pluginkit.Sink
	mu   *sync.Mutex
	seen *[]pluginkit.Identity
}

func (s *identitySink) Configure(ctx context.Context, raw json.RawMessage) error {
	s.mu.Lock()
	*s.seen = append(*s.seen, pluginkit.IdentityFrom(ctx))
	s.mu.Unlock()
	return s.Sink.Configure(ctx, raw)
}

// envBroken names the broken sink TestBrokenSink runs the suite against,
// in a child process: a failing suite cannot be observed from inside the
// test it fails.
const envBroken = "SINKTEST_BROKEN"

func TestBrokenSink(t *testing.T) {
	broken := os.Getenv(envBroken)
	if broken == "" {
		t.Skip("run by TestRunCatchesBrokenSinks")
	}
	if b, ok := strings.CutPrefix(broken, "batch:"); ok {
		sinktest.Run(t, batchConfig(b))
		return
	}
	sinktest.Run(t, config(broken))
}

// TestRunCatchesBrokenSinks checks that each kind of broken sink fails
// the suite, with a message that says what is wrong.
func TestRunCatchesBrokenSinks(t *testing.T) {
	for _, tc := range []struct {
		broken   string
		failing  string // the subtest that must fail
		wantText string
	}{
		{"bad-name", "Info", "Info.Name"},
		{"wrong-field", "Configure/Invalid/topic_with_a_space", `names field "", want "topic"`},
		{"drop-last", "Deliver/Batches", "received 2 payloads after the mark, want 3"},
		{"reencode", "Deliver/Batches", "differs from what was delivered"},
		{"ignore-context", "Deliver/Hang", "did not return within"},
		{"permanent-on-cancel", "Deliver/ContextDone", "returned a permanent error"},
		{"panic-on-second-close", "Close/AfterOpen", "panic: close of closed channel"},
		{"leak", "GoroutineLeaks", "still running"},
		{"skip-replay", "Deliver/Batches/Replay", "reported 2 duplicates, want 0"},
		{"batch:names-next-event", "Deliver/Faults/refused_event", "want event 2 alone"},
	} {
		t.Run(tc.broken, func(t *testing.T) {
			t.Parallel()
			c, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(c, os.Args[0], "-test.run=^TestBrokenSink$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), envBroken+"="+tc.broken)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a sink broken by %q (err %v):\n%s", tc.broken, err, out)
			}
			if want := "--- FAIL: TestBrokenSink/" + tc.failing + " "; !bytes.Contains(out, []byte(want)) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
			if !bytes.Contains(out, []byte(tc.wantText)) {
				t.Errorf("output lacks %q:\n%s", tc.wantText, out)
			}
		})
	}
}

// Check runs the same checks as Run: a correct sink passes with the same
// check names go test reports for Run, and each broken sink fails the
// same check with the same message.
func TestCheckMatchesRun(t *testing.T) {
	var results []sinktest.Result
	if !sinktest.Check(context.Background(), config(""), func(r sinktest.Result) { results = append(results, r) }) {
		t.Fatalf("Check failed a correct sink: %+v", results)
	}
	got := map[string]bool{}
	for _, r := range results {
		if r.Outcome != sinktest.Pass {
			t.Errorf("%s: %s %q", r.Name, r.Outcome, r.Output)
		}
		got[r.Name] = true
	}

	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(c, os.Args[0], "-test.run=^TestRunPassesACorrectSink$", "-test.v", "-test.count=1").CombinedOutput()
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	want := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- PASS: TestRunPassesACorrectSink/"); ok {
			want[strings.Fields(name)[0]] = true
		}
	}
	if len(want) < 10 {
		t.Fatalf("go test -v reported only %d checks:\n%s", len(want), out)
	}
	for name := range want {
		if !got[name] {
			t.Errorf("Run ran %s, Check did not report it", name)
		}
	}
	for name := range got {
		if !want[name] {
			t.Errorf("Check reported %s, Run did not run it", name)
		}
	}
}

func TestCheckCatchesBrokenSinks(t *testing.T) {
	for _, tc := range []struct {
		broken   string
		failing  string
		wantText string
	}{
		{"bad-name", "Info", "Info.Name"},
		{"wrong-field", "Configure/Invalid/topic_with_a_space", `names field "", want "topic"`},
		{"drop-last", "Deliver/Batches", "received 2 payloads after the mark, want 3"},
		{"reencode", "Deliver/Batches", "differs from what was delivered"},
		{"ignore-context", "Deliver/Hang", "did not return within"},
		{"permanent-on-cancel", "Deliver/ContextDone", "returned a permanent error"},
		{"panic-on-second-close", "Close/AfterOpen", "panic: close of closed channel"},
		{"skip-replay", "Deliver/Batches/Replay", "reported 2 duplicates, want 0"},
		{"batch:names-next-event", "Deliver/Faults/refused_event", "want event 2 alone"},
	} {
		t.Run(tc.broken, func(t *testing.T) {
			var failed *sinktest.Result
			cfg := config(tc.broken)
			if b, ok := strings.CutPrefix(tc.broken, "batch:"); ok {
				cfg = batchConfig(b)
			}
			ok := sinktest.Check(context.Background(), cfg, func(r sinktest.Result) {
				if r.Name == tc.failing {
					failed = &r
				}
			})
			switch {
			case ok:
				t.Fatalf("Check passed a sink broken by %q", tc.broken)
			case failed == nil:
				t.Fatalf("Check did not report %s", tc.failing)
			case failed.Outcome != sinktest.Fail:
				t.Fatalf("%s: %s, want FAIL", tc.failing, failed.Outcome)
			case !strings.Contains(strings.Join(failed.Output, "\n"), tc.wantText):
				t.Errorf("%s output %q lacks %q", tc.failing, failed.Output, tc.wantText)
			}
		})
	}
}
