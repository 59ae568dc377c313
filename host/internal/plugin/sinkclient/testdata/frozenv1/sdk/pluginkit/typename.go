package pluginkit

// ValidTypeName reports whether name can be a sink type: the name a
// plugin's Info declares, the label of a pipeline's sink block and the
// suffix of its executable, walcast-sink-<name>. It must never be able to
// name a path, so it is lower-case ASCII letters and digits, '_' and '-',
// starting with a letter or digit, at most 64 bytes. This is the one
// definition: the host's config checks, `walcast plugin install` and
// sinktest all use it.
func ValidTypeName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
