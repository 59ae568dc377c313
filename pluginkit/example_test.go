package pluginkit_test

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Event ids must be compared parsed: in string order "0/A:0" would sort
// after "0/1A:0", although 0xA < 0x1A. CompareEventIDs is the one
// definition of order the host, the sinks and the receivers share.
func ExampleCompareEventIDs() {
	ids := []string{"0/1A:0", "0/A:1", "1/0:0", "0/A:0", "0/A:10", "0/A:2"}
	slices.SortFunc(ids, pluginkit.CompareEventIDs)
	fmt.Println(ids)

	fmt.Println(pluginkit.CompareEventIDs("0/A:0", "0/1A:0"))
	fmt.Println(pluginkit.CompareEventIDs("0/1A:0", "0/1a:0")) // the same LSN, either case
	// A malformed id sorts before every valid one, so the order stays total.
	fmt.Println(pluginkit.CompareEventIDs("not-an-id", "0/0:0"))
	// Output:
	// [0/A:0 0/A:1 0/A:2 0/A:10 0/1A:0 1/0:0]
	// -1
	// 0
	// -1
}

// A receiver parses the id of each event it gets, to compare it or to store
// it in a form that sorts correctly.
func ExampleParseEventID() {
	id, err := pluginkit.ParseEventID("0/1A2B3C8:3")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("commit LSN %#x, change %d of its transaction\n", id.CommitLSN, id.Index)

	next := pluginkit.EventID{CommitLSN: id.CommitLSN, Index: id.Index + 1}
	fmt.Println(id.Less(next), id.Compare(next))

	_, err = pluginkit.ParseEventID("0/1A2B3C8:03")
	fmt.Println(err)
	// Output:
	// commit LSN 0x1a2b3c8, change 3 of its transaction
	// true -1
	// parse event id "0/1A2B3C8:03": index must be a decimal number without sign or leading zeros
}

// String prints the canonical form whatever case the id was parsed from,
// so ids stored as strings compare equal byte for byte.
func ExampleEventID_String() {
	id := pluginkit.MustParseEventID("2/a0:7")
	fmt.Println(id)

	id = pluginkit.EventID{CommitLSN: 0x1_0000_00FF, Index: 0}
	fmt.Println(id.String())
	// Output:
	// 2/A0:7
	// 1/FF:0
}

// A sink wraps the errors Deliver returns so that the host knows whether to
// pause (throttled), retry with backoff (the default) or park the events
// (permanent). The kind survives further wrapping with %w.
func ExampleKindOf() {
	errs := []error{
		pluginkit.Throttled(7*time.Second, errors.New("HTTP 429")),
		fmt.Errorf("deliver batch: %w", pluginkit.Permanent(errors.New("HTTP 413: body too large"))),
		errors.New("connection reset by peer"),
	}
	for _, err := range errs {
		kind, after := pluginkit.KindOf(err)
		fmt.Printf("%-9s %-4s %v\n", kind, after, err)
	}
	// Output:
	// throttled 7s   throttled for 7s: HTTP 429
	// permanent 0s   deliver batch: HTTP 413: body too large
	// retryable 0s   connection reset by peer
}
