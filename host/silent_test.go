package host_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// logBuffer collects a stream's log for the test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// withSessionOptions adds server settings for every session of dsn.
func withSessionOptions(t *testing.T, dsn, options string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	// %20, not +: libpq-style URLs do not read + as a space.
	u.RawQuery += "options=" + strings.ReplaceAll(url.QueryEscape(options), "+", "%20")
	return u.String()
}

// consume reads s in the background, acking each event; ids reports the
// distinct ids read so far.
func consume(t *testing.T, s *host.Stream) (ids func() map[cdc.EventID]bool) {
	t.Helper()
	var mu sync.Mutex
	seen := map[cdc.EventID]bool{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := s.Next(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			seen[ev.ID] = true
			mu.Unlock()
			if err := s.Ack(ev.ID); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() map[cdc.EventID]bool {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[cdc.EventID]bool, len(seen))
		for k := range seen {
			out[k] = true
		}
		return out
	}
}

// TestProxySilentLibraryStream: in library mode, a replication connection
// that goes silent (the proxy drops its flow, telling neither end) is
// ended after the receive timeout (by default twice wal_sender_timeout:
// 2 s for this stream's sessions) and reconnected, with a warning, and
// the changes committed meanwhile all arrive, each once, as the table
// holds them.
func TestProxySilentLibraryStream(t *testing.T) {
	direct, db := setup(t)
	proxy := cluster.Proxy(t)
	var log logBuffer
	slot := slotName("silent")
	s := openConfig(t, host.StreamConfig{DSN: withSessionOptions(t, proxy.DSN(direct), "-c wal_sender_timeout=2s"),
		Tables: []string{"public.items"}, Slot: slot, Logger: log.logger()})
	ids := consume(t, s)
	const timeout = 4 * time.Second
	next := 1
	insert := func(n int) {
		execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series($1::int, $2::int) g`, next, next+n-1)
		next += n
	}
	rounds := pgtest.Chaos(t, 2)
	// Replication connections before the first silence: the stream's, and
	// whatever Open used to check the role first.
	opened := 0
	for round := 1; round <= rounds; round++ {
		insert(20)
		waitFor(t, "the stream to deliver before the silence", time.Minute, func() bool { return len(ids()) == next-1 })
		if round == 1 {
			opened = proxy.Replication()
		}
		if n := proxy.SilenceReplication(); n != 1 {
			t.Fatalf("round %d: silenced %d replication connections, want 1", round, n)
		}
		silenced := time.Now()
		for range 10 {
			insert(5) // ten transactions while the connection is silent
		}
		deadline := silenced.Add(2 * time.Minute)
		for len(ids()) < next-1 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: of %d changes, the last 50 committed while the replication connection was silent, only %d arrived within 2m", round, next-1, len(ids()))
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(silenced)
		if got := s.ReceiveTimeouts(); got != uint64(round) {
			t.Fatalf("round %d: ReceiveTimeouts = %d, want %d\n%s", round, got, round, log.String())
		}
		if took < timeout-time.Second || took > timeout+30*time.Second {
			t.Errorf("round %d: the changes committed during the silence arrived %s after it began, want about %s", round, took, timeout)
		}
		t.Logf("round %d: everything arrived %s after the connection went silent", round, took.Round(time.Millisecond))
	}
	if n := strings.Count(log.String(), "replication stream silent for the receive timeout"); n != rounds {
		t.Errorf("logged %d silent streams, want %d:\n%s", n, rounds, log.String())
	}
	if got := proxy.Replication() - opened; got != rounds {
		t.Errorf("%d replication connections through the proxy after the first silence, want %d (one reconnect per silence)", got, rounds)
	}
	var rows int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if got := len(ids()); got != rows {
		t.Fatalf("the consumer read %d distinct changes; the table holds %d rows (every one inserted once)", got, rows)
	}
}

// TestSilentLibraryStreamIdleIsNotCut: an idle, healthy library stream is
// never ended, with a receive timeout of 2 s and a server that sends no
// keepalive of its own (wal_sender_timeout = 0): the stream asks for
// them. Its only WAL is the position walcast records every 10 s, so a
// stream that did not ask would be silent for longer than the timeout.
func TestSilentLibraryStreamIdleIsNotCut(t *testing.T) {
	direct, db := setup(t)
	proxy := cluster.Proxy(t)
	var log logBuffer
	slot := slotName("idle_silent")
	s := openConfig(t, host.StreamConfig{DSN: withSessionOptions(t, proxy.DSN(direct), "-c wal_sender_timeout=0"),
		Tables: []string{"public.items"}, Slot: slot, Logger: log.logger(), ReceiveTimeout: 2 * time.Second})
	ids := consume(t, s)
	execT(t, db, `INSERT INTO items VALUES (1, 'x')`)
	waitFor(t, "the first change", time.Minute, func() bool { return len(ids()) == 1 })
	opened := proxy.Replication() // the stream's, and Open's check of the role
	if !strings.Contains(log.String(), "receive_timeout=2s") {
		t.Fatalf("StreamConfig.ReceiveTimeout not used:\n%s", log.String())
	}
	idle := time.Duration(pgtest.Chaos(t, 6)) * 2 * time.Second
	for end := time.Now().Add(idle); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if s.ReceiveTimeouts() != 0 {
			t.Fatalf("an idle, healthy stream was ended:\n%s", log.String())
		}
	}
	execT(t, db, `INSERT INTO items VALUES (2, 'x')`)
	waitFor(t, "a change after the idle time", time.Minute, func() bool { return len(ids()) == 2 })
	if got := proxy.Replication() - opened; got != 0 || s.ReceiveTimeouts() != 0 {
		t.Fatalf("%d replication connections opened and %d receive timeouts over %s of idle time, want 0 and 0:\n%s", got, s.ReceiveTimeouts(), idle, log.String())
	}
	t.Logf("idle for %s with receive_timeout 2s and wal_sender_timeout 0: one connection", idle)
}

// TestReceiveTimeoutDefault: without StreamConfig.ReceiveTimeout the
// stream ends a silent connection after twice the server's
// wal_sender_timeout, or after 2 minutes when that is 0 (off); one set
// below wal_sender_timeout is warned about; one below 1s is refused.
func TestReceiveTimeoutDefault(t *testing.T) {
	direct, _ := setup(t)
	for sender, want := range map[string]string{"3s": "6s", "0": "2m0s"} {
		var log logBuffer
		s := openConfig(t, host.StreamConfig{DSN: withSessionOptions(t, direct, "-c wal_sender_timeout="+sender),
			Tables: []string{"public.items"}, Slot: slotName("timeout_default"), Logger: log.logger()})
		waitFor(t, "the stream to start", time.Minute, func() bool { return strings.Contains(log.String(), "streaming from slot") })
		if !strings.Contains(log.String(), "receive_timeout="+want) {
			t.Errorf("wal_sender_timeout %s: want receive_timeout=%s in\n%s", sender, want, log.String())
		}
		s.Close(context.Background())
	}
	// A receive timeout below wal_sender_timeout is kept, with a warning.
	var log logBuffer
	s := openConfig(t, host.StreamConfig{DSN: withSessionOptions(t, direct, "-c wal_sender_timeout=3s"),
		Tables: []string{"public.items"}, Slot: slotName("timeout_short"), Logger: log.logger(), ReceiveTimeout: 2 * time.Second})
	waitFor(t, "the stream to start", time.Minute, func() bool { return strings.Contains(log.String(), "streaming from slot") })
	if !strings.Contains(log.String(), "receive_timeout=2s") || !strings.Contains(log.String(), "receive_timeout is shorter than the server's wal_sender_timeout") {
		t.Errorf("ReceiveTimeout 2s with wal_sender_timeout 3s: want it used, with a warning:\n%s", log.String())
	}
	s.Close(context.Background())
	_, err := host.Open(context.Background(), host.StreamConfig{DSN: direct, Tables: []string{"public.items"}, Slot: "x", ReceiveTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "ReceiveTimeout is 500ms; set at least 1s") {
		t.Errorf("Open with ReceiveTimeout 500ms: %v", err)
	}
}

// TestSlowLargeMessageIsNotSilence: a change larger than what the link
// carries within the receive timeout is still being heard from while its
// bytes flow. The proxy passes one 32 KiB chunk every 40 ms, so a 3 MB
// row takes about 4 s to arrive whole, twice the 2 s receive timeout
// (and the server, with wal_sender_timeout = 0, sends nothing unasked).
// Counting only whole messages, the stream was ended mid-row every 2 s
// and the row started again from the beginning on the next stream: it
// never arrived.
func TestSlowLargeMessageIsNotSilence(t *testing.T) {
	direct, db := setup(t)
	proxy := cluster.Proxy(t)
	var log logBuffer
	s := openConfig(t, host.StreamConfig{DSN: withSessionOptions(t, proxy.DSN(direct), "-c wal_sender_timeout=0"),
		Tables: []string{"public.items"}, Slot: slotName("slow_large"), Logger: log.logger(), ReceiveTimeout: 2 * time.Second})
	ids := consume(t, s)
	execT(t, db, `INSERT INTO items VALUES (1, 'small')`)
	waitFor(t, "the first change", time.Minute, func() bool { return len(ids()) == 1 })
	// md5 text does not compress: the row is sent as 3 MB.
	execT(t, db, `ALTER TABLE items ALTER COLUMN v SET STORAGE EXTERNAL`)
	proxy.Delay(40 * time.Millisecond)
	started := time.Now()
	execT(t, db, `INSERT INTO items SELECT 2, string_agg(md5(g::text), '') FROM generate_series(1, 100000) g`)
	waitFor(t, "the 3 MB row through the slow link", 2*time.Minute, func() bool { return len(ids()) == 2 })
	t.Logf("the 3 MB row arrived %s after its commit", time.Since(started).Round(time.Millisecond))
	if n := s.ReceiveTimeouts(); n != 0 {
		t.Fatalf("the stream was ended %d times while the row's bytes flowed:\n%s", n, log.String())
	}
}
