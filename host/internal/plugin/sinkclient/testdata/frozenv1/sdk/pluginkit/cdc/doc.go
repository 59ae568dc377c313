// Package cdc is walcast's event model: event ids (EventID,
// CompareEventIDs), events (Event, Op) and PostgreSQL LSNs in their text
// form. It depends on the standard library only, so that programs reading
// changes in library mode (host.Open) do not link the plugin machinery
// (go-plugin, gRPC) that pluginkit carries. pluginkit re-exports every name
// here; sinks use those.
package cdc
