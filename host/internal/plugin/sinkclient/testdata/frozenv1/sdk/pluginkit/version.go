package pluginkit

import "runtime/debug"

// BuildVersion returns the version of the main module the running binary
// was built from: the module version for a plugin installed with
// `walcast plugin install module@version` (go install), "(devel)" for a
// build inside its own checkout. Sinks without a version of their own can
// report it in Info.Version.
func BuildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" {
		return "(devel)"
	}
	return bi.Main.Version
}
