package pluginkit

import "testing"

func TestValidTypeName(t *testing.T) {
	for name, want := range map[string]bool{
		"webhook": true, "my-sink_2": true, "0x": true,
		"": false, "-x": false, "_x": false, "Webhook": false, "a.b": false,
		"../x": false, "a/b": false, "a b": false, string(make([]byte, 65)): false,
	} {
		if got := ValidTypeName(name); got != want {
			t.Errorf("ValidTypeName(%q) = %v, want %v", name, got, want)
		}
	}
}
