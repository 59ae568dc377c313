package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/plugins/internal/servertest"
)

// natsServer is a real nats-server (Debian's package, installed by `make
// tools`) with JetStream, on a free 127.0.0.1 port, its store in a
// temporary directory (kept across restarts).
type natsServer struct{ *servertest.Server }

// startNATS starts a server; extra is more of its configuration file
// ("max_payload: 65536", an authorization block).
func startNATS(t testing.TB, extra string) *natsServer {
	t.Helper()
	return &natsServer{servertest.Start(t, servertest.Config{
		Binary: "nats-server", Install: "nats-server",
		Args: func(addr, dir string) []string {
			conf := filepath.Join(dir, "nats.conf")
			text := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\n%s\n", addr, filepath.Join(dir, "js"), extra)
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"-c", conf}
		},
	})}
}

func (s *natsServer) url() string { return "nats://" + s.Addr }

// reader is an independent JetStream client of the test.
func (s *natsServer) reader(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.url(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// readOnce reads stream over a connection of its own, closed before it
// returns.
func (s *natsServer) readOnce(t testing.TB, stream string) []stored {
	t.Helper()
	nc, err := nats.Connect(s.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return readStream(t, js, stream)
}

// stored is one message as the stream holds it.
type stored struct {
	Subject string
	ID      string // Nats-Msg-Id
	Data    string
}

// readStream reads every message of stream by sequence.
func readStream(t testing.TB, js jetstream.JetStream, stream string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %s seq %d: %v", stream, seq, err)
		}
		out = append(out, stored{Subject: m.Subject, ID: m.Header.Get(jetstream.MsgIDHeader), Data: string(m.Data)})
	}
	return out
}
