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

// The engine stays importable only from inside host: every package under
// host other than these public ones belongs in host/internal, so that
// changing it never breaks a program built on walcast.
func TestPublicPackagesUnderHost(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	public := map[string]bool{
		"github.com/walcast/walcast/host":        true, // library mode
		"github.com/walcast/walcast/host/cli":    true, // the command line, for cmd/walcast and the bench
		"github.com/walcast/walcast/host/pgtest": true, // throwaway clusters for tests
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !public[pkg] && !strings.HasPrefix(pkg, "github.com/walcast/walcast/host/internal/") {
			t.Errorf("%s is public API; move it under host/internal or add it to the public list on purpose", pkg)
		}
	}
}
