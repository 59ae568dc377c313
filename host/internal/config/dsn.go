package config

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// checkDSN parses the source's connection string the way every walcast
// connection will, without connecting, so that a malformed one
// (`…@127.0.0.1:notaport/shop`) is an error at the dsn attribute of the
// file, reported by `walcast validate` offline and by every command before
// it tries to connect.
func (d *decoder) checkDSN(src *Source) {
	if src.DSN == "" || src.Type != sourceTypePostgres {
		return
	}
	if _, err := pgconn.ParseConfig(src.DSN); err != nil {
		d.errorf(src.DSNRange, "Invalid dsn",
			"The source's connection string cannot be parsed: %s. Write it as postgres://user:password@host:port/database?param=value, or as key=value pairs (host=… port=… dbname=… user=…).",
			dsnProblem(err))
	}
}

// dsnProblem is pgconn's reason without the connection string, which it
// quotes (with the password masked) and which the diagnostic's position
// already shows.
func dsnProblem(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "`: "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}
