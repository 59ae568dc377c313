package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumForConsole returns the Chromium executable, failing in CI (where
// `make tools` installs it) and skipping elsewhere when it is missing.
func chromiumForConsole(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: run `make tools`")
	}
	t.Skip("chromium is not installed (make tools installs it); the browser test needs it")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// Start the browser now, so that its start-up is not charged to the
	// first step's deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// browse runs browser steps with a deadline.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	browseValue(t, ctx, what, chromedp.Steps(steps...))
}

// browseValue runs a browser action that returns a value, with a deadline.
func browseValue[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png := browseValue(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return path
}

// TestConsoleInBrowser drives `walcast console` in a real headless
// Chromium against a running pipeline whose receiver rejects one row: the
// page shows the pipeline's real figures (slot, checkpoint, parked events,
// usage), and clicking "replay" on a parked event delivers that row's
// events through the daemon; "pause" and "resume" record the pause. It
// saves screenshots under the test's temp dir (and the one for the docs
// at $WALCAST_CONSOLE_SCREENSHOT when set).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromiumForConsole(t)
	ctx := context.Background()
	dsn, db := newSource(t,
		`CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)`,
		`INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 20) g`,
	)
	rcv := newReceiver(t)
	reject := rcv.rejectRow(`{"id":13}`, http.StatusServiceUnavailable)
	pipeline := writePipeline(t, "console", dsn, []string{"public.orders"},
		sinkSpec{ID: "orders-hook", URL: rcv.URL, Batch: 10, Extra: "    max_attempts = 2\n    retry_base = \"50ms\"\n"})
	proc := startCapturing(t, db, pipeline)
	for _, status := range []string{"paid", "shipped", "delivered"} {
		exec1(t, db, `UPDATE orders SET status = $1`, status)
	}
	parked := func() []string {
		rows, err := db.Query(ctx, `SELECT event_id FROM walcast.parked WHERE pipeline = 'console' ORDER BY commit_lsn, idx`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			rows.Scan(&id)
			ids = append(ids, id)
		}
		return ids
	}
	waitFor(t, "row 13's three events to be parked", time.Minute, func() bool { return len(parked()) == 3 })
	waitFor(t, "the other 57 events", time.Minute, func() bool { return rcv.distinct() == 57 })
	ids := parked()

	// With a token (from the environment), as a console reachable from
	// other machines runs: the browser presents it once, then holds it in
	// the console's cookie.
	const token = "console-test-token"
	url := startConsole(t, []string{"WALCAST_CONSOLE_TOKEN=" + token}, pipeline, "--sample-every", "1s", "--plugin-dir", binDir)
	tab := browser(t, exe)
	status := browseValue(t, tab, "open without the token", func(ctx context.Context, tg *chromedp.Target) (int64, error) {
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(url))
		if err != nil {
			return 0, err
		}
		return resp.Status, nil
	})
	if status != http.StatusUnauthorized {
		t.Fatalf("console without the token answered %d, want 401", status)
	}
	browse(t, tab, "open with the token", chromedp.Navigate(url+"?token="+token), chromedp.WaitVisible(chromedp.CSS("section#p-console")))
	text := func(sel string) string {
		return strings.TrimSpace(browseValue(t, tab, "read "+sel, chromedp.Text(chromedp.CSS(sel))))
	}
	load := func() {
		browse(t, tab, "load the console", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("section#p-console")))
	}

	// The figures on the page are the database's. The daemon flushes
	// checkpoints and usage on its own schedule, so reload until the page
	// and the database agree.
	type figures struct{ checkpoint, usage string }
	fromDB := func() figures {
		var f figures
		var att, del, fail int64
		db.QueryRow(ctx, `SELECT coalesce(event_id, '-') FROM walcast.checkpoints WHERE pipeline = 'console' AND sink = 'orders-hook'`).Scan(&f.checkpoint)
		db.QueryRow(ctx, `SELECT coalesce(sum(attempts), 0), coalesce(sum(delivered), 0), coalesce(sum(failed), 0) FROM walcast.usage
			WHERE pipeline = 'console' AND sink = 'orders-hook' AND hour > now() - interval '24 hours'`).Scan(&att, &del, &fail)
		f.usage = fmt.Sprintf("%d / %d / %d", att, del, fail)
		return f
	}
	var page, db1 figures
	waitFor(t, "the page to show the database's figures", time.Minute, func() bool {
		load()
		page = figures{
			checkpoint: text(`tr[data-sink="orders-hook"] .sink-checkpoint`),
			usage: text(`tr[data-sink="orders-hook"] .usage-attempts`) + " / " + text(`tr[data-sink="orders-hook"] .usage-delivered`) +
				" / " + text(`tr[data-sink="orders-hook"] .usage-failed`),
		}
		db1 = fromDB()
		return page == db1 && page.usage != "0 / 0 / 0"
	})
	if got := text(`tr[data-sink="orders-hook"] .sink-parked`); got != "3" {
		t.Errorf("parked count on the page: %q, want 3", got)
	}
	// Everything was delivered or parked: the streaming daemon reports
	// an empty backlog.
	waitFor(t, "the page to show the daemon's backlog report", time.Minute, func() bool {
		load()
		return text(`tr[data-sink="orders-hook"] .sink-undelivered`) == "0"
	})
	if got := text(".slot-state"); !strings.Contains(got, "active") || strings.Contains(got, "inactive") {
		t.Errorf("slot state on the page: %q, want active", got)
	}
	if got := text(".slot-name"); got != "walcast_console" {
		t.Errorf("slot on the page: %q", got)
	}
	shown := browseValue(t, tab, "list parked events", chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("tr.parked-event")).map(r => r.dataset.event).sort()`))
	if strings.Join(shown, " ") != strings.Join(sortedIDs(ids), " ") {
		t.Errorf("parked events on the page %v, in the database %v", shown, ids)
	}
	if got := text(`tr.parked-event[data-event="` + ids[0] + `"] .error`); !strings.Contains(got, "503") {
		t.Errorf("last error on the page: %q, want the receiver's 503", got)
	}
	payload := browseValue(t, tab, "read a payload", chromedp.TextContent(chromedp.CSS(`tr.parked-event[data-event="`+ids[0]+`"] pre`)))
	if !strings.Contains(payload, `"id": "`+ids[0]+`"`) || !strings.Contains(payload, `"status"`) {
		t.Errorf("payload on the page:\n%s", payload)
	}
	// Wait for a few lag samples, so the lag chart has a line.
	waitFor(t, "lag samples", time.Minute, func() bool {
		load()
		n := browseValue(t, tab, "count lag points", chromedp.Evaluate[int](
			`(document.querySelector("polyline.lag")?.getAttribute("points") || "").split(" ").filter(Boolean).length`))
		return n >= 3
	})
	before := screenshot(t, tab, "console-parked.png")
	if dst := os.Getenv("WALCAST_CONSOLE_SCREENSHOT"); dst != "" {
		b, _ := os.ReadFile(before)
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Replay the row from its oldest parked event, by clicking.
	reject.Store(false)
	browse(t, tab, "click replay", chromedp.Click(chromedp.CSS(`button.replay[data-event="`+ids[0]+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notes li")))
	if note := text(".notes li"); !strings.Contains(note, "replay "+ids[0]+" of sink orders-hook") || !strings.Contains(note, "asked the running daemon") {
		t.Errorf("note after replay: %q", note)
	}
	waitFor(t, "row 13's events at the receiver", time.Minute, func() bool {
		n := 0
		for _, e := range rcv.events() {
			if e.Key == `{"id":13}` {
				n++
			}
		}
		return n == 3
	})
	waitFor(t, "walcast.parked to empty", time.Minute, func() bool { return len(parked()) == 0 })
	load()
	if got := text(`tr[data-sink="orders-hook"] .sink-parked`); got != "0" {
		t.Errorf("parked count after replay: %q", got)
	}
	screenshot(t, tab, "console-replayed.png")

	// Pause and resume the sink.
	paused := func() bool {
		var n int
		db.QueryRow(ctx, `SELECT count(*) FROM walcast.pauses WHERE pipeline = 'console' AND sink = 'orders-hook'`).Scan(&n)
		return n == 1
	}
	browse(t, tab, "click pause", chromedp.Click(chromedp.CSS(`button.pause[data-sink="orders-hook"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.resume[data-sink="orders-hook"]`)))
	if !paused() {
		t.Error("after clicking pause, walcast.pauses has no row for the sink")
	}
	browse(t, tab, "click resume", chromedp.Click(chromedp.CSS(`button.resume[data-sink="orders-hook"]`)),
		chromedp.WaitVisible(chromedp.CSS(`button.pause[data-sink="orders-hook"]`)))
	if paused() {
		t.Error("after clicking resume, the sink is still paused")
	}
	exec1(t, db, `UPDATE orders SET status = 'returned' WHERE id = 13`)
	waitFor(t, "row 13's next change", time.Minute, func() bool { return rcv.distinct() == 61 })
	proc.stop()
}

func sortedIDs(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out) // as the page's JavaScript sort(): by string
	return out
}

// TestConsoleNeedsTokenBeyondLoopback: listening on every interface or
// another address without a token is a usage error.
func TestConsoleNeedsTokenBeyondLoopback(t *testing.T) {
	pipeline := writePipeline(t, "consoletoken", "postgres://walcast@db.example/shop", []string{"public.orders"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/"})
	for _, listen := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		_, stderr, code := walcastEnvCmd(t, []string{"WALCAST_CONSOLE_TOKEN="}, "console", pipeline, "--listen", listen)
		if code != 2 || !strings.Contains(stderr, "set a token with --token or $WALCAST_CONSOLE_TOKEN") {
			t.Errorf("console --listen %s without a token: exit %d, stderr %q", listen, code, stderr)
		}
	}
	if _, stderr, code := walcastCmd(t, "console"); code != 2 || !strings.Contains(stderr, "want one or more PIPELINE.hcl arguments") {
		t.Errorf("console without a pipeline: exit %d, stderr %q", code, stderr)
	}
}
