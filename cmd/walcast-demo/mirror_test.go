package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMakeDemoMirror runs `make demo DEMO_SINK=postgres`: the demo's
// changes reach a second database through the postgres sink. The test
// reads both databases itself on DEMO_PORT and waits until the mirror
// holds every row of the source, column for column, while the writer
// runs; the demo's own "equal to the source" line must appear too.
func TestMakeDemoMirror(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "demo", "BIN="+t.TempDir(),
		fmt.Sprintf("DEMO_PORT=%d", port), "DEMO_SINK=postgres")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		exited <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	var mu sync.Mutex
	var out strings.Builder
	equal := regexp.MustCompile(`mirror: [1-9][0-9]* rows in orders, equal to the source`)
	said := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		seen := false
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !seen && equal.MatchString(sc.Text()) {
				seen = true
				close(said)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	select {
	case <-said:
	case err := <-exited:
		t.Fatalf("make demo exited before the mirror was equal: %v\n%s", err, output())
	case <-time.After(5 * time.Minute):
		t.Fatalf("the demo never said the mirror equals the source within 5 minutes:\n%s", output())
	}

	// The test's own reading: both databases, the same digest, at some
	// moment between two writes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The demo prints both DSNs; the databases' names carry a suffix.
	connect := func(which string) *pgx.Conn {
		m := regexp.MustCompile(`walcast-demo: ` + which + ` (postgres://\S+)`).FindStringSubmatch(output())
		if m == nil || !strings.Contains(m[1], fmt.Sprintf("127.0.0.1:%d/", port)) {
			t.Fatalf("the demo printed no %s DSN on DEMO_PORT %d:\n%s", which, port, output())
		}
		c, err := pgx.Connect(ctx, m[1])
		if err != nil {
			t.Fatalf("connect to the %s on DEMO_PORT: %v\n%s", which, err, output())
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	src, mirror := connect("source"), connect("mirror")
	digest := func(c *pgx.Conn) (int64, string) {
		var n int64
		var d string
		if err := c.QueryRow(ctx, `SELECT count(*), coalesce(md5(string_agg(o::text, ',' ORDER BY id)), '') FROM orders o`).Scan(&n, &d); err != nil {
			t.Fatal(err)
		}
		return n, d
	}
	for {
		n, a := digest(src)
		m, b := digest(mirror)
		if a == b && n > 0 {
			t.Logf("mirror equal to the source at %d rows", m)
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the mirror (%d rows) never equalled the source (%d rows) within 2 minutes", m, n)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("make demo still running 2 minutes after Ctrl-C:\n%s", output())
	}
	if got := output(); !strings.Contains(got, "PostgreSQL stopped and removed") {
		t.Errorf("the demo did not clean up its PostgreSQL:\n%s", got)
	}
}
