// Package ledger gives capture the control plane it needs: Store is
// capture.Ledger (walcast's schema in the source database, and what it
// keeps about one pipeline's source) over the control plane's stores.
//
// Capture declares that interface and never imports the control plane;
// this package is the one place that binds the two, for every caller that
// prepares, diagnoses or tears down a pipeline's source (the daemon, the
// command line, library mode). It holds no state of its own: every method
// is one read or write of the walcast schema, on the Querier it was made
// with.
package ledger
