// Package console serves walcast's web console: one page showing, per
// pipeline, the replication slot, each sink's state, checkpoint, parked
// events and hourly usage, and the slot's lag over the last hour, with
// buttons to replay parked events and to pause and resume.
//
// Everything shown comes from the source database (the walcast schema and
// pg_replication_slots), read by report.Gather as walcast status reads
// it, so the console runs on any machine that reaches the source, next to
// a daemon or not. The only state it keeps is the lag samples it takes
// itself, in memory.
//
// The buttons do not act on the database themselves: they call Actions,
// which the command line implements with the code paths of `walcast
// replay`, `pause` and `resume`, so a click makes exactly the requests
// the CLI makes.
//
// Security: state-changing requests are POSTs checked by
// net/http.CrossOriginProtection (Sec-Fetch-Site / Origin) and by a
// per-process CSRF token in each form. Without an access token the
// console answers only requests addressed to a loopback name (which
// defeats DNS rebinding); with one, every request must carry it (a
// cookie set by visiting /?token=..., or an Authorization: Bearer header).
// Whether a listen address needs a token is decided by NeedsToken.
package console
