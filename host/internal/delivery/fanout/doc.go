// Package fanout gives each sink its own bounded queue and copies every
// captured event into all of them.
//
// In: events and transaction ends from capture (Fanout has the methods
// capture.Consumer asks for), on capture's goroutine. Out: one Queue per
// sink, read by that sink's scheduler; every event registered with the
// ack tracker before it is queued, so that the tracker knows of it before
// any sink can resolve it.
//
// A full queue of a durable sink pauses the stream (backpressure): the
// capture loop blocks here, answering the server meanwhile through the
// idle callback every change.IdleEvery, and PostgreSQL keeps the changes
// in the slot. A non-durable sink never holds the stream back: when its
// queue is full the event is dropped for that sink, resolved, counted,
// and the sink told of the gap with its next event. A queue is bounded in
// events and in payload bytes.
//
// Capture hands over every event once, reconnects included, so fanout
// needs no deduplication of its own. A sink detached (package isolate)
// gets nothing until it rejoins, and then only events added after.
package fanout
