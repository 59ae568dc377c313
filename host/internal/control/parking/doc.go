// Package parking keeps the events a sink gave up on until a replay
// delivers them: the parked events of each sink (walcast.parked) and the
// operator's requests to replay them (walcast.replay_requests).
//
// In: the events a sink's scheduler parks after max_attempts, with every
// later event of the same row (or table, behind a truncate) parked behind
// them; replay requests from `walcast replay` and the console, which wake
// the running daemon (control.Notify). Out: the parked events, per sink,
// row or table, in event id order, for the scheduler to hold rows back
// and to replay, and for `walcast parked`, status and the console; the
// pending requests, for the daemon.
//
// Invariants:
//
//   - Park writes a batch in one statement: all of it is on record or
//     none, so a restarted scheduler never delivers part of a row's
//     events past the rest.
//   - An update that changed the key is parked under both rows (Row and
//     OldRow) and holds both back.
//   - A replay request is stored until the daemon handled it
//     (DoneReplayRequest), so a crash or a swapped scheduler loses none.
package parking
