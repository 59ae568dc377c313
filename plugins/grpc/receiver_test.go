package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testReceiver is a real Receiver service on 127.0.0.1: it records every
// request it answers OK, in arrival order, and can be told to fail, to
// hang, or to insist on a bearer token.
type testReceiver struct {
	receiverv1.UnimplementedReceiverServer
	addr string

	mu      sync.Mutex
	reqs    []*receiverv1.DeliverRequest // answered OK
	calls   int                          // every call, answered OK or not
	md      metadata.MD                  // metadata of the last call
	peer    *peer.Peer                   // the last caller
	fail    error                        // non-nil: every call returns it
	hanging chan struct{}                // non-nil: calls wait until it is closed
	token   string                       // non-empty: calls must carry "Bearer <token>"
	dups    int64                        // reported as duplicates on OK
}

// startReceiver serves a testReceiver on a fresh port of 127.0.0.1 until
// the test ends. opts add to the server's options (credentials, limits).
func startReceiver(t *testing.T, opts ...grpc.ServerOption) *testReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &testReceiver{addr: l.Addr().String()}
	serve(t, r, l, opts...)
	return r
}

// serve runs r's service on l until the test ends.
func serve(t *testing.T, r *testReceiver, l net.Listener, opts ...grpc.ServerOption) {
	t.Helper()
	// The limit receiver.proto asks receivers to accept; a test that
	// wants a smaller one passes it in opts, which come later and win.
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}, opts...)...)
	receiverv1.RegisterReceiverServer(srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
}

func (r *testReceiver) Deliver(ctx context.Context, req *receiverv1.DeliverRequest) (*receiverv1.DeliverResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	p, _ := peer.FromContext(ctx)
	r.mu.Lock()
	r.calls++
	r.md, r.peer = md, p
	fail, hanging, token, dups := r.fail, r.hanging, r.token, r.dups
	r.mu.Unlock()

	if hanging != nil {
		select {
		case <-hanging:
		case <-ctx.Done(): // the sink gave up
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if token != "" && (len(md.Get("authorization")) != 1 || md.Get("authorization")[0] != "Bearer "+token) {
		return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token")
	}
	if fail != nil {
		return nil, fail
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return &receiverv1.DeliverResponse{Duplicates: dups}, nil
}

// requests returns the requests answered OK so far.
func (r *testReceiver) requests() []*receiverv1.DeliverRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*receiverv1.DeliverRequest(nil), r.reqs...)
}

// received returns the payload of every event answered OK, in order.
func (r *testReceiver) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]byte
	for _, req := range r.reqs {
		for _, e := range req.GetEvents() {
			out = append(out, e.GetPayload())
		}
	}
	return out
}

// callCount returns how many calls reached the service.
func (r *testReceiver) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// lastCall returns the metadata and peer of the last call.
func (r *testReceiver) lastCall() (metadata.MD, *peer.Peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.md, r.peer
}

// failWith makes every call return err until restore is called.
func (r *testReceiver) failWith(err error) (restore func()) {
	r.mu.Lock()
	r.fail = err
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.fail = nil
		r.mu.Unlock()
	}
}

// hang holds every call until release is called or the caller gives up.
func (r *testReceiver) hang() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hanging = ch
	r.mu.Unlock()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		r.hanging = nil
		r.mu.Unlock()
		close(ch)
	})
}

// ---- sinks --------------------------------------------------------------

// openSink returns a sink configured with cfg (a JSON object) under the
// identity pipeline "shop", sink "orders", and opened; it is closed when
// the test ends.
func openSink(t *testing.T, cfg map[string]any) *Sink {
	t.Helper()
	s := newSink(discardLogger())
	setup := pluginkit.Setup{Config: mustJSON(t, cfg), Sink: pluginkit.Identity{Pipeline: "shop", SinkID: "orders"}}
	if err := s.Configure(t.Context(), setup); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := s.Open(t.Context()); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ---- certificates ---------------------------------------------------------

// serverName is the only name in the receiver's certificate: the tests
// dial 127.0.0.1, so verification needs server_name to succeed.
const serverName = "receiver.test"

// pki is a throwaway CA with a server and a client certificate, the CA
// and the client's certificate and key written as PEM files.
type pki struct {
	caFile, clientCertFile, clientKeyFile string
	pool                                  *x509.CertPool
	server                                tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "walcast test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{
		caFile:         filepath.Join(dir, "ca.pem"),
		clientCertFile: filepath.Join(dir, "client.pem"),
		clientKeyFile:  filepath.Join(dir, "client-key.pem"),
		pool:           x509.NewCertPool(),
	}
	p.pool.AddCert(ca)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{name}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}

	serverDER, serverKey := leaf(2, serverName, x509.ExtKeyUsageServerAuth)
	p.server = tls.Certificate{Certificate: [][]byte{serverDER}, PrivateKey: serverKey}

	clientDER, clientKey := leaf(3, "walcast-client", x509.ExtKeyUsageClientAuth)
	writePEM(t, p.clientCertFile, "CERTIFICATE", clientDER)
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.clientKeyFile, "PRIVATE KEY", keyDER)
	return p
}

// serverTLS returns the receiver's server credentials; with requireClient
// it demands and verifies a client certificate signed by the CA.
func (p *pki) serverTLS(requireClient bool) grpc.ServerOption {
	tc := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
	if requireClient {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.ClientCAs = p.pool
	}
	return grpc.Creds(credentials.NewTLS(tc))
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
