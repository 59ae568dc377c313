package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/pluginkit"
)

// rowError reports whether err is the server refusing the data of a
// statement rather than the statement or the connection failing: a value
// the column's type does not accept or that is too long (class 22), a
// constraint (class 23), a limit such as an index row too large (54), a
// column the target table lacks (42703) or of another type (42804). Such a
// failure belongs to one event, which the sink then looks for.
func rowError(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch {
	case strings.HasPrefix(pe.Code, "22"), strings.HasPrefix(pe.Code, "23"), strings.HasPrefix(pe.Code, "54"):
		return true
	case pe.Code == "42703", pe.Code == "42804":
		return true
	}
	return false
}

// authError reports whether the server refused the credentials: a wrong
// password (28P01), or no pg_hba.conf entry or role (28000).
func authError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28")
}

// classify turns an error into a pluginkit error whose message says what
// was being done, what went wrong and what to do:
//
//   - a row the server refuses (rowError): permanent, that event is parked
//     and the rest of the stream goes on; `walcast replay` brings it back
//     once the target accepts it;
//   - refused credentials: retryable, naming the user and what to check
//     (the host parks after max_attempts; at start the sink fails instead,
//     see Open);
//   - an unreachable server, a server starting up or shutting down, a lost
//     connection, a timeout, anything else: retryable, naming the target.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err
	}
	st := s.cfg
	var pe *pgconn.PgError
	switch {
	case rowError(err):
		return pluginkit.Permanent(fmt.Errorf("%s: the target database %s refused the row: %w", what, st.target, err))
	case authError(err):
		return pluginkit.Retryable(fmt.Errorf("%s: the target database %s refused user %q: check the user and password in dsn (or password), and a pg_hba.conf entry for this host: %w",
			what, st.target, st.pool.ConnConfig.User, err))
	case errors.As(err, &pe) && pe.Code == "3D000":
		return pluginkit.Retryable(fmt.Errorf("%s: database of dsn does not exist on %s: create it or fix dsn: %w", what, st.target, err))
	case errors.As(err, &pe) && pe.Code == "42501":
		return pluginkit.Retryable(fmt.Errorf("%s: user %q lacks a privilege on %s (it needs CREATE on the target schemas when it creates tables, and INSERT, UPDATE, DELETE, TRUNCATE, SELECT on the tables): %w",
			what, st.pool.ConnConfig.User, st.target, err))
	case unreachable(err):
		return pluginkit.Retryable(fmt.Errorf("%s: the target database %s cannot be reached: %w", what, st.target, err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from the target database %s: %w", what, st.target, err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s: target database %s: %w", what, st.target, err))
}

// unreachable reports a failure to reach the server at all, or a server
// that is not taking connections (starting up, shutting down).
func unreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "57P03" || pe.Code == "57P01" || strings.HasPrefix(pe.Code, "08")) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}
