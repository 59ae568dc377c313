package host_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
)

// childEnv selects a consumer mode when the test binary runs as a
// subprocess; the other CHILD_* variables configure it.
const childEnv = "WALCAST_HOST_TEST_CHILD"

// childMain is a library-mode consumer in its own process, so that the
// crash test can SIGKILL it and the memory test can read its peak RSS.
// It reports on stdout, one line per fact:
//
//	ready              the slot exists; changes made now are captured
//	event <id>         Next returned <id>
//	acked <id>         Ack(<id>) returned nil
//	done <n> <elapsed> (rss) n events read and acked; waits for stdin EOF
func childMain(mode string) int {
	ctx := context.Background()
	stream, err := host.Open(ctx, host.StreamConfig{
		DSN:    os.Getenv("CHILD_DSN"),
		Tables: []string{os.Getenv("CHILD_TABLE")},
		Slot:   os.Getenv("CHILD_SLOT"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer stream.Close(context.Background())
	fmt.Println("ready")
	switch mode {
	case "crash":
		// Reads forever, acking (cumulatively) only the CHILD_ACK_AT-th
		// event, until the parent kills it.
		ackAt, _ := strconv.Atoi(os.Getenv("CHILD_ACK_AT"))
		for n := 1; ; n++ {
			ev, err := stream.Next(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: next:", err)
				return 1
			}
			fmt.Println("event", ev.ID)
			if n == ackAt {
				if err := stream.Ack(ev.ID); err != nil {
					fmt.Fprintln(os.Stderr, "child: ack:", err)
					return 1
				}
				fmt.Println("acked", ev.ID)
			}
		}
	case "rss":
		want, _ := strconv.Atoi(os.Getenv("CHILD_COUNT"))
		var start time.Time
		var bytes int
		for n := 0; n < want; n++ {
			ev, err := stream.Next(ctx)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child: next:", err)
				return 1
			}
			if n == 0 {
				start = time.Now()
			}
			bytes += len(ev.New)
			if err := stream.Ack(ev.ID); err != nil {
				fmt.Fprintln(os.Stderr, "child: ack:", err)
				return 1
			}
		}
		fmt.Println("done", want, time.Since(start), bytes)
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
	return 2
}

// child is a running consumer subprocess.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

func startChild(t *testing.T, mode string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start consumer subprocess: %v", err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.done
	})
	return c
}

// expect waits for the child's next line, which must start with prefix,
// and returns the rest of it.
func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatalf("consumer subprocess exited while the test waited for %q", prefix)
		}
		rest, found := strings.CutPrefix(line, prefix)
		if !found {
			t.Fatalf("consumer subprocess said %q, want a line starting with %q", line, prefix)
		}
		return strings.TrimSpace(rest)
	case <-time.After(within):
		t.Fatalf("timed out after %s waiting for the consumer subprocess to say %q", within, prefix)
	}
	return ""
}

// kill SIGKILLs the child and waits until it is gone.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill consumer subprocess: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-c.done:
	case <-ctx.Done():
		t.Fatal("consumer subprocess did not exit after SIGKILL")
	}
}
