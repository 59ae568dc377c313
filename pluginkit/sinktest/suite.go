package sinktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

var (
	// attrNameRE is an HCL identifier as the host's config decoding
	// accepts it (ASCII subset).
	attrNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
)

// testInfo checks that Info works on a fresh sink without blocking and
// declares a config the host can check Config against.
func (h *harness) testInfo(t tb) {
	s := h.newSink(t)
	info, err := within(promptly, func() (pluginkit.Info, error) { return s.Info(), nil })
	if err != nil {
		t.Fatalf("Info before Configure: %v (it must not block: `walcast validate` calls it without opening anything)", err)
	}
	if !pluginkit.ValidTypeName(info.Name) {
		t.Errorf("Info.Name = %q, want a plugin type: lower-case letters, digits, '_' and '-', starting with a letter or digit (the executable is walcast-sink-<name>; see pluginkit.ValidTypeName)", info.Name)
	}
	if info.Version == "" {
		t.Error("Info.Version is empty; pluginkit.BuildVersion() gives the module version")
	}
	again, err := within(promptly, func() (pluginkit.Info, error) { return s.Info(), nil })
	if err == nil && !reflect.DeepEqual(info, again) {
		t.Errorf("Info changed between two calls:\n%+v\n%+v", info, again)
	}

	declared := make(map[string]pluginkit.ConfigField, len(info.Config))
	for i, f := range info.Config {
		if !attrNameRE.MatchString(f.Name) {
			t.Errorf("Info.Config[%d].Name = %q, want an HCL attribute name", i, f.Name)
		}
		if _, dup := declared[f.Name]; dup {
			t.Errorf("Info.Config declares %q twice", f.Name)
		}
		declared[f.Name] = f
		if !knownType(f.Type) {
			t.Errorf("Info.Config[%d] (%s) has type %q; the host knows only the pluginkit.Type* constants", i, f.Name, f.Type)
		}
		if strings.TrimSpace(f.Doc) == "" {
			t.Errorf("Info.Config[%d] (%s) has no Doc; users read it in error messages and docs", i, f.Name)
		}
	}
	h.checkValidConfig(t, declared)
}

func knownType(ft pluginkit.FieldType) bool {
	switch ft {
	case pluginkit.TypeString, pluginkit.TypeNumber, pluginkit.TypeBool,
		pluginkit.TypeStringList, pluginkit.TypeStringMap, pluginkit.TypeDuration:
		return true
	}
	return false
}

// checkValidConfig checks that Config is something the host could send:
// declared attributes only, each of its declared type, every required one
// present. A test config the host would reject tests nothing real.
func (h *harness) checkValidConfig(t tb, declared map[string]pluginkit.ConfigField) {
	t.Helper()
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(h.cfg.Config, &attrs); err != nil || attrs == nil {
		t.Errorf("sinktest.Config.Config is not a JSON object: %s", h.cfg.Config)
		return
	}
	for name, raw := range attrs {
		f, ok := declared[name]
		if !ok {
			t.Errorf("sinktest.Config.Config sets %q, which Info does not declare (the host rejects undeclared attributes)", name)
			continue
		}
		if err := checkType(f.Type, raw); err != nil {
			t.Errorf("sinktest.Config.Config: %s: %v", name, err)
		}
	}
	for name, f := range declared {
		if _, ok := attrs[name]; f.Required && !ok {
			t.Errorf("sinktest.Config.Config lacks the required attribute %q", name)
		}
	}
}

// checkType checks raw against the JSON the host produces for a field of
// type ft.
func checkType(ft pluginkit.FieldType, raw json.RawMessage) error {
	var err error
	switch ft {
	case pluginkit.TypeString:
		var v string
		err = json.Unmarshal(raw, &v)
	case pluginkit.TypeNumber:
		var v json.Number
		err = json.Unmarshal(raw, &v)
	case pluginkit.TypeBool:
		var v bool
		err = json.Unmarshal(raw, &v)
	case pluginkit.TypeStringList:
		var v []string
		err = json.Unmarshal(raw, &v)
	case pluginkit.TypeStringMap:
		var v map[string]string
		err = json.Unmarshal(raw, &v)
	case pluginkit.TypeDuration:
		var v string
		if err = json.Unmarshal(raw, &v); err == nil {
			_, err = time.ParseDuration(v)
		}
	default:
		return nil // reported by testInfo
	}
	if err != nil {
		return fmt.Errorf("%s is not a valid %s: %w", raw, ft, err)
	}
	return nil
}

