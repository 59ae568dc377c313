// Package change is the vocabulary shared by every stage an event passes
// through in the host, from decoding to the sinks' schedulers: the event
// as the engine carries it, and the contract between capture and whatever
// consumes its stream.
//
// In: nothing; it depends on pluginkit/cdc (the event a sink receives)
// and the standard library only, so that any stage may import it without
// importing another stage. Out: Event, what a sink receives
// (pluginkit/cdc.Event) plus the routing facts only the host uses, which
// never cross the plugin boundary; Layout, where the decoder wrote an
// envelope's parts; IdleEvery, the pace a consumer blocked by
// backpressure keeps answering the server at.
package change
