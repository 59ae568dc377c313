package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Config describes the sink under test and, through optional hooks, its
// destination.
type Config struct {
	// New returns a fresh, unconfigured Sink, or NewBatch a fresh,
	// unconfigured BatchSink: set exactly one. The suite calls it for
	// every check and closes every sink it opened. A Sink is driven as
	// pluginkit.Serve drives it, through the context.
	New      func() pluginkit.Sink
	NewBatch func() pluginkit.BatchSink

	// Identity is the sink's identity in Configure (Setup.Sink, or
	// pluginkit.IdentityFrom for a Sink). Default: pipeline "sinktest",
	// sink id "sinktest".
	Identity pluginkit.Identity

	// Config is a valid config block as the host hands it to Configure: a
	// JSON object holding only attributes Info declares, every required one
	// included, each of the declared type.
	Config json.RawMessage

	// InvalidConfigs are config blocks Configure must reject with a
	// *pluginkit.ConfigError naming an attribute. Rejecting Config minus a
	// required attribute is checked without being listed here.
	InvalidConfigs []InvalidConfig

	// Received, when set, returns the payload of every event that has
	// reached the destination so far, oldest first, one element per event
	// (for a webhook, the elements of each request's "events" array). It
	// may return everything since the test began: the suite compares only
	// what arrived after it took a mark. A destination that makes writes
	// visible with a delay is polled for up to ReceiveTimeout.
	//
	// Without it the suite checks only what the sink reports, not what
	// arrived.
	Received func() [][]byte

	// ReceiveTimeout bounds how long the suite waits for delivered payloads
	// to show up in Received. Default 5s.
	ReceiveTimeout time.Duration

	// Hang, when set, makes the destination stop answering (accept and
	// never respond, say) until release is called; release must be safe to
	// call more than once. The suite then checks that Deliver gives up when
	// its context ends.
	Hang func() (release func())

	// Faults make the destination fail in ways the sink must classify.
	Faults []Fault

	// EventFaults are events the destination refuses one by one, which
	// a BatchSink must name in a *pluginkit.BatchError while it writes
	// the rest of the batch. Each runs as a check under Deliver/Faults.
	EventFaults []EventFault

	// Skip names checks not to run, as their t.Run path below Run's test:
	// "Deliver/Concurrent", "GoroutineLeaks".
	Skip []string
}

// InvalidConfig is a config block Configure must reject.
type InvalidConfig struct {
	// Name describes the case in the subtest name.
	Name string
	// Config is the JSON handed to Configure.
	Config json.RawMessage
	// Field is the attribute the *pluginkit.ConfigError must name; empty
	// for an error about the block as a whole.
	Field string
}

// Fault is one way the destination can fail.
type Fault struct {
	// Name describes the fault in the subtest name.
	Name string
	// Inject makes every delivery fail until restore is called.
	Inject func() (restore func())
	// Want is the kind pluginkit.KindOf must report for Deliver's error.
	Want pluginkit.Kind
	// RetryAfter, for KindThrottled, is the pause the error must ask for;
	// zero accepts any.
	RetryAfter time.Duration
}

// EventFault is one way a single event can be refused by the destination
// while the rest of its batch is written.
type EventFault struct {
	// Name describes the fault in the subtest name.
	Name string
	// Spoil returns ev changed so that the destination refuses it (a
	// payload over its size limit, say); the other events of the batch
	// stay as they are.
	Spoil func(ev pluginkit.Event) pluginkit.Event
	// Want is the kind pluginkit.KindOf must report for the spoilt
	// event's error in the BatchError.
	Want pluginkit.Kind
}

const (
	// promptly is how soon Deliver must return once its context has ended.
	// The host cancels a Deliver at deliver_timeout and counts the attempt
	// as failed; a sink that overstays holds a lane, and the row's later
	// changes, hostage.
	promptly = 2 * time.Second
	// callTimeout bounds every call the suite makes that should succeed,
	// so a hanging sink fails the test instead of the whole test binary.
	callTimeout = 30 * time.Second
	// hangDeadline is the context deadline of a Deliver to a hanging
	// destination: short, as only the sink's reaction to it is tested.
	hangDeadline = 300 * time.Millisecond
	// settleTimeout is how long goroutines get to finish after Close.
	settleTimeout = 5 * time.Second
)

// Run runs the conformance suite against the sink cfg describes, from a
// sink's own go test. Each check is a subtest; a failure in one does not
// stop the others.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	runSuite(newGoTest(t), cfg)
}