// testConfigure checks that Configure accepts Config and rejects each bad
// block with a ConfigError naming the attribute, since that is what the
// host turns into a FILE:LINE:COL diagnostic.
func (h *harness) testConfigure(t tb) {
	t.Run("Valid", func(t tb) { h.configured(t) })
	for _, ic := range h.cfg.InvalidConfigs {
		t.Run("Invalid/"+ic.Name, func(t tb) {
			h.expectConfigError(t, ic.Config, ic.Field)
		})
	}

	info := h.newSink(t).Info()
	var attrs map[string]json.RawMessage
	if err := json.Unmarshal(h.cfg.Config, &attrs); err != nil {
		return // reported by Info
	}
	for _, f := range info.Config {
		if !f.Required {
			continue
		}
		t.Run("MissingRequired/"+f.Name, func(t tb) {
			// The host checks required attributes first, but a sink's
			// Configure is the last line: an older host, library use and
			// tests call it directly.
			rest := make(map[string]json.RawMessage, len(attrs))
			for k, v := range attrs {
				if k != f.Name {
					rest[k] = v
				}
			}
			raw, err := json.Marshal(rest)
			if err != nil {
				t.Fatalf("encode config without %s: %v", f.Name, err)
			}
			h.expectConfigError(t, raw, f.Name)
		})
	}
}

func (h *harness) expectConfigError(t tb, raw json.RawMessage, field string) {
	t.Helper()
	s := h.newSink(t)
	c := ctx(t)
	err := call(callTimeout, func() error { return s.Configure(c, h.setup(raw)) })
	var ce *pluginkit.ConfigError
	switch {
	case err == nil:
		t.Errorf("Configure(%s) succeeded, want a *pluginkit.ConfigError for %q", raw, field)
	case !errors.As(err, &ce):
		t.Errorf("Configure(%s) = %v (%T), want a *pluginkit.ConfigError for %q", raw, err, err, field)
	case ce.Field != field:
		t.Errorf("Configure(%s) = %v: names field %q, want %q", raw, err, ce.Field, field)
	case strings.TrimSpace(ce.Msg) == "":
		t.Errorf("Configure(%s) returned a ConfigError for %q without a message", raw, field)
	}
}

// testDeliverBatches delivers batches of several sizes on one sink and
// checks that each arrived whole, unchanged and in order.
func (h *harness) testDeliverBatches(t tb) {
	s := h.open(t)
	var batch []pluginkit.Event
	for _, n := range []int{1, 3, 10, 100, 2} {
		batch = h.gen.next(n)
		mark := h.mark()
		h.deliver(t, s, batch)
		h.expectReceived(t, mark, payloads(batch))
	}
	h.run(t, "Replay", func(t tb) {
		// A replay brings parked events back, which lie at or below any
		// checkpoint the sink keeps (here, the batch just delivered):
		// they must be written again, and are no duplicates.
		mark := h.mark()
		h.deliverBatch(t, s, pluginkit.Batch{Events: batch, Replay: true})
		h.expectReceived(t, mark, payloads(batch))
	})
}

