// Package daemon wires the pipelines of one walcast process together and
// supervises them (walcast run): the only package that knows every stage.
//
// In: the pipelines (config), a Launcher for their sink plugins, and the
// source databases. Out: each pipeline's events delivered to its sinks,
// its slot confirmed, its checkpoints and state written to the walcast
// schema, /metrics and /healthz.
//
// Per pipeline, only the leader streams (control/leader); each time this
// process leads it, a term runs (term.go), wired as
//
//	capture → fan-out → one scheduler per sink → plugin process
//	                          ↓ resolved
//	                     ack tracker → flush LSN → capture's confirmations
//	                                 → positions → checkpoints (saveLoop)
//
// with a durable sink that falls behind moved to a catch-up stream of its
// own (delivery/isolate) and back. openTerm builds a term in named steps
// (check the source, start the sinks, prepare the source, load the
// positions, build the schedulers, build the runner), run starts it,
// close ends it.
//
// Invariants: a slot or publication is created only once every plugin
// started (a failed start leaves nothing that retains WAL); the slot is
// confirmed only after the checkpoints covering it are written
// (checkpointsFirst); a term that lost its leadership delivers, confirms
// and checkpoints nothing more (fenced, fencedPlugin). Shutdown order (on
// ctx end): stop reading from the slot, let every scheduler finish its
// batch in flight (bounded by ShutdownTimeout), write the final
// checkpoints, confirm the final position to PostgreSQL, close the
// plugins.
package daemon