// runSuite is the suite itself, whatever drives it: Run under go test,
// Check outside it (`walcast plugin test` against a plugin binary).
func runSuite(t tb, cfg Config) {
	t.Helper()
	if (cfg.New == nil) == (cfg.NewBatch == nil) {
		t.Fatal("set exactly one of sinktest.Config.New and sinktest.Config.NewBatch")
	}
	if len(cfg.Config) == 0 {
		t.Fatal("sinktest.Config.Config is empty; pass a valid config block, `{}` when the sink takes none")
	}
	if cfg.ReceiveTimeout <= 0 {
		cfg.ReceiveTimeout = 5 * time.Second
	}
	h := &harness{cfg: cfg, gen: newGenerator(), baseline: goroutines()}

	h.run(t, "Info", h.testInfo)
	h.run(t, "Configure", h.testConfigure)
	h.run(t, "Deliver", func(t tb) {
		h.run(t, "Batches", h.testDeliverBatches)
		h.run(t, "Concurrent", h.testDeliverConcurrent)
		h.run(t, "ContextDone", h.testDeliverContextDone)
		h.run(t, "Hang", h.testDeliverHang)
		h.run(t, "Faults", h.testDeliverFaults)
		h.run(t, "BeforeOpen", h.testDeliverBeforeOpen)
	})
	h.run(t, "Close", h.testClose)
	h.run(t, "GoroutineLeaks", h.testGoroutineLeaks)
}

// harness carries the configuration and the state shared by the checks of
// one Run.
type harness struct {
	cfg      Config
	gen      *generator
	baseline map[uint64]bool // goroutines alive when Run started
}

// run runs one check as a subtest unless Config.Skip names it.
func (h *harness) run(t tb, name string, f func(t tb)) {
	t.Helper()
	t.Run(name, func(t tb) {
		if h.skipped(t.Name()) {
			t.Skip("skipped by sinktest.Config.Skip")
		}
		f(t)
	})
}

// skipped reports whether the subtest named full (as t.Name gives it)
// matches an entry of Config.Skip, which omits Run's own test name.
func (h *harness) skipped(full string) bool {
	for _, s := range h.cfg.Skip {
		if full == s || hasSuffixPath(full, s) {
			return true
		}
	}
	return false
}

// hasSuffixPath reports whether name ends in "/"+suffix.
func hasSuffixPath(name, suffix string) bool {
	return len(name) > len(suffix) && name[len(name)-len(suffix)-1] == '/' && name[len(name)-len(suffix):] == suffix
}

// ctx returns a context for a call that should succeed, ended with t.
func ctx(t tb) context.Context {
	c, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return c
}

func (h *harness) identity() pluginkit.Identity {
	if h.cfg.Identity == (pluginkit.Identity{}) {
		return pluginkit.Identity{Pipeline: "sinktest", SinkID: "sinktest"}
	}
	return h.cfg.Identity
}

// newSink returns a fresh sink from Config.New or Config.NewBatch.
func (h *harness) newSink(t tb) pluginkit.BatchSink {
	t.Helper()
	if h.cfg.NewBatch != nil {
		s := h.cfg.NewBatch()
		if s == nil {
			t.Fatal("Config.NewBatch returned nil")
		}
		return s
	}
	s := h.cfg.New()
	if s == nil {
		t.Fatal("Config.New returned nil")
	}
	return legacy{s}
}

// setup is what Configure receives for config.
func (h *harness) setup(config json.RawMessage) pluginkit.Setup {
	return pluginkit.Setup{Config: config, Sink: h.identity()}
}

// configured returns a fresh sink that accepted Config.
func (h *harness) configured(t tb) pluginkit.BatchSink {
	t.Helper()
	s := h.newSink(t)
	c := ctx(t)
	if err := call(callTimeout, func() error { return s.Configure(c, h.setup(h.cfg.Config)) }); err != nil {
		t.Fatalf("Configure(valid config): %v", err)
	}
	return s
}

// open returns a fresh sink that is configured and open, and closes it
// when t ends.
func (h *harness) open(t tb) pluginkit.BatchSink {
	t.Helper()
	s := h.configured(t)
	c := ctx(t)
	res, err := within(callTimeout, func() (pluginkit.OpenResult, error) { return s.Open(c) })
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := call(callTimeout, func() error { return s.Close(c) }); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if !res.Checkpoint.IsZero() {
		// The host would filter at the sink's own checkpoint; keep the
		// generated events above it so they are all delivered.
		h.gen.skipPast(res.Checkpoint)
	}
	return s
}

