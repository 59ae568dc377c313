package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walcast/walcast/pluginkit"
)

// isFenced reports whether err says that another producer now owns our
// transactional id. Produce requests learn it as InvalidProducerEpoch, the
// transaction coordinator answers ProducerFenced.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// isFencedCommit reports whether a failed commit means that someone else
// ended our transaction. Under KIP-890 (transaction version 2) a successor's
// InitProducerID aborts our open transaction and bumps the epoch by one; the
// coordinator then reads our commit, one epoch behind, as a retry of that
// abort and answers INVALID_TXN_STATE instead of PRODUCER_FENCED. Deliver
// aborts on its own long before the transaction timeout, so the other way
// to get there (the broker aborting a stalled transaction) does not occur
// in a live process.
func isFencedCommit(err error) bool {
	return isFenced(err) || errors.Is(err, kerr.InvalidTxnState)
}

// classify turns a client error into a pluginkit error whose message says
// what was being done, what went wrong and, where there is one, what to do.
//
//   - fenced: fatal; another producer owns the transactional id, so the
//     pipeline stops rather than park every later batch.
//   - a record larger than the limits: permanent; the same batch can never
//     succeed, so it goes to the host's park policy instead of looping.
//   - authorization and authentication failures: retryable, with the ACL
//     or credential to fix; an operator can fix them within the retry
//     window, and the host's policy bounds the retries.
//   - unreachable brokers, timeouts, anything else: retryable.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err // already classified further down
	}
	if _, ok := errors.AsType[*pluginkit.ConfigError](err); ok {
		return err
	}
	st := s.cfg
	switch {
	case isFenced(err):
		return pluginkit.Fatal(fmt.Errorf("%s: %w", what, err))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return pluginkit.Permanent(fmt.Errorf("%s: record too large for max_message_bytes (%d) or the topic's max.message.bytes; raise both to deliver it: %w",
			what, st.maxMessageBytes, err))
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return pluginkit.Retryable(fmt.Errorf("%s: not authorized; grant this principal WRITE (and DESCRIBE, CREATE) on topics %s.* and %s: %w",
			what, st.topicPrefix, st.checkpointTopic, err))
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return pluginkit.Retryable(fmt.Errorf("%s: not authorized; grant this principal WRITE and DESCRIBE on transactional id %q: %w", what, st.txnID, err))
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		return pluginkit.Retryable(fmt.Errorf("%s: not authorized on the cluster (IDEMPOTENT_WRITE, or CREATE for create_topics): %w", what, err))
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return pluginkit.Retryable(fmt.Errorf("%s: SASL authentication as %q with %s failed; check sasl.username, sasl.password and sasl.mechanism: %w",
			what, st.saslUser, st.saslMechanism, err))
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return pluginkit.Retryable(fmt.Errorf("%s: topic does not exist; create it or set create_topics = { enabled = true }: %w", what, err))
	case isUnreachable(err):
		return pluginkit.Retryable(fmt.Errorf("%s: brokers %v unreachable: %w", what, st.brokers, err))
	case errors.Is(err, context.DeadlineExceeded):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from brokers %v: %w", what, st.brokers, err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s: %w", what, err))
}

// isUnreachable reports a failure to reach a broker at all.
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
