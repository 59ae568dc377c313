// Command walcast-kfake runs franz-go's kfake, an in-memory broker that
// speaks the Kafka protocol (transactions, read_committed, epoch fencing,
// compaction), on 127.0.0.1. It is the Kafka that `make kafka`, the demo
// and the end-to-end tests use: no Apache Kafka can be installed on the
// machines walcast is developed on.
//
// It prints one line "listening on HOST:PORT" per broker to stdout once the
// brokers accept connections, and stops on SIGINT or SIGTERM. With
// -data-dir the cluster's state survives a restart (-sync makes every
// write durable before it is acknowledged).
//
// kfake is a test double: do not point anything you care about at it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("walcast-kfake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ports := fs.String("ports", "9092", "comma-separated TCP ports on 127.0.0.1, one broker each; 0 picks a free port")
	dataDir := fs.String("data-dir", "", "directory to persist the cluster's state in, so that it survives a restart; empty keeps everything in memory")
	syncWrites := fs.Bool("sync", false, "fsync every write before acknowledging it (with -data-dir)")
	partitions := fs.Int("default-partitions", 1, "partitions of a topic created with the broker's default")
	autoCreate := fs.Bool("auto-create-topics", false, "create a topic when a client asks for its metadata, as auto.create.topics.enable does")
	logLevel := fs.String("log-level", "none", "broker log level: none, error, warn, info or debug (to stderr)")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	opts := []kfake.Opt{
		kfake.DefaultNumPartitions(*partitions),
		kfake.WithLogger(kfake.BasicLogger(stderr, parseLevel(*logLevel))),
	}
	var portList []int
	for p := range strings.SplitSeq(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 || n > 65535 {
			fmt.Fprintf(stderr, "walcast-kfake: -ports: %q is not a port number\n", p)
			return 2
		}
		portList = append(portList, n)
	}
	opts = append(opts, kfake.Ports(portList...))
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
		if *syncWrites {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintf(stderr, "walcast-kfake: start broker: %v\n", err)
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintln(stderr, "walcast-kfake: another process listens on that port; pick another with -ports")
		}
		return 1
	}
	for _, addr := range c.ListenAddrs() {
		fmt.Fprintf(stdout, "listening on %s\n", addr)
	}
	<-ctx.Done()
	// Close writes the persisted state out; with -data-dir that is what a
	// restart reads back.
	c.Close()
	return 0
}

func parseLevel(s string) kfake.LogLevel {
	switch strings.ToLower(s) {
	case "debug":
		return kfake.LogLevelDebug
	case "info":
		return kfake.LogLevelInfo
	case "warn":
		return kfake.LogLevelWarn
	case "error":
		return kfake.LogLevelError
	default:
		return kfake.LogLevelNone
	}
}
