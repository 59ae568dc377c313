// Command webhook-receiver is an idempotent receiver for walcast's webhook
// sink: it verifies each request's Standard Webhooks signature, processes
// every event once even though walcast delivers at least once, and answers
// 2xx only after processing, because walcast acknowledges (and lets
// PostgreSQL recycle the WAL) on that answer.
//
// Usage:
//
//	WEBHOOK_SECRET=whsec_... go run ./examples/webhook-receiver -addr :8080
//
// with the same secret in the sink's config:
//
//	sink "webhook" "orders" {
//	  config {
//	    url    = "http://localhost:8080/hooks"
//	    secret = env("WEBHOOK_SECRET")
//	  }
//	}
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() { os.Exit(run()) }

func run() int {
	addr := flag.String("addr", "localhost:8080", "listen `address`")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	key, err := SigningKey(os.Getenv("WEBHOOK_SECRET"))
	if err != nil {
		log.Error("WEBHOOK_SECRET", "err", err)
		return 2
	}
	rcv := NewReceiver(ReceiverConfig{
		Key: key,
		Log: log,
		// The effect of an event. Here it is a log line; in a real
		// receiver it is a database write in the same transaction that
		// records the event id (see Receiver).
		Apply: func(_ context.Context, e Event) error {
			log.Info("event", "id", e.ID, "table", e.Schema+"."+e.Table, "op", e.Op)
			return nil
		},
	})

	mux := http.NewServeMux()
	mux.Handle("POST /hooks", rcv)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "addr", *addr)

	select {
	case err := <-errc:
		log.Error("serve", "err", err)
		return 1
	case <-ctx.Done():
	}
	// Let requests in progress finish: an interrupted one is simply
	// delivered again, but a finished one need not be.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("shutdown", "err", err)
		return 1
	}
	return 0
}