// testDeliverConcurrent delivers the batches of several rows at once, as
// the host does with max_in_flight > 1, and checks that each row's changes
// arrived once and in order.
func (h *harness) testDeliverConcurrent(t tb) {
	s := h.open(t)
	if s.Info().Ordered {
		t.Skip("Info.Ordered: the host never calls Deliver concurrently")
	}
	const lanes, batches, perBatch = 4, 4, 3
	work := make([][][]pluginkit.Event, lanes) // lane → batches
	var all [][]byte
	laneOf := make(map[string]int)
	for range batches {
		for l := range lanes {
			b := h.gen.row(l%len(relations), 1000+l, perBatch)
			work[l] = append(work[l], b)
			for _, p := range payloads(b) {
				all = append(all, p)
				laneOf[string(p)] = l
			}
		}
	}

	mark := h.mark()
	c := ctx(t)
	errs := make(chan error, lanes)
	var wg sync.WaitGroup
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range work[l] {
				res, err := deliverWithin(c, s, b, callTimeout)
				if err != nil {
					errs <- fmt.Errorf("lane %d: Deliver %s..%s: %w", l, b[0].ID, b[len(b)-1].ID, err)
					return
				}
				if res.Duplicates != 0 {
					errs <- fmt.Errorf("lane %d: Deliver of new events reported %d duplicates", l, res.Duplicates)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() || h.cfg.Received == nil {
		return
	}

	got := h.waitReceived(mark, func(got [][]byte) bool { return len(got) >= len(all) })
	seen := make(map[string]bool, len(got))
	last := make([]int, lanes) // position in all of each lane's last payload seen
	for i := range last {
		last[i] = -1
	}
	pos := make(map[string]int, len(all))
	for i, p := range all {
		pos[string(p)] = i
	}
	for _, p := range got {
		l, ok := laneOf[string(p)]
		switch {
		case !ok:
			t.Errorf("the destination received a payload that was not delivered: %s", p)
			continue
		case seen[string(p)]:
			t.Errorf("the destination received a payload twice: %s", p)
			continue
		}
		seen[string(p)] = true
		if pos[string(p)] < last[l] {
			t.Errorf("row %d: changes arrived out of commit order at %s", l, p)
		}
		last[l] = pos[string(p)]
	}
	if len(seen) != len(all) {
		t.Errorf("the destination received %d of %d payloads delivered concurrently", len(seen), len(all))
	}
}

// testDeliverContextDone calls Deliver with a context that has already
// ended. The sink must return promptly; an error must not be permanent (the
// host retries a Deliver it cancelled), and a success must mean the batch
// arrived.
func (h *harness) testDeliverContextDone(t tb) {
	s := h.open(t)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"cancelled", cancelled}, {"expired", expired}} {
		batch := h.gen.next(3)
		mark := h.mark()
		_, err := deliverWithin(tc.ctx, s, batch, promptly)
		switch {
		case crashed(err):
			t.Fatalf("Deliver with a %s context: %v; it must return promptly once its context is done", tc.name, err)
		case err != nil:
			h.checkDeliverError(t, err, "Deliver with a "+tc.name+" context")
			if kind, _ := pluginkit.KindOf(err); kind == pluginkit.KindPermanent {
				t.Errorf("Deliver with a %s context returned a permanent error (%v): the events would be parked although the destination never refused them", tc.name, err)
			}
		default:
			// Finishing fast local work is fine, but then it was done.
			h.expectReceived(t, mark, payloads(batch))
		}
	}

	// The sink is still usable after giving up.
	batch := h.gen.next(2)
	mark := h.mark()
	h.deliver(t, s, batch)
	h.expectReceivedLast(t, mark, payloads(batch))
}

// testDeliverHang makes the destination hang and checks that Deliver gives
// up when its context's deadline passes, then recovers.
func (h *harness) testDeliverHang(t tb) {
	if h.cfg.Hang == nil {
		t.Skip("sinktest.Config.Hang is not set")
	}
	s := h.open(t)
	// The mark is taken first: a destination in trouble may not be
	// readable.
	batch := h.gen.next(3)
	mark := h.mark()
	release := sync.OnceFunc(h.cfg.Hang())
	t.Cleanup(release)

	c, cancel := context.WithTimeout(t.Context(), hangDeadline)
	defer cancel()
	start := time.Now()
	_, err := deliverWithin(c, s, batch, hangDeadline+promptly)
	switch {
	case crashed(err):
		t.Fatalf("Deliver to a hanging destination with a %s deadline: %v", hangDeadline, err)
	case err == nil:
		t.Fatalf("Deliver to a hanging destination succeeded after %s", time.Since(start).Round(time.Millisecond))
	}
	h.checkDeliverError(t, err, "Deliver to a hanging destination")
	if kind, _ := pluginkit.KindOf(err); kind == pluginkit.KindPermanent {
		t.Errorf("Deliver to a hanging destination returned a permanent error (%v); a timeout is worth retrying", err)
	}

	release()
	h.redeliver(t, s, batch, mark)
}

