package pg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectError is a failed connection to the source, in one line with its
// real cause first. pgx tries every address and TLS mode the dsn allows
// and joins their errors over several lines: with the default
// sslmode=prefer a server without TLS answers the first attempt with
// "server refused TLS connection", a red herring when the second,
// plain attempt then fails for the reason that matters (a wrong password,
// say). The cause kept is PostgreSQL's own error when one attempt got
// one, else the last attempt's; it stays in the chain, so Permanent and
// Explain see it.
type ConnectError struct {
	// What names the connection: "connect to source database
	// 127.0.0.1:5432/shop as role app".
	What  string
	Cause error
}

func (e *ConnectError) Error() string {
	return e.What + ": " + strings.Join(strings.Fields(e.Cause.Error()), " ")
}

func (e *ConnectError) Unwrap() error { return e.Cause }

// ConnectFailed wraps err, the error of connecting with cfg for what
// ("connect to source database", "open replication connection"), as a
// *ConnectError.
func ConnectFailed(what string, cfg *pgconn.Config, err error) error {
	if cfg != nil {
		what = fmt.Sprintf("%s %s:%d/%s as role %s", what, cfg.Host, cfg.Port, cfg.Database, cfg.User)
	}
	return &ConnectError{What: what, Cause: connectCause(err)}
}

// connectCause picks the error worth reading from pgx's attempts.
func connectCause(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err
	}
	inner := errors.Unwrap(ce)
	if joined, ok := inner.(interface{ Unwrap() []error }); ok {
		if errs := joined.Unwrap(); len(errs) > 0 {
			return errs[len(errs)-1]
		}
	}
	if inner == nil {
		return err
	}
	return inner
}
