package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/pluginkit"
)

// JetStream error codes the sink tells apart (nats-server's errors.json).
const (
	codeMessageTooLarge jetstream.ErrorCode = 10054 // the stream's max_msg_size
	codeStreamMismatch  jetstream.ErrorCode = 10060 // Nats-Expected-Stream names another stream
	codeStoreFailed     jetstream.ErrorCode = 10077 // a limit of the stream, e.g. full with discard new
)

// publishError classifies the failure of one event's publish or ack.
//
//   - larger than the server's max_payload or the stream's max_msg_size:
//     permanent, named; that event can never be stored as it is.
//   - the subject is stored by another stream: fatal; every event would
//     fail the same way, so the pipeline stops with what to change.
//   - anything else (no ack in time, disconnected, no stream answered,
//     a full stream): retryable, naming the cause.
func (s *Sink) publishError(e *pluginkit.Event, err error) error {
	st := s.cfg
	subj, _ := st.subject(e) // Deliver published it: the subject is valid
	what := fmt.Sprintf("publish event %s (%d bytes) to %s", e.ID, len(e.Payload), subj)
	var api *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return pluginkit.Permanent(fmt.Errorf("%s: larger than the server's max_payload (%d bytes); raise max_payload in the server's configuration to deliver it: %w",
			what, s.maxPayload(), err))
	case errors.As(err, &api) && api.ErrorCode == codeMessageTooLarge:
		return pluginkit.Permanent(fmt.Errorf("%s: larger than stream %s's max_msg_size; raise it to deliver it: %w", what, st.stream, err))
	case errors.As(err, &api) && api.ErrorCode == codeStreamMismatch:
		return pluginkit.Fatal(fmt.Errorf("%s: the subject is stored by another stream than %s; set stream, or change the streams' subjects: %w", what, st.stream, err))
	case errors.As(err, &api) && api.ErrorCode == codeStoreFailed:
		return pluginkit.Retryable(fmt.Errorf("%s: stream %s refused to store it (a limit of the stream; with discard new, a full stream): %w", what, st.stream, err))
	case errors.Is(err, jetstream.ErrNoStreamResponse) && e.Route != "":
		return pluginkit.Retryable(fmt.Errorf("%s: no stream answered: is JetStream up, and does stream %s store %s.> (routed events go to <subject_prefix>.<route>)?: %w", what, st.stream, st.subjectPrefix, err))
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return pluginkit.Retryable(fmt.Errorf("%s: no stream answered: is JetStream up, and stream %s on that subject?: %w", what, st.stream, err))
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return pluginkit.Retryable(fmt.Errorf("%s: no acknowledgement within ack_timeout (%s): %w", what, st.ackTimeout, err))
	}
	return s.classify(what, err)
}

// maxPayload is the connected server's max_payload, 0 when unknown.
func (s *Sink) maxPayload() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc == nil {
		return 0
	}
	return s.nc.MaxPayload()
}

// classify turns a connection or API error into a pluginkit error saying
// what was being done, what went wrong and what to check.
//
//   - authentication refused, TLS refused: retryable (Open reports them
//     as they are, which stops walcast at start).
//   - unreachable, disconnected, timeouts, JetStream not answering:
//     retryable.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err
	}
	if _, ok := errors.AsType[*pluginkit.ConfigError](err); ok {
		return err
	}
	servers := redactAll(s.cfg.servers)
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return pluginkit.Retryable(fmt.Errorf("%s: NATS refused authentication (%s); check %s: %w", what, s.authMethod(), s.authFields(), err))
	case isTLSError(err), errors.Is(err, nats.ErrTLS), errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return pluginkit.Retryable(fmt.Errorf("%s: TLS with %v failed; check tls (ca_file, server_name, cert_file) and the server URLs' scheme: %w", what, servers, err))
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return pluginkit.Retryable(fmt.Errorf("%s: JetStream is not enabled on %v (nats-server -js, or jetstream {} in its configuration) or for this account: %w", what, servers, err))
	case isUnreachable(err):
		return pluginkit.Retryable(fmt.Errorf("%s: NATS servers %v unreachable: %w", what, servers, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from %v: %w", what, servers, err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s: %w", what, err))
}

// authMethod names the configured way to authenticate.
func (s *Sink) authMethod() string {
	switch st := s.cfg; {
	case st.username != "":
		return fmt.Sprintf("as user %q", st.username)
	case st.token != "":
		return "with token"
	case st.credsFile != "":
		return "with credentials_file " + st.credsFile
	case st.nkeySeedFile != "":
		return "with nkey_seed_file " + st.nkeySeedFile
	}
	return "without credentials"
}

func (s *Sink) authFields() string {
	switch st := s.cfg; {
	case st.username != "":
		return "username and password"
	case st.token != "":
		return "token"
	case st.credsFile != "":
		return "credentials_file"
	case st.nkeySeedFile != "":
		return "nkey_seed_file"
	}
	return "the server requires credentials: set username and password, token, nkey_seed_file or credentials_file"
}

// isUnreachable reports a failure to reach any server at all.
func isUnreachable(err error) bool {
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrReconnectBufExceeded) {
		return true
	}
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

// isTransient reports an error worth retrying (the kind classify gives).
func isTransient(err error) bool {
	kind, _ := pluginkit.KindOf(err)
	return kind == pluginkit.KindRetryable
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
