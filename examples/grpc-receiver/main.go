// Command grpc-receiver is an idempotent receiver for walcast's grpc sink:
// it serves the Receiver service of proto/receiver/v1, checks the bearer
// token, processes every event once even though walcast delivers at least
// once, and answers OK only after processing, because walcast acknowledges
// (and lets PostgreSQL recycle the WAL) on that answer.
//
// Usage:
//
//	RECEIVER_TOKEN=... go run ./examples/grpc-receiver -addr localhost:50051
//
// with the same token in the sink's config (plaintext, so the token needs
// insecure_token; serve TLS with -cert and -key and set tls = true instead
// anywhere but on localhost):
//
//	sink "grpc" "orders" {
//	  config {
//	    address        = "localhost:50051"
//	    token          = env("RECEIVER_TOKEN")
//	    insecure_token = true
//	  }
//	}
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

func main() { os.Exit(run()) }

func run() int {
	addr := flag.String("addr", "localhost:50051", "listen `address`")
	certFile := flag.String("cert", "", "PEM server certificate `file`; with -key, serve TLS")
	keyFile := flag.String("key", "", "PEM private key `file` of -cert")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}
	if *certFile != "" || *keyFile != "" {
		creds, err := credentials.NewServerTLSFromFile(*certFile, *keyFile)
		if err != nil {
			log.Error("load TLS certificate", "err", err)
			return 2
		}
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	receiverv1.RegisterReceiverServer(srv, NewReceiver(ReceiverConfig{
		Token: os.Getenv("RECEIVER_TOKEN"),
		Log:   log,
		// The effect of an event. Here it is a log line; in a real
		// receiver it is a database write in the same transaction that
		// records the event id (see Receiver).
		Apply: func(_ context.Context, e Event) error {
			log.Info("event", "id", e.ID, "table", e.Schema+"."+e.Table, "op", e.Op)
			return nil
		},
	}))

	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Info("listening", "addr", l.Addr().String())

	select {
	case err := <-errc:
		log.Error("serve", "err", err)
		return 1
	case <-ctx.Done():
	}
	// Let calls in progress finish: an interrupted one is simply
	// delivered again, but a finished one need not be.
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return 0
}
