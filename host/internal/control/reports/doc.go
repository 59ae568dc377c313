// Package reports holds what the leading daemon reports about a pipeline
// for the readers that run in other processes, perhaps on other
// machines (`walcast status`, the web console): each sink's hourly usage
// (walcast.usage), backlog (walcast.sink_backlog) and the error that last
// stopped it (walcast.sink_failures), and the state of each replication
// stream (walcast.streams).
//
// In: the daemon's counters and states, written every couple of seconds
// while it leads (usage also at shutdown, a sink failure when a sink
// stops the pipeline). Out: the same, read back, with the database's
// clock to judge a report's age.
//
// Invariants:
//
//   - Only the daemon knows a backlog or a stream's state (it lives in
//     memory): a report is trusted only while it is fresh (FreshAt), so a
//     daemon that stopped or lost the lead is not shown as streaming.
//   - Usage is additive: AddUsage adds counters to the hour's totals and
//     never replaces them.
//   - Nothing reported is not an error: LoadBacklogs and LoadStreams read
//     a database without the walcast schema as no report, and
//     LoadSinkFailures one whose schema an older walcast made as no
//     failure.
package reports
