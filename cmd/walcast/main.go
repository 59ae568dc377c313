// Command walcast streams every committed change of a PostgreSQL database
// to sinks (webhooks, Kafka, gRPC services, browsers) with stated
// guarantees. See README.md; the command line itself is host/cli.
package main

import (
	"os"

	"github.com/walcast/walcast/host/cli"
)

// buildVersion is set by the Makefile: -ldflags "-X main.buildVersion=...".
var buildVersion string

func main() { os.Exit(cli.Main(buildVersion, os.Args[1:], os.Stdout, os.Stderr)) }
