package sinkclient

import (
	"os"
	"strings"
	"testing"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// TestStdoutSinkWritesToWalcastStdout: when walcast's stdout is a file
// descriptor, the stdout sink writes to it itself (it is passed to the
// plugin), so that a write that fails there fails Deliver. Through
// go-plugin's stdio stream the plugin only wrote into a pipe to the host,
// Deliver succeeded, and the host's failed write came later, after the
// ack, as a log line.
func TestStdoutSinkWritesToWalcastStdout(t *testing.T) {
	ev := []pluginkit.Event{{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":"0/16B3748:0"}`)}}

	t.Run("delivered means written", func(t *testing.T) {
		f, err := os.CreateTemp(t.TempDir(), "stdout")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p := launch(t, "stdout", Config{SinkID: "out", Stdout: f}, map[string]any{})
		if _, err := p.Deliver(t.Context(), attempt.Batch{Events: ev}); err != nil {
			t.Fatal(err)
		}
		// No waiting: Deliver returned, so the line is in the file.
		got, _ := os.ReadFile(f.Name())
		if string(got) != `{"id":"0/16B3748:0"}`+"\n" {
			t.Fatalf("walcast's stdout holds %q right after Deliver", got)
		}
	})

	t.Run("a failed write is not delivered", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		p := launch(t, "stdout", Config{SinkID: "out", Stdout: w}, map[string]any{})
		r.Close() // nobody reads walcast's stdout any more
		_, err = p.Deliver(t.Context(), attempt.Batch{Events: ev})
		if err == nil {
			t.Fatal("Deliver succeeded although walcast's stdout is a pipe nobody reads")
		}
		if kind, _ := attempt.KindOf(err); kind != attempt.KindRetry || !strings.Contains(err.Error(), "broken pipe") {
			t.Fatalf("Deliver = %v (%s), want a retryable broken pipe", err, kind)
		}
		t.Logf("Deliver with nobody reading walcast's stdout: %v", err)
	})
}
