package pluginkit

import (
	"context"
	"testing"
)

func TestIdentityTravelsInContext(t *testing.T) {
	if got := IdentityFrom(context.Background()); got != (Identity{}) {
		t.Fatalf("identity on a bare context: %+v", got)
	}
	want := Identity{Pipeline: "shop", SinkID: "billing"}
	if got := IdentityFrom(WithIdentity(context.Background(), want)); got != want {
		t.Fatalf("IdentityFrom = %+v, want %+v", got, want)
	}
}
