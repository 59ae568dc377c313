package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/plugins/internal/servertest"
)

// redisServer is a real redis-server (Debian's package, installed by
// `make tools`) on a free 127.0.0.1 port, its data in a temporary
// directory.
type redisServer struct{ *servertest.Server }

// startRedis starts a server, appendonly with fsync always so that a
// restart keeps every acknowledged write, with extra configuration
// directives ("--requirepass", "secret", ...).
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	return runRedis(t, func(port string) []string {
		return append([]string{"--port", port, "--appendonly", "yes", "--appendfsync", "always"}, extra...)
	})
}

// runRedis starts a server with the settings every test's server has and
// listen's directives, given the port it is to use.
func runRedis(t testing.TB, listen func(port string) []string) *redisServer {
	t.Helper()
	return &redisServer{servertest.Start(t, servertest.Config{
		Binary: "redis-server", Install: "redis-server redis-tools",
		Args: func(addr, dir string) []string {
			_, port, _ := net.SplitHostPort(addr)
			return append([]string{"--bind", "127.0.0.1", "--dir", dir, "--save", "", "--daemonize", "no",
				"--protected-mode", "no", "--loglevel", "warning"}, listen(port)...)
		},
	})}
}

// client is an independent go-redis client for the test's own reads and
// changes.
func (s *redisServer) client(t testing.TB, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: password, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// entries reads a whole stream: each entry's fields.
func entries(t testing.TB, c *redis.Client, stream string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = m.Values
	}
	return out
}

// ids is the id field of each entry.
func ids(es []map[string]any) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e["id"])
	}
	return out
}
