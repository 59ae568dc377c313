package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walcast/walcast/pluginkit"
)

// classify turns an error into a pluginkit error whose message says what
// was being done, what went wrong and what to do. Everything is retryable
// (the host parks after max_attempts) except what Open turns permanent:
//
//   - credentials or vhost refused (403): names the user and vhost;
//   - an exchange that does not exist (404) with declare_exchange = false,
//     or exists with another type (406): names the exchange;
//   - an unreachable broker, a closed connection, a timeout: names the
//     broker.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err
	}
	st := s.cfg
	var ae *amqp.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return pluginkit.Retryable(fmt.Errorf("%s: broker %s refused user %q: check username and password (or those in url) and the user's permissions on the vhost: %w",
			what, st.broker, st.user, err))
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return pluginkit.Retryable(fmt.Errorf("%s: exchange %q does not exist on %s: declare it, or set declare_exchange = true: %w", what, st.exchange, st.broker, err))
	case errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed:
		return pluginkit.Retryable(fmt.Errorf("%s: broker %s refused: %w (an exchange %q of another type than %s? declare_exchange needs the same type)",
			what, st.broker, err, st.exchange, st.exchangeType))
	case unreachable(err):
		return pluginkit.Retryable(fmt.Errorf("%s: broker %s cannot be reached: %w", what, st.broker, err))
	case errors.Is(err, amqp.ErrClosed):
		return pluginkit.Retryable(fmt.Errorf("%s: the connection to broker %s closed (the broker restarted or went away); the next attempt reconnects: %w", what, st.broker, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from broker %s: %w", what, st.broker, err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s: broker %s: %w", what, st.broker, err))
}

// unreachable reports a failure to reach the broker at all.
func unreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
