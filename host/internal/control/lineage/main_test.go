package lineage

import (
	"testing"

	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }
