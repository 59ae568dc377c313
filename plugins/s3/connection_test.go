package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/walcast/walcast/pluginkit"
)

// How the sink reaches the store: TLS settings, path-style or
// virtual-hosted addressing, and credentials from the SDK's sources.

// writePEM writes one PEM block to a file of the test's and returns its
// path.
func writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientCert makes a self-signed client certificate and returns its
// certificate and key files and a pool that trusts it.
func clientCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "walcast-sink-s3 test client"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return writePEM(t, "client.pem", "CERTIFICATE", der), writePEM(t, "client.key", "EC PRIVATE KEY", keyDER), pool
}

// TestTLS: an https endpoint whose certificate no system root signed and
// that requires a client certificate. The sink reaches it with ca_file,
// cert_file and key_file, checks the name it dials (or server_name)
// against the certificate, and fails Open, naming the cause, when a
// setting is missing or wrong.
func TestTLS(t *testing.T) {
	certFile, keyFile, clients := clientCert(t)
	var caFile string
	f := startFakeS3With(t, nil, func(srv *httptest.Server) {
		srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
		srv.StartTLS()
		caFile = writePEM(t, "ca.pem", "CERTIFICATE", srv.Certificate().Raw)
	})
	if !strings.HasPrefix(f.URL, "https://127.0.0.1:") {
		t.Fatalf("server at %s", f.URL)
	}
	full := map[string]string{"ca_file": caFile, "cert_file": certFile, "key_file": keyFile}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name    string
		tls     map[string]string
		wantErr string // "" when Open and Deliver succeed
	}{
		{"ca_file and a client certificate", full, ""},
		// httptest's certificate names example.com and 127.0.0.1.
		{"server_name the certificate names", with("server_name", "example.com"), ""},
		{"server_name it does not name", with("server_name", "s3.other.test"), "certificate is valid for"},
		{"no ca_file", with("ca_file", ""), "certificate signed by unknown authority"},
		{"insecure_skip_verify without ca_file", map[string]string{"insecure_skip_verify": "true", "cert_file": certFile, "key_file": keyFile}, ""},
		{"no client certificate", map[string]string{"ca_file": caFile}, "certificate required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink(discardLogger())
			ctx := context.Background()
			cfg := testConfig(t, f, map[string]any{"tls": c.tls, "prefix": "tls"})
			if err := s.Configure(ctx, pluginkit.Setup{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			_, err := s.Open(ctx)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), f.URL) {
					t.Fatalf("Open: %v; want an error naming %s and %q", err, f.URL, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			deliver(t, s, pluginkit.Batch{Events: []pluginkit.Event{ev(t, 0xB0, 0, "orders", "insert", day1, `{"id":1}`, `{"id":1}`)}})
			if keys := f.keys("tls/public.orders/"); len(keys) == 0 {
				t.Fatal("no object written over TLS")
			}
		})
	}
}

// recorded is what the front of the fake saw of one request.
type recorded struct{ host, path, accessKey string }

// recorder records every request's Host, path and access key.
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

var credentialRe = regexp.MustCompile(`Credential=([^/]+)/`)

func (r *recorder) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var key string
		if m := credentialRe.FindStringSubmatch(req.Header.Get("Authorization")); m != nil {
			key = m[1]
		}
		r.mu.Lock()
		r.seen = append(r.seen, recorded{req.Host, req.URL.Path, key})
		r.mu.Unlock()
		// A virtual-hosted request names the bucket in the host, as
		// gofakes3's WithHostBucket middleware reads it.
		if bucket, _, ok := strings.Cut(req.Host, "."); ok && bucket == testBucket {
			req.URL.Path = "/" + bucket + req.URL.Path
		}
		next.ServeHTTP(w, req)
	})
}

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.seen...)
}

// TestAddressingStyle: path_style = true puts the bucket in the path
// (http://host/bucket/key), as most S3-compatible stores need; false, as
// AWS wants, in the host name (http://bucket.host/key). Every connection
// is dialled to the fake, whatever the name.
func TestAddressingStyle(t *testing.T) {
	var rec recorder
	f := startFakeS3With(t, rec.front, func(srv *httptest.Server) { srv.Start() })
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.URL, "http://"))
	endpoint := "http://s3.walcast.test:" + port
	for _, pathStyle := range []bool{true, false} {
		t.Run(fmt.Sprintf("path_style=%v", pathStyle), func(t *testing.T) {
			s := newSink(discardLogger())
			ctx := context.Background()
			prefix := fmt.Sprintf("style%v", pathStyle)
			cfg := testConfig(t, f, map[string]any{"endpoint": endpoint, "path_style": pathStyle, "prefix": prefix})
			if err := s.Configure(ctx, pluginkit.Setup{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			defer s.Close(ctx)
			var d net.Dialer
			s.transport.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, "127.0.0.1:"+port)
			}
			before := len(rec.requests())
			if _, err := s.Open(ctx); err != nil {
				t.Fatal(err)
			}
			deliver(t, s, pluginkit.Batch{Events: []pluginkit.Event{ev(t, 0xC0, 0, "orders", "insert", day1, `{"id":1}`, `{"id":1}`)}})
			wantHost, wantPath := "s3.walcast.test:"+port, "/"+testBucket+"/"+prefix+"/"
			if !pathStyle {
				wantHost, wantPath = testBucket+".s3.walcast.test:"+port, "/"+prefix+"/"
			}
			reqs := rec.requests()[before:]
			if len(reqs) < 3 { // the checkpoint read, the object, the checkpoint
				t.Fatalf("%d requests: %+v", len(reqs), reqs)
			}
			for _, r := range reqs {
				if r.host != wantHost || !strings.HasPrefix(r.path, wantPath) {
					t.Fatalf("request to %s%s; want host %s, path under %s", r.host, r.path, wantHost, wantPath)
				}
			}
			if keys := f.keys(prefix + "/public.orders/"); len(keys) != 1 {
				t.Fatalf("objects %v", keys)
			}
		})
	}
}

