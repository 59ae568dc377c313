package sinkclient

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/proto/sink/wire"
)

// A plugin sees only the allowlisted part of walcast's environment, the
// sink's own env, and go-plugin's handshake variables: never
// WALCAST_SOURCE_DSN or any other secret of the host.
func TestPluginEnvironmentIsAllowlisted(t *testing.T) {
	bin := filepath.Join(t.TempDir(), ExecutableName("envdump"))
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/envdump").CombinedOutput(); err != nil {
		t.Fatalf("build envdump: %v\n%s", err, out)
	}
	t.Setenv("WALCAST_SOURCE_DSN", "postgres://walcast:hunter2@db/app")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("HTTPS_PROXY", "http://proxy:3128")
	t.Setenv("TZ", "UTC")
	t.Setenv("WALCAST_PLUGIN_EXTRA", "1")
	info, err := Describe(t.Context(), Config{Path: bin, SinkID: "e", StartTimeout: time.Minute, Env: []string{"KAFKA_PASSWORD=from-the-sink"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range info.Config {
		got[f.Name] = f.Doc
	}
	// Variables go-plugin sets for the handshake.
	handshake := map[string]bool{wire.Handshake().MagicCookieKey: true, "PLUGIN_MIN_PORT": true, "PLUGIN_MAX_PORT": true,
		"PLUGIN_PROTOCOL_VERSIONS": true, "PLUGIN_CLIENT_CERT": true, "PLUGIN_MULTIPLEX_GRPC": true,
		"PLUGIN_UNIX_SOCKET_DIR": true, "PLUGIN_UNIX_SOCKET_GROUP": true}
	for name := range got {
		if !handshake[name] && !strings.HasPrefix(name, envPrefix) && len(AllowedEnv([]string{name + "=x"})) == 0 && name != "KAFKA_PASSWORD" {
			t.Errorf("plugin sees %s=%q, which is neither allowlisted nor passed by the sink", name, got[name])
		}
	}
	for name, want := range map[string]string{"HTTPS_PROXY": "http://proxy:3128", "TZ": "UTC", "WALCAST_PLUGIN_EXTRA": "1",
		"KAFKA_PASSWORD": "from-the-sink"} {
		if got[name] != want {
			t.Errorf("plugin sees %s=%q, want %q", name, got[name], want)
		}
	}
	if _, ok := got[wire.EnvLogLevel]; !ok {
		t.Errorf("plugin does not see %s", wire.EnvLogLevel)
	}
	if _, ok := got["WALCAST_SOURCE_DSN"]; ok {
		t.Error("plugin sees WALCAST_SOURCE_DSN")
	}
	t.Logf("plugin environment: %d variables", len(got))
}