// deliver calls Deliver with a context for a call that should succeed and
// checks the result a successful first delivery must have.
func (h *harness) deliver(t tb, s pluginkit.BatchSink, batch []pluginkit.Event) {
	t.Helper()
	h.deliverBatch(t, s, pluginkit.Batch{Events: batch})
}

// deliverBatch is deliver for a batch with its flags.
func (h *harness) deliverBatch(t tb, s pluginkit.BatchSink, b pluginkit.Batch) {
	t.Helper()
	batch := b.Events
	res, err := within(callTimeout, func() (pluginkit.DeliverResult, error) { return s.Deliver(ctx(t), b) })
	if err != nil {
		kind, _ := pluginkit.KindOf(err)
		t.Fatalf("Deliver of %d events (%s..%s): %v (%s)", len(batch), batch[0].ID, batch[len(batch)-1].ID, err, kind)
	}
	if res.Duplicates != 0 {
		t.Errorf("Deliver of %d events never delivered before reported %d duplicates, want 0", len(batch), res.Duplicates)
	}
}

// deliverWithin calls Deliver and waits at most limit for it to return.
func deliverWithin(c context.Context, s pluginkit.BatchSink, batch []pluginkit.Event, limit time.Duration) (pluginkit.DeliverResult, error) {
	return within(limit, func() (pluginkit.DeliverResult, error) { return s.Deliver(c, pluginkit.Batch{Events: batch}) })
}

// within runs f and waits at most limit for it to return. A call that
// overstays fails the check; its goroutine is left behind, blocked in the
// sink, since nothing else can be done with it (the goroutine check then
// reports it too).
func within[T any](limit time.Duration, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = guard(func() (err error) {
			r.v, err = f()
			return err
		})
		done <- r
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		var zero T
		return zero, &overstayedError{limit: limit}
	}
}

// call runs f, which returns only an error, through within.
func call(limit time.Duration, f func() error) error {
	_, err := within(limit, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// overstayedError reports a call that did not return in time.
type overstayedError struct{ limit time.Duration }

func (e *overstayedError) Error() string {
	return fmt.Sprintf("did not return within %s", e.limit)
}

// guard runs f and turns a panic into an error, so that one misbehaving
// call fails its check instead of the whole test binary. A panic in a real
// plugin kills the process: the host sees only a broken connection.
func guard(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return f()
}

// panicError is a panic recovered from a call into the sink.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }

// crashed reports whether err is a panic or a call that never returned:
// failures no caller could handle, as opposed to errors the sink returned.
func crashed(err error) bool {
	var p *panicError
	var o *overstayedError
	return errors.As(err, &p) || errors.As(err, &o)
}

// mark returns how many payloads Received holds now, or 0 without it.
func (h *harness) mark() int {
	if h.cfg.Received == nil {
		return 0
	}
	return len(h.cfg.Received())
}

// expectReceived checks that exactly want arrived after mark, in order.
// A mismatch ends the check: later deliveries would only repeat it.
func (h *harness) expectReceived(t tb, mark int, want [][]byte) {
	t.Helper()
	if h.cfg.Received == nil {
		return
	}
	got := h.waitReceived(mark, func(got [][]byte) bool { return len(got) >= len(want) })
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("payload %d of %d differs from what was delivered:\n got %s\nwant %s", i, len(want), got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the destination received %d payloads after the mark, want %d", len(got), len(want))
	}
}

// expectReceivedLast checks that want arrived after mark and is the last
// thing that arrived. What arrived before it is allowed: a failed attempt
// may have reached the destination before failing (at-least-once).
func (h *harness) expectReceivedLast(t tb, mark int, want [][]byte) {
	t.Helper()
	if h.cfg.Received == nil {
		return
	}
	endsWith := func(got [][]byte) bool {
		return len(got) >= len(want) && slices.EqualFunc(got[len(got)-len(want):], want, bytes.Equal)
	}
	if got := h.waitReceived(mark, endsWith); !endsWith(got) {
		t.Fatalf("after the retry the destination's last %d payloads are not the batch (received %d since the mark)", len(want), len(got))
	}
}

// waitReceived polls Received until done holds for what arrived after mark
// or ReceiveTimeout passes, and returns what arrived after mark.
func (h *harness) waitReceived(mark int, done func([][]byte) bool) [][]byte {
	deadline := time.Now().Add(h.cfg.ReceiveTimeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		all := h.cfg.Received()
		var got [][]byte
		if len(all) > mark {
			got = all[mark:]
		}
		if done(got) || time.Now().After(deadline) {
			return got
		}
		pause(delay)
	}
}

// pause waits d between two polls of a condition that has its own
// deadline.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}