// testDeliverFaults makes the destination fail in each configured way and
// checks the kind of the error Deliver returns, then that the same batch
// delivers once the fault is gone.
func (h *harness) testDeliverFaults(t tb) {
	if len(h.cfg.Faults) == 0 && len(h.cfg.EventFaults) == 0 {
		t.Skip("sinktest.Config.Faults and EventFaults are empty")
	}
	h.testDeliverEventFaults(t)
	for _, f := range h.cfg.Faults {
		t.Run(f.Name, func(t tb) {
			s := h.open(t)
			batch := h.gen.next(4)
			mark := h.mark() // before the fault: a failing destination may not be readable
			restore := sync.OnceFunc(f.Inject())
			t.Cleanup(restore)

			c := ctx(t)
			_, err := deliverWithin(c, s, batch, callTimeout)
			if err == nil {
				t.Fatalf("Deliver succeeded while the destination fails (%s)", f.Name)
			}
			kind, after := h.checkDeliverError(t, err, "Deliver to a failing destination")
			if kind != f.Want {
				t.Errorf("Deliver error %q is %s, want %s", err, kind, f.Want)
			}
			if f.Want == pluginkit.KindThrottled && f.RetryAfter != 0 && after != f.RetryAfter {
				t.Errorf("Deliver error %q asks for a pause of %s, want %s", err, after, f.RetryAfter)
			}

			restore()
			h.redeliver(t, s, batch, mark)
		})
	}
}

// redeliver delivers batch again after a failed attempt, as the host does,
// and checks it is now the last thing the destination received.
func (h *harness) redeliver(t tb, s pluginkit.BatchSink, batch []pluginkit.Event, mark int) {
	t.Helper()
	c := ctx(t)
	res, err := deliverWithin(c, s, batch, callTimeout)
	if err != nil {
		t.Fatalf("Deliver of the same batch after the failure cleared: %v", err)
	}
	if res.Duplicates < 0 || res.Duplicates > len(batch) {
		t.Errorf("Deliver reported %d duplicates in a batch of %d", res.Duplicates, len(batch))
	}
	h.expectReceivedLast(t, mark, payloads(batch))
}

// checkDeliverError checks what any error out of Deliver must satisfy and
// returns its classification.
func (h *harness) checkDeliverError(t tb, err error, what string) (pluginkit.Kind, time.Duration) {
	t.Helper()
	if crashed(err) {
		t.Fatalf("%s: %v", what, err)
	}
	var ce *pluginkit.ConfigError
	if errors.As(err, &ce) {
		t.Errorf("%s returned a *pluginkit.ConfigError (%v); config errors belong in Configure, where the host can point at the HCL line", what, err)
	}
	if strings.TrimSpace(err.Error()) == "" {
		t.Errorf("%s returned an error with an empty message; it ends up in walcast.parked and in the logs", what)
	}
	var be *pluginkit.BatchError
	if errors.As(err, &be) {
		h.checkBatchError(t, be, what)
	}
	kind, after := pluginkit.KindOf(err)
	switch kind {
	case pluginkit.KindRetryable, pluginkit.KindPermanent, pluginkit.KindFatal:
	case pluginkit.KindThrottled:
		if after < 0 {
			t.Errorf("%s returned a throttle with a negative pause %s", what, after)
		}
	default:
		t.Errorf("%s returned an error of unknown kind %d", what, kind)
	}
	return kind, after
}

// checkBatchError checks what every BatchError must satisfy, whatever
// the batch: each named event has an error with a message, of a kind a
// single event can have. (Whether the indexes lie inside the batch is
// checked where the batch is known.)
func (h *harness) checkBatchError(t tb, be *pluginkit.BatchError, what string) {
	t.Helper()
	if h.cfg.NewBatch == nil {
		t.Errorf("%s: a Sink returned a *pluginkit.BatchError; only a BatchSink can name the events that failed (a Sink fails its batch as a whole)", what)
	}
	for i, err := range be.Failed {
		switch {
		case err == nil:
			t.Errorf("%s: the BatchError names event %d with a nil error", what, i)
		case strings.TrimSpace(err.Error()) == "":
			t.Errorf("%s: the BatchError names event %d with an empty message; it ends up in walcast.parked", what, i)
		}
	}
}

