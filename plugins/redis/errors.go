package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

// classify turns a client error into a pluginkit error whose message says
// what was being done, what went wrong and, where there is one, what to do.
//
//   - authentication refused, TLS refused: retryable here (Deliver), with
//     the setting to fix; Open reports them as they are, which stops
//     walcast at start (a wrong password is not fixed by waiting).
//   - out of memory, no permission, a replica, a server loading its data:
//     retryable, naming the cause; an operator can fix them within the
//     retry window, and the host's policy bounds the retries.
//   - unreachable, timeouts, a broken connection, anything else: retryable.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err // already classified further down
	}
	addr := s.cfg.address
	switch {
	case redis.IsAuthError(err):
		user := s.cfg.username
		if user == "" {
			user = "default"
		}
		return pluginkit.Retryable(fmt.Errorf("%s: %s refused authentication as user %q: check username and password: %w", what, addr, user, err))
	case redis.IsPermissionError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: user %q may not run this command or write this key; grant it +@write +@stream +@transaction +hincrby +hget +hset +info on %s* and the checkpoint key: %w",
			what, s.cfg.username, s.cfg.streamPrefix, err))
	case redis.IsOOMError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: %s is out of memory (maxmemory); free memory, raise maxmemory or set maxlen: %w", what, addr, err))
	case redis.IsReadOnlyError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: %s is a read-only replica; point address at the primary: %w", what, addr, err))
	case redis.IsLoadingError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: %s is still loading its data set: %w", what, addr, err))
	case isTLSError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: TLS with %s failed; check tls (ca_file, server_name, cert_file): %w", what, addr, err))
	case isUnreachable(err):
		return pluginkit.Retryable(fmt.Errorf("%s: %s unreachable: %w", what, addr, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from %s: %w", what, addr, err))
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return pluginkit.Retryable(fmt.Errorf("%s: %s closed the connection%s: %w", what, addr, s.closedHint(), err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s: %w", what, err))
}

// isUnreachable reports a failure to reach the server at all.
func isUnreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// isTLSError reports a failed TLS handshake or certificate check, ours or
// the server's: crypto/tls returns an alert the server sent ("certificate
// required") as a *net.OpError whose Op is "remote error".
func isTLSError(err error) bool {
	var (
		rec     tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
		alert   tls.AlertError
	)
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "remote error" {
		return true
	}
	return errors.As(err, &rec) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &verify) || errors.As(err, &alert)
}

// closedHint names the TLS settings that make a server close a connection
// it just accepted: Redis resets a plain connection to its TLS port, and
// one without a client certificate when tls-auth-clients is on (its
// default), without telling the client why.
func (s *Sink) closedHint() string {
	switch t := s.cfg.tls; {
	case t == nil:
		return " (a server that speaks only TLS does that to a client without tls)"
	case len(t.Certificates) == 0:
		return " (a server that wants client certificates does that to a client without tls cert_file and key_file)"
	}
	return ""
}
