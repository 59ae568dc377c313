package sinkclient

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/proto/sink/wire"
)

// gone reports whether pid has exited. A zombie counts as gone: in a
// container nothing may reap a re-parented process.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

// pluginkit.Serve ends the plugin once the process that started it is gone,
// even when the host did not set Pdeathsig.
func TestPluginExitsWhenParentDies(t *testing.T) {
	t.Parallel()
	// A shell starts the plugin in the background, waits for its handshake
	// line (by then Serve watches its parent) and exits, orphaning it.
	handshake := filepath.Join(t.TempDir(), "handshake")
	sh := exec.Command("sh", "-c", `"$0" >"$1" 2>/dev/null & pid=$!
while [ ! -s "$1" ]; do sleep 0.01; done
echo $pid`, pluginPath(t, "stdout"), handshake)
	sh.Env = append(os.Environ(), wire.Handshake().MagicCookieKey+"="+wire.Handshake().MagicCookieValue)
	out, err := sh.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("plugin pid %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, 15*time.Second, "the orphaned plugin to exit", func() bool { return gone(pid) })
}

func TestLineLoggerForwardsStderrStream(t *testing.T) {
	logs := newRecorder()
	w := newLineLogger(newHCLogSlog(slogWith(logs, "sink", "s1")))
	// Writes arrive in arbitrary chunks.
	for _, chunk := range []string{
		`{"@level":"warn","@message":"slow receiver","@timestamp":"2026-01-02T03:04:05.000000Z","latency_ms":900}` + "\nplain te",
		"xt line\r\n\n",
	} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	rec, ok := logs.find("slow receiver")
	if !ok || rec.attrs["latency_ms"] != 900.0 || rec.attrs["sink"] != "s1" || rec.level.String() != "WARN" {
		t.Errorf("JSON line = %+v, %v", rec, ok)
	}
	if _, ok := rec.attrs["@timestamp"]; ok {
		t.Errorf("JSON line keeps @timestamp: %+v", rec.attrs)
	}
	rec, ok = logs.find("plain text line")
	if !ok || rec.attrs["stream"] != "stderr" || rec.level.String() != "INFO" {
		t.Errorf("text line = %+v, %v", rec, ok)
	}
}

func TestBackoff(t *testing.T) {
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := backoff(1000); got != 10*time.Second {
		t.Errorf("backoff(1000) = %s", got)
	}
}