// TestCredentialSources: without access_key_id the sink takes credentials
// from the SDK's chain: the environment, or a profile of the shared
// credentials file; with none anywhere Open fails fatally and says where
// to put them. (Container and instance roles are the same chain's later
// links; they need a metadata endpoint, which the test turns off.)
func TestCredentialSources(t *testing.T) {
	var rec recorder
	f := startFakeS3With(t, rec.front, func(srv *httptest.Server) { srv.Start() })
	dir := t.TempDir()
	credFile := filepath.Join(dir, "credentials")
	os.WriteFile(credFile, []byte("[archive]\naws_access_key_id = from-profile\naws_secret_access_key = s\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "config"), nil, 0o600)
	// Nothing of the machine's: no credentials in the environment or
	// $HOME/.aws, no instance metadata, no container endpoint.
	for k, v := range map[string]string{
		"HOME": dir, "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "none"), "AWS_CONFIG_FILE": filepath.Join(dir, "config"),
		"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "", "AWS_ROLE_ARN": "",
	} {
		t.Setenv(k, v)
	}
	noStatic := map[string]any{"access_key_id": nil, "secret_access_key": nil}
	open := func(t *testing.T, extra map[string]any) (*Sink, error) {
		s := newSink(discardLogger())
		cfg := testConfig(t, f, extra)
		if err := s.Configure(context.Background(), pluginkit.Setup{Config: cfg}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		_, err := s.Open(context.Background())
		return s, err
	}
	wantKey := func(t *testing.T, before int, key string) {
		reqs := rec.requests()[before:]
		if len(reqs) == 0 {
			t.Fatal("no request")
		}
		for _, r := range reqs {
			if r.accessKey != key {
				t.Fatalf("request signed with %q, want %q", r.accessKey, key)
			}
		}
	}

	t.Run("none", func(t *testing.T) {
		_, err := open(t, noStatic)
		if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindFatal || !strings.Contains(fmt.Sprint(err), "find AWS credentials") {
			t.Fatalf("Open without credentials: %v (%v); want a fatal error saying where to put them", err, kind)
		}
	})
	t.Run("environment", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "from-env")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
		before := len(rec.requests())
		if _, err := open(t, noStatic); err != nil {
			t.Fatal(err)
		}
		wantKey(t, before, "from-env")
	})
	t.Run("profile", func(t *testing.T) {
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
		before := len(rec.requests())
		if _, err := open(t, map[string]any{"access_key_id": nil, "secret_access_key": nil, "profile": "archive"}); err != nil {
			t.Fatal(err)
		}
		wantKey(t, before, "from-profile")
	})
	t.Run("static", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", "from-env")
		t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
		before := len(rec.requests())
		if _, err := open(t, nil); err != nil {
			t.Fatal(err)
		}
		wantKey(t, before, "walcast") // testConfig's access_key_id wins over the environment
	})
}

// TestFailedMultipartAborted: a part that cannot be uploaded fails the
// batch as retryable, the upload is aborted so that no parts are left
// behind, no object appears at the key, and the retry writes it whole.
func TestFailedMultipartAborted(t *testing.T) {
	var failPart2 atomic.Bool
	var aborts atomic.Int64
	front := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			if failPart2.Load() && q.Get("partNumber") == "2" {
				writeS3Error(w, http.StatusInternalServerError, "InternalError")
				return
			}
			if r.Method == http.MethodDelete && q.Has("uploadId") {
				aborts.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}
	f := startFakeS3With(t, front, func(srv *httptest.Server) { srv.Start() })
	s, _ := openSink(t, f, map[string]any{"multipart_threshold": 5 << 20, "part_size": 5 << 20})
	big := ev(t, 0xD0, 0, "blobs", "insert", day1, `{"id":1}`, fmt.Sprintf(`{"id":1,"pad":%q}`, strings.Repeat("z", 11<<20)))
	failPart2.Store(true)
	_, err := s.Deliver(context.Background(), pluginkit.Batch{Events: []pluginkit.Event{big}})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable || !strings.Contains(fmt.Sprint(err), "upload part 2 of 3") {
		t.Fatalf("Deliver with a failing part: %v (%v); want retryable, naming the part", err, kind)
	}
	if aborts.Load() != 1 {
		t.Fatalf("%d aborts, want the upload aborted", aborts.Load())
	}
	ups, err := s.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(testBucket)})
	if err == nil && len(ups.Uploads) > 0 {
		t.Fatalf("uploads left open: %+v", ups.Uploads)
	}
	if keys := f.keys("cdc/public.blobs/"); len(keys) != 0 {
		t.Fatalf("objects after the failed upload: %v", keys)
	}
	failPart2.Store(false)
	deliver(t, s, pluginkit.Batch{Events: []pluginkit.Event{big}})
	keys := f.keys("cdc/public.blobs/")
	if len(keys) != 1 || !bytes.Equal(f.object(keys[0]), append(big.Payload, '\n')) {
		t.Fatalf("after the retry: %v", keys)
	}
}
