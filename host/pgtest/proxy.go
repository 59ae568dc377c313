package pgtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy in front of a cluster, for network fault tests. It
// reads each connection's startup message, so it tells replication
// connections (startup parameter replication) from the others, and it can
// make the replication connections open now go silent the way a flow a
// NAT or firewall dropped does: nothing passes in either direction any
// more, and neither end is told (no FIN, no RST; each end's own TCP stack
// stays up, so keepalive probes are answered). Connections opened later
// pass normally, as a new flow through the same NAT would.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*proxied
	done  chan struct{}
	wg    sync.WaitGroup

	replication atomic.Int64
}

// proxied is one client connection and its upstream.
type proxied struct {
	client, server net.Conn
	replication    bool
	silent         atomic.Bool
}

// Proxy starts a proxy in front of the cluster, on 127.0.0.1, closed when
// the test ends.
func (c *Cluster) Proxy(t testing.TB) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{t: t, ln: ln, target: fmt.Sprintf("%s:%d", c.Host, c.Port), done: make(chan struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// DSN rewrites dsn (a URL, as Cluster.DSN returns) to go through the
// proxy.
func (p *Proxy) DSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		p.t.Fatalf("proxy: parse dsn: %v", err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Replication is how many replication connections the proxy has accepted.
func (p *Proxy) Replication() int { return int(p.replication.Load()) }

// SilenceReplication makes every replication connection open now silent
// for good (see Proxy) and returns how many it silenced.
func (p *Proxy) SilenceReplication() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if c.replication && !c.silent.Load() {
			c.silent.Store(true)
			n++
		}
	}
	return n
}

func (p *Proxy) close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve relays one connection: the startup exchange first (to learn
// whether it is a replication connection), then bytes both ways.
func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &proxied{client: client, server: server}
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	default:
	}
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	defer p.forget(c)
	if c.replication, err = startup(client, server); err != nil {
		client.Close()
		server.Close()
		return
	}
	if c.replication {
		p.replication.Add(1)
	}
	var relays sync.WaitGroup
	relays.Go(func() { p.relay(c, client, server) })
	relays.Go(func() { p.relay(c, server, client) })
	relays.Wait()
}

// forget drops a connection that ended, so that SilenceReplication counts
// only the open ones (a short replication connection that checked the
// role before the stream started is long gone by then).
func (p *Proxy) forget(c *proxied) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range p.conns {
		if o == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// relay copies src to dst until either ends, passing the end on; once the
// connection is silent it drops what it reads and passes nothing on, not
// even the end, until the proxy closes.
func (p *Proxy) relay(c *proxied, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if c.silent.Load() {
			<-p.done
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if c.silent.Load() {
				<-p.done
				return
			}
			src.Close()
			dst.Close()
			return
		}
	}
}

// Startup message codes of the PostgreSQL protocol.
const (
	protocol3      = 196608
	sslRequest     = 80877103
	gssencRequest  = 80877104
	cancelRequest  = 80877102
	maxStartupSize = 10000
)

// startup relays the client's startup exchange up to its startup message,
// and reports whether that asks for a replication connection. An SSL or
// GSS encryption request is relayed with its one-byte answer; a
// connection that goes encrypted cannot be read and counts as a normal
// one.
func startup(client, server net.Conn) (replication bool, err error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return false, fmt.Errorf("read startup header: %w", err)
		}
		size := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if size < 8 || size > maxStartupSize {
			return false, fmt.Errorf("startup message of %d bytes", size)
		}
		body := make([]byte, size-8)
		if _, err := io.ReadFull(client, body); err != nil {
			return false, fmt.Errorf("read startup message: %w", err)
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			return false, fmt.Errorf("relay startup message: %w", err)
		}
		switch code {
		case sslRequest, gssencRequest:
			var answer [1]byte
			if _, err := io.ReadFull(server, answer[:]); err != nil {
				return false, fmt.Errorf("read encryption answer: %w", err)
			}
			if _, err := client.Write(answer[:]); err != nil {
				return false, fmt.Errorf("relay encryption answer: %w", err)
			}
			if answer[0] != 'N' {
				return false, nil // encrypted from here on
			}
		case protocol3:
			return isReplication(body), nil
		case cancelRequest:
			return false, nil
		default:
			return false, errors.New("unknown startup message")
		}
	}
}

// isReplication reads the startup parameters (name, value, ..., "").
func isReplication(params []byte) bool {
	fields := strings.Split(string(params), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "replication" {
			switch strings.ToLower(fields[i+1]) {
			case "", "false", "off", "no", "0":
				return false
			}
			return true
		}
	}
	return false
}