// testDeliverEventFaults spoils one event of a batch in each configured
// way and checks that a BatchError names that event alone, with the
// kind the fault calls for, and that the other events arrived. Each is a
// check under Deliver/Faults.
func (h *harness) testDeliverEventFaults(t tb) {
	if len(h.cfg.EventFaults) == 0 {
		return
	}
	if h.cfg.NewBatch == nil {
		t.Fatal("sinktest.Config.EventFaults needs a BatchSink (Config.NewBatch): a Sink cannot name the events that failed")
	}
	const size, spoilt = 5, 2
	for _, f := range h.cfg.EventFaults {
		t.Run(f.Name, func(t tb) {
			s := h.open(t)
			batch := h.gen.next(size)
			good := payloads(append(slices.Clone(batch[:spoilt]), batch[spoilt+1:]...))
			batch[spoilt] = f.Spoil(batch[spoilt])
			mark := h.mark()
			c := ctx(t)
			_, err := deliverWithin(c, s, batch, callTimeout)
			var be *pluginkit.BatchError
			if !errors.As(err, &be) {
				t.Fatalf("Deliver of a batch whose event %d the destination refuses: %v, want a *pluginkit.BatchError naming that event", spoilt, err)
			}
			h.checkBatchError(t, be, "Deliver of a batch with a refused event")
			if len(be.Failed) != 1 || be.Failed[spoilt] == nil {
				t.Fatalf("the BatchError names %d events, want event %d alone: %v", len(be.Failed), spoilt, be)
			}
			if kind, _ := pluginkit.KindOf(be.Failed[spoilt]); kind != f.Want {
				t.Errorf("the refused event's error %q is %s, want %s", be.Failed[spoilt], kind, f.Want)
			}
			h.expectReceived(t, mark, good)
		})
	}
}

// testDeliverBeforeOpen calls Deliver on a sink that was configured but
// not opened: the host never does, but a crash of the sink here would take
// the plugin process down, so it must answer. Succeeding is allowed only if
// the batch then arrived.
func (h *harness) testDeliverBeforeOpen(t tb) {
	s := h.configured(t)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		_ = call(callTimeout, func() error { return s.Close(c) }) // checked by Close/WithoutOpen
	})
	batch := h.gen.next(2)
	mark := h.mark()
	c := ctx(t)
	_, err := deliverWithin(c, s, batch, callTimeout)
	switch {
	case crashed(err):
		t.Fatalf("Deliver before Open: %v", err)
	case err != nil:
		h.checkDeliverError(t, err, "Deliver before Open")
	default:
		h.expectReceived(t, mark, payloads(batch))
	}
}

// testClose checks Close in the states the host may leave a sink in.
func (h *harness) testClose(t tb) {
	closeOnce := func(t tb, s pluginkit.BatchSink) error {
		t.Helper()
		c := ctx(t)
		err := call(callTimeout, func() error { return s.Close(c) })
		if crashed(err) {
			t.Fatalf("Close: %v", err)
		}
		return err
	}
	t.Run("AfterOpen", func(t tb) {
		s := h.configured(t)
		c := ctx(t)
		if _, err := within(callTimeout, func() (pluginkit.OpenResult, error) { return s.Open(c) }); err != nil {
			t.Fatalf("Open: %v", err)
		}
		h.deliver(t, s, h.gen.next(2))
		if err := closeOnce(t, s); err != nil {
			t.Errorf("Close after Open: %v", err)
		}
		// A second Close may report an error but must not crash: Serve
		// closes an opened sink itself when the host goes away, and the
		// host may have sent Close already.
		_ = closeOnce(t, s)
	})
	t.Run("WithoutOpen", func(t tb) {
		// The host closes a sink whose Open failed.
		_ = closeOnce(t, h.configured(t))
	})
	t.Run("WithoutConfigure", func(t tb) {
		_ = closeOnce(t, h.newSink(t))
	})
}

// testGoroutineLeaks runs one more full lifecycle and then checks that no
// goroutine started since Run began is still running: a plugin lives as
// long as the pipeline, and the host restarts it after crashes, so a leak
// per connection or per batch adds up.
func (h *harness) testGoroutineLeaks(t tb) {
	s := h.configured(t)
	c := ctx(t)
	if _, err := within(callTimeout, func() (pluginkit.OpenResult, error) { return s.Open(c) }); err != nil {
		t.Fatalf("Open: %v", err)
	}
	h.deliver(t, s, h.gen.next(5))
	if err := call(callTimeout, func() error { return s.Close(c) }); err != nil {
		t.Errorf("Close: %v", err)
	}
	if left := settle(h.baseline, settleTimeout); len(left) > 0 {
		const show = 5
		t.Errorf("%d goroutines started during the suite are still running %s after the last Close; the first ones:\n\n%s",
			len(left), settleTimeout, strings.Join(left[:min(show, len(left))], "\n\n"))
	}
}
