// Package pauses holds the operator's pauses of a pipeline
// (walcast.pauses): one row per sink paused on its own, and one with an
// empty sink when the whole pipeline is paused.
//
// In: `walcast pause` and `walcast resume` and the console's buttons
// (SetPaused), which wake the running daemon (control.Notify). Out: the
// pause state (LoadPauses), which the daemon hands to each sink's
// scheduler on every notification and poll, and which status and the
// console show.
//
// Invariants:
//
//   - A pipeline pause covers every sink, whatever their own rows say;
//     resuming the pipeline also resumes every sink paused on its own.
//   - A pause stops new deliveries only: nothing is dropped, the events
//     wait in the slot.
package pauses
