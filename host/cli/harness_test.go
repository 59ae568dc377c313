package cli

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// The end-to-end harness. Every test of this package runs the binaries
// TestMain builds from this checkout (main_test.go) against one shared
// PostgreSQL cluster, each in a database of its own, and takes what it
// needs from these files, named by what they hold:
//
//	source_test.go        the source database: connections, slots, walcast.parked, workloads
//	pipelinefile_test.go  pipeline files: writePipeline and the edits a test makes to one
//	walcast_test.go       processes: walcast run (and any command) in the background, one-shot commands, what a running walcast serves
//	receiver_test.go      the far end of a webhook sink: a receiver that records, fails, hangs or answers per request
//	truth_test.go         what arrived against what was committed: test_decoding's truth, verify, mirrors of the tables
//	kafka_harness_test.go a Kafka broker and two independent readers of it
//	harness_test.go       waiting, and reading logs and output
//
// Network faults between walcast and PostgreSQL go through pgtest.Proxy
// (host/pgtest), the one proxy of every package's tests.

// waitFor polls cond until it holds, failing the test after d: the way
// every test waits for an event, with a deadline generous enough for a
// loaded machine.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// countLines is how many lines of s contain substr.
func countLines(s, substr string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}

// wantAll fails the test for each of parts that out does not contain.
func wantAll(t *testing.T, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Errorf("output lacks %q:\n%s", p, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// freeAddr is an address on 127.0.0.1 whose port was free a moment ago:
// for a server walcast or a tool is told to listen on, or for one nothing
// listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
