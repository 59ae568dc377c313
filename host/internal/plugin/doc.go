// Package plugin groups the host's side of the sink plugins.
//
// In: a sink's type and config from the pipeline file. Out: a running
// plugin process speaking the sink protocol, and the results of its
// Deliver calls.
//
//   - sinkclient finds a sink's executable, launches it with go-plugin
//     (gRPC, AutoMTLS, Pdeathsig), supervises and restarts it, and is the
//     one place that converts between the host's types and the wire;
//   - pluginlock installs plugins into a plugin directory and keeps the
//     lock file whose SHA-256 entries the host checks before launching an
//     installed plugin.
package plugin
