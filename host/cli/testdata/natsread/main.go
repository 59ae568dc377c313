// Command natsread is the independent JetStream client of the nats sink's
// end-to-end tests: it reads a whole stream with an ordered consumer (the
// way an application would), using only the official nats.go client, and
// prints one JSON line per message: sequence, subject, Nats-Msg-Id,
// headers and data.
//
//	natsread -server nats://127.0.0.1:4222 -stream WALCAST
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() { os.Exit(run()) }

type line struct {
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subject"`
	MsgID   string              `json:"msg_id"`
	Headers map[string][]string `json:"headers"`
	Data    string              `json:"data"`
}

func run() int {
	server := flag.String("server", "nats://127.0.0.1:4222", "server URL")
	stream := flag.String("stream", "WALCAST", "stream to read")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := read(ctx, *server, *stream); err != nil {
		fmt.Fprintln(os.Stderr, "natsread:", err)
		return 1
	}
	return 0
}

func read(ctx context.Context, server, stream string) error {
	nc, err := nats.Connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			l := line{Seq: md.Sequence.Stream, Subject: m.Subject(), MsgID: m.Headers().Get(jetstream.MsgIDHeader), Headers: m.Headers(), Data: string(m.Data())}
			if err := out.Encode(l); err != nil {
				return err
			}
			if md.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
