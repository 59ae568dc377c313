package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/host/pgtest"
)

// The redis sink end to end: walcast, the plugin and a real redis-server,
// read back with Debian's redis-cli.

const redisItems = "walcast:public.items"

// redisConfig is the config block body of a redis sink.
func redisConfig(addr string, extra ...string) string {
	s := fmt.Sprintf("    address = %q\n    timeout = \"5s\"\n", addr)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

// redisLen is XLEN of stream through a client of the test's own; 0 while
// the server is down or the stream missing. Progress only.
func redisLen(c *redis.Client, stream string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, _ := c.XLen(ctx, stream).Result()
	return int(n)
}

// readRedisStream reads stream with redis-cli (XRANGE, JSON output) and
// returns its entries as received events, in stream order, checking that
// each entry's id, op, table and key fields agree with its envelope.
func readRedisStream(t testing.TB, srv *serverProc, stream string) []received {
	t.Helper()
	var entries [][2]json.RawMessage
	out := redisCLI(t, srv, "-2", "--json", "XRANGE", stream, "-", "+")
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("redis-cli XRANGE %s: %v: %.300s", stream, err, out)
	}
	got := make([]received, 0, len(entries))
	for _, e := range entries {
		var kv []string
		if err := json.Unmarshal(e[1], &kv); err != nil || len(kv)%2 != 0 {
			t.Fatalf("entry %s: fields %s", e[0], e[1])
		}
		f := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			f[kv[i]] = kv[i+1]
		}
		env, err := decodeEnvelope([]byte(f["event"]))
		if err != nil {
			t.Fatalf("entry %s: event is not an envelope: %v", e[0], err)
		}
		r, err := env.received([]byte(f["event"]))
		if err != nil {
			t.Fatal(err)
		}
		if f["id"] != env.ID || f["op"] != env.Op || f["table"] != env.Schema+"."+env.Table || compactKey(f["key"]) != r.Key {
			t.Fatalf("entry %s: fields %v disagree with the envelope", e[0], f)
		}
		got = append(got, r)
	}
	return got
}

// compactKey is a key's JSON without insignificant white space.
func compactKey(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

var (
	redisConnected = regexp.MustCompile(`msg="redis connected".* checkpoint=(\S+)`)
	redisSkipped   = regexp.MustCompile(`msg="skipped events already written to Redis".* duplicates=(\d+)`)
)

// TestRedisCrashLoopExactlyOnce is the redis sink's promise under crashes:
// walcast is SIGKILLed five times while 20,000+ changes (inserts, updates,
// key changes, deletes, TRUNCATEs) stream into Redis — with transactions
// in flight, and between an EXEC and walcast recording the ack — and
// redis-server itself is SIGKILLed and restarted once. Afterwards
// redis-cli reads every committed change exactly once from the stream,
// byte-identical, in commit order, and applying the stream rebuilds the
// table.
func TestRedisCrashLoopExactlyOnce(t *testing.T) {
	parallel(t)
	start := time.Now()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	srv := startRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	ahead := 0
	res := runSinkCrashLoop(t, dsn, db, sinkLoop{
		name: "rcrash", kills: pgtest.Chaos(t, 5),
		sink:     sinkSpec{ID: "redis", SinkType: "redis", Batch: 20, Config: redisConfig(srv.addr)},
		progress: func() int { return redisLen(c, redisItems) },
		afterKill: func(k int, p *walcastProc, host string) string {
			line := ""
			cp := loggedCheckpoint(t, p, `msg="redis connected"`, redisConnected)
			if cp.Compare(idOrZero(host)) > 0 {
				ahead++
				line = fmt.Sprintf("; Redis checkpoint %s is ahead: written, ack not recorded", cp)
			}
			if k == 3 {
				srv.stop(syscall.SIGKILL)
				srv.start()
				line += "; redis-server SIGKILLed and restarted"
			}
			return line
		},
	})
	if ahead == 0 {
		t.Errorf("no kill landed between an EXEC and walcast recording its ack; the loop did not test what it claims")
	}
	got := readRedisStream(t, srv, redisItems)
	if dups := verify(t, res.want, got); dups != 0 {
		t.Fatalf("redis-cli read %d duplicates, want none", dups)
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID.Compare(got[i-1].ID) <= 0 {
			t.Fatalf("entry %d (%s) follows %s: the stream is not in commit order", i, got[i].ID, got[i-1].ID)
		}
	}
	checkKeyedMirror(t, db, got)
	t.Logf("%d changes, %d walcast SIGKILLs (%d with Redis ahead of walcast.checkpoints) and a redis-server SIGKILL; %d redelivered events filtered by the sink; redis-cli read each change once, in commit order, in %s",
		len(res.want), pgtest.Chaos(t, 5), ahead, sumLogged(res.logs, redisSkipped), time.Since(start).Round(time.Second))
}

// TestRedisServerDownAtStart: walcast starts while redis-server is down;
// deliveries fail (retried, naming the address) until it is up, then
// every change lands once.
func TestRedisServerDownAtStart(t *testing.T) {
	srv := startRedisServer(t)
	srv.stop(syscall.SIGKILL)
	c := redis.NewClient(&redis.Options{Addr: srv.addr, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	want := downAtStart(t, "rdown", sinkSpec{ID: "redis", SinkType: "redis", Batch: 20, Config: redisConfig(srv.addr)},
		"redis unreachable at start", srv.start, func() int { return redisLen(c, redisItems) })
	if dups := verify(t, want, readRedisStream(t, srv, redisItems)); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestRedisAuthRefused: a password the server refuses stops walcast at
// start, naming the user and what to check, never the password.
func TestRedisAuthRefused(t *testing.T) {
	srv := startRedisServer(t, "--requirepass", "right-one")
	refusedAtStart(t, "rauth", sinkSpec{ID: "redis", SinkType: "redis", Config: redisConfig(srv.addr, `password = "wrong-one"`)}, "wrong-one",
		`refused authentication as user "default"`, "check username and password")
}

// TestRedisTooLargeParked: an event larger than the server's
// proto-max-bulk-len is parked at once, naming the limit; the rest is
// written once.
func TestRedisTooLargeParked(t *testing.T) {
	srv := startRedisServer(t, "--proto-max-bulk-len", "1mb")
	want := tooLargeParked(t, "rlarge", sinkSpec{ID: "redis", SinkType: "redis", Config: redisConfig(srv.addr)}, 2<<20, "proto-max-bulk-len")
	if dups := verify(t, want, readRedisStream(t, srv, redisItems)); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}
