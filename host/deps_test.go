package host

import (
	"os/exec"
	"strings"
	"testing"
)

// Library mode must stay light: a program that reads changes with
// host.Open should not link go-plugin, gRPC or the sink SDK. The event
// model it needs lives in pluginkit/cdc for that reason.
func TestLibraryModeLinksNoPluginMachinery(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/hashicorp/go-plugin", "google.golang.org/grpc", "github.com/walcast/walcast/pluginkit"} {
			if dep == banned || strings.HasPrefix(dep, banned+"/") && dep != "github.com/walcast/walcast/pluginkit/cdc" {
				t.Errorf("host depends on %s", dep)
			}
		}
	}
}
