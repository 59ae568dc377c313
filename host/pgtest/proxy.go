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
	"time"
)

// Proxy is a TCP proxy in front of a cluster, for network fault tests: the
// one every test uses to break a connection between walcast and
// PostgreSQL. It reads each connection's startup message and the server's
// answer up to its first ReadyForQuery, so it knows which connections are
// replication connections (startup parameter replication) and each
// connection's backend pid (BackendKeyData), and a fault can hit just the
// connections it names (Conn). The faults:
//
//   - Silence: nothing passes in either direction any more and neither end
//     is told (no FIN, no RST; each end's own TCP stack stays up, so
//     keepalive probes are answered), the way a flow a NAT or firewall
//     dropped goes. The proxy stops reading too, so what an end sends piles
//     up in its socket until its send queue is full.
//   - Reset: both ends get a TCP RST at once.
//   - Delay: every chunk relayed from now on, on every connection, waits a
//     while first (a slow network).
//
// Connections opened after a fault pass normally, as a new flow through the
// same NAT would.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration

	mu    sync.Mutex
	conns []*proxied // the open ones
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	replication atomic.Int64
}

// Conn is what the proxy knows of a connection it carries, for choosing
// which connections a fault hits.
type Conn struct {
	// Replication: the client asked for a replication connection.
	Replication bool
	// PID is the backend's process id, 0 until the server sent it (and on
	// an encrypted connection, which the proxy cannot read).
	PID int
}

// proxied is one client connection and its upstream.
type proxied struct {
	client, server net.Conn
	// replication and pid are learnt while the connection starts, and read
	// by faults at any time.
	replication atomic.Bool
	pid         atomic.Int32
	silent      atomic.Bool
}

func (c *proxied) info() Conn {
	return Conn{Replication: c.replication.Load(), PID: int(c.pid.Load())}
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
	t.Cleanup(p.Close)
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

// Silence makes every open connection which selects silent for good (see
// Proxy) and returns how many it silenced.
func (p *Proxy) Silence(which func(Conn) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if which(c.info()) && !c.silent.Load() {
			c.silent.Store(true)
			n++
		}
	}
	return n
}

// SilenceReplication silences every open replication connection and
// returns how many it silenced.
func (p *Proxy) SilenceReplication() int {
	return p.Silence(func(c Conn) bool { return c.Replication })
}

// Reset ends every open connection which selects with a TCP RST to both
// ends and returns how many it reset.
func (p *Proxy) Reset(which func(Conn) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := p.conns[:0]
	n := 0
	for _, c := range p.conns {
		if !which(c.info()) {
			open = append(open, c)
			continue
		}
		for _, end := range []net.Conn{c.client, c.server} {
			if tcp, ok := end.(*net.TCPConn); ok {
				tcp.SetLinger(0) // close sends RST, not FIN
			}
			end.Close()
		}
		n++
	}
	clear(p.conns[len(open):])
	p.conns = open
	return n
}

// Delay makes every chunk relayed from now on wait d before it is passed
// on (0: none). A chunk is what one read returned, so a connection that
// streams also passes at most a chunk per d in each direction.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops the proxy and closes every connection it carries, silent
// ones included. The test's cleanup calls it; a test may call it sooner.
func (p *Proxy) Close() {
	p.once.Do(func() {
		close(p.done)
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
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
// whether it is a replication connection, and its backend pid), then bytes
// both ways.
func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	c := &proxied{client: client, server: server}
	if !p.track(c) {
		return
	}
	defer p.forget(c)
	replication, encrypted, err := startup(client, server)
	if err != nil {
		client.Close()
		server.Close()
		return
	}
	if replication {
		c.replication.Store(true)
		p.replication.Add(1)
	}
	var relays sync.WaitGroup
	relays.Go(func() { p.relay(c, client, server) })
	relays.Go(func() {
		if !encrypted && !backendKey(c, server, client) {
			return
		}
		p.relay(c, server, client)
	})
	relays.Wait()
}

// track adds c to the open connections, or closes it and returns false
// when the proxy is closing.
func (p *Proxy) track(c *proxied) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.client.Close()
		c.server.Close()
		return false
	default:
	}
	p.conns = append(p.conns, c)
	return true
}

// forget drops a connection that ended, so that a fault counts only the
// open ones (a short replication connection that checked the role before
// the stream started is long gone by then).
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
// connection is silent it passes nothing on, not even the end, and reads
// no more, until the proxy closes.
func (p *Proxy) relay(c *proxied, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if d := time.Duration(p.delay.Load()); d > 0 && n > 0 {
			time.Sleep(d)
		}
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

// backendKey relays the server's messages one by one up to its first
// ReadyForQuery, noting the backend pid its BackendKeyData carries. It
// returns false when the connection ended (or went silent) first.
func backendKey(c *proxied, server, client net.Conn) bool {
	for {
		var head [5]byte
		if _, err := io.ReadFull(server, head[:]); err != nil {
			client.Close()
			return false
		}
		size := int(binary.BigEndian.Uint32(head[1:]))
		if size < 4 || size > maxGreetingSize {
			client.Close()
			server.Close()
			return false
		}
		body := make([]byte, size-4)
		if _, err := io.ReadFull(server, body); err != nil {
			client.Close()
			return false
		}
		if head[0] == 'K' && len(body) >= 4 {
			c.pid.Store(int32(binary.BigEndian.Uint32(body)))
		}
		if c.silent.Load() {
			return true // relay parks it
		}
		if _, err := client.Write(append(head[:], body...)); err != nil {
			server.Close()
			return false
		}
		if head[0] == 'Z' {
			return true
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
	// maxGreetingSize bounds a message of the server's greeting
	// (authentication, parameters, a notice or an error).
	maxGreetingSize = 1 << 20
)

// startup relays the client's startup exchange up to its startup message,
// and reports whether that asks for a replication connection. An SSL or
// GSS encryption request is relayed with its one-byte answer; a
// connection that goes encrypted cannot be read any further and counts as
// a normal one.
func startup(client, server net.Conn) (replication, encrypted bool, err error) {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(client, hdr[:]); err != nil {
			return false, false, fmt.Errorf("read startup header: %w", err)
		}
		size := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if size < 8 || size > maxStartupSize {
			return false, false, fmt.Errorf("startup message of %d bytes", size)
		}
		body := make([]byte, size-8)
		if _, err := io.ReadFull(client, body); err != nil {
			return false, false, fmt.Errorf("read startup message: %w", err)
		}
		if _, err := server.Write(append(hdr[:], body...)); err != nil {
			return false, false, fmt.Errorf("relay startup message: %w", err)
		}
		switch code {
		case sslRequest, gssencRequest:
			var answer [1]byte
			if _, err := io.ReadFull(server, answer[:]); err != nil {
				return false, false, fmt.Errorf("read encryption answer: %w", err)
			}
			if _, err := client.Write(answer[:]); err != nil {
				return false, false, fmt.Errorf("relay encryption answer: %w", err)
			}
			if answer[0] != 'N' {
				return false, true, nil
			}
		case protocol3:
			return isReplication(body), false, nil
		case cancelRequest:
			return false, false, nil
		default:
			return false, false, errors.New("unknown startup message")
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
