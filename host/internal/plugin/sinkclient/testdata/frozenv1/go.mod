module walcast.test/frozensink

go 1.22

require github.com/walcast/walcast/pluginkit v0.0.0-00010101000000-000000000000

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/hashicorp/go-plugin v1.6.1 // indirect
	github.com/hashicorp/yamux v0.1.2 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/mitchellh/go-testing-interface v0.0.0-20171004221916-a61a99592b77 // indirect
	github.com/oklog/run v1.1.0 // indirect
	github.com/walcast/walcast/pluginkit/cdc v0.0.0-00010101000000-000000000000 // indirect
	github.com/walcast/walcast/proto v0.0.0-00010101000000-000000000000 // indirect
	golang.org/x/net v0.34.0 // indirect
	golang.org/x/sys v0.29.0 // indirect
	golang.org/x/text v0.21.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20241219184827-bd154493cd20 // indirect
	google.golang.org/grpc v1.66.0 // indirect
	google.golang.org/protobuf v1.36.0 // indirect
)

replace (
	github.com/walcast/walcast/pluginkit => ./sdk/pluginkit
	github.com/walcast/walcast/pluginkit/cdc => ./sdk/pluginkit/cdc
	github.com/walcast/walcast/proto => ./sdk/proto
)
