package cli

import "runtime/debug"

// version is the version to print: the one the build stamped (the Makefile
// sets cmd/walcast's buildVersion with -ldflags), else the module's.
func version(buildVersion string) string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return v + " (" + s.Value[:12] + ")"
			}
		}
		return v
	}
	return "unknown"
}
