# walcast: build, test, demo, bench, proto.
#
#   make demo    throwaway PostgreSQL (on DEMO_PORT) + a pipeline + changes flowing to stdout
#   make test    everything CI runs (vet, gofmt, race-enabled tests)
#   make chaos   the fault-injection tests, ten times longer
#   make tools   the external clients the tests use (kcat, chromium, promtool, standardwebhooks) and conduit for make bench
#   make kafka   a Kafka-protocol broker (kfake) on 127.0.0.1:9092 (KAFKA_PORT)

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.buildVersion=$(VERSION)
# Every directory of plugins/ is a sink but internal/, the packages they share.
PLUGINS  := $(filter-out internal,$(notdir $(wildcard plugins/*)))

.PHONY: all build test chaos vet fmt-check demo bench clean tools kafka

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/walcast ./cmd/walcast
	@for p in $(PLUGINS); do \
		echo "$(GO) build -o $(BIN)/walcast-sink-$$p ./plugins/$$p"; \
		$(GO) build -o $(BIN)/walcast-sink-$$p ./plugins/$$p || exit 1; \
	done

# The repository holds four Go modules: the root (host, cmd, plugins,
# examples, bench) and, each with its own go.mod and version tags, the sink
# SDK pluginkit, its event model pluginkit/cdc and the wire contracts
# proto. `./...` stops at a nested module, so vet and test visit each.
MODULES  := pluginkit/cdc proto pluginkit .

vet:
	@for m in $(MODULES); do \
		echo "(cd $$m && $(GO) vet ./...)"; \
		(cd $$m && $(GO) vet ./...) || exit 1; \
	done

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Tests start their own PostgreSQL clusters from the machine's binaries
# (host/pgtest) and build the binaries they run themselves. go test starts
# packages in the order they are named, two at a time: the longest
# (LONG_TESTS) are named first, so that the rest run beside them instead
# of after them.
LONG_TESTS := ./host/cli ./bench ./cmd/walcast-demo
test: tools build vet fmt-check
	@for m in $(MODULES); do \
		pkgs=./...; [ "$$m" = . ] && pkgs="$(LONG_TESTS) ./..."; \
		echo "(cd $$m && $(GO) test -race -timeout 45m -count=1 $$pkgs)"; \
		(cd $$m && $(GO) test -race -timeout 45m -count=1 $$pkgs) || exit 1; \
	done

# chaos runs the fault-injection tests (kill loops, crash loops, proxies
# that reset or black-hole a connection, full disks, the randomised
# park/replay nemesis) CHAOS times longer than CI does: each scales its
# rounds by WALCAST_CHAOS.
CHAOS       ?= 10
CHAOS_TESTS ?= Chaos|Nemesis|Kill|Crash|Proxy|FullDisk|Fault|Silent
chaos: tools build
	WALCAST_CHAOS=$(CHAOS) $(GO) test -race -timeout 180m -count=1 -run '$(CHAOS_TESTS)' ./...

# tools installs what the tests run besides Go and PostgreSQL, the clients
# nobody on this project wrote that check each interface from the outside:
#   kcat (Debian)              what a read_committed librdkafka consumer sees
#   chromium (Debian)          EventSource and cross-origin fetch against sse,
#                              and the web console driven like a user
#   promtool (Debian's         the README's alert rules, with rule unit tests
#     prometheus package)
#   node + npm standardwebhooks  the Standard Webhooks reference verifier,
#     (npm package, into .tools/npm, git-ignored)
#   python3-grpcio,            examples/python-sink, a sink in another
#     python3-grpc-tools,      language that walcast plugin test and a
#     python3-cryptography     pipeline run (stubs generated from the .proto
#     (Debian)                 at build time, never committed)
#   systemd-analyze (Debian's  the example units in examples/systemd/
#     systemd package)
#   python3-jsonschema         walcast status --json against the schema in
#     (Debian)                 docs/status.schema.json
#   python3-boto3 (Debian),    what the s3 sink stored, listed and fetched
#     zstd (Debian)            over the S3 API, and its .jsonl.zst objects
#   hyparquet (npm package,    the s3 sink's Parquet objects, read by a
#     into .tools/npm)         reader that shares no code with parquet-go
#   rabbitmq-server (Debian)   the broker the rabbitmq sink's tests start
#   python3-pika (Debian)      an AMQP client nobody here wrote, draining
#                              what the rabbitmq sink published
#   nats-server (Debian)       the JetStream server the nats sink's tests start
#   redis-server, redis-cli    the Redis the redis sink's tests start, and the
#     (Debian redis-server,    independent client that reads its streams back
#     redis-tools)
# CI starts from a fresh machine, so `make test` runs this first. Each step
# is skipped when its client is already there; installing needs root or
# password-less sudo (the tests say what is missing otherwise).
APT_TOOLS   := kcat:kcat chromium:chromium promtool:prometheus node:nodejs npm:npm systemd-analyze:systemd zstd:zstd rabbitmq-server:rabbitmq-server nats-server:nats-server redis-server:redis-server redis-cli:redis-tools
PY_TOOLS    := grpc:python3-grpcio grpc_tools:python3-grpc-tools cryptography:python3-cryptography jsonschema:python3-jsonschema boto3:python3-boto3 pika:python3-pika
NPM_TOOLS   := standardwebhooks@1.1.1 hyparquet@1.33.0
NPM_DIR     := .tools/npm
tools:
	@missing=; for t in $(APT_TOOLS); do \
		command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; \
	done; \
	for t in $(PY_TOOLS); do \
		/usr/bin/python3 -c "import $${t%%:*}" >/dev/null 2>&1 || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then sudo=; \
		elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=sudo; \
		else echo "WARNING: missing test clients ($$missing) and installing them needs root: run 'sudo apt-get install -y$$missing'; the tests that use them fail in CI and skip by hand" >&2; missing=; fi; \
	fi; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		$$sudo apt-get install -y --no-install-recommends $$missing || \
			{ $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $$missing; } || exit 1; \
	fi
	@stale=; for p in $(NPM_TOOLS); do \
		name=$${p%@*}; want=$${p##*@}; \
		have=$$(node -p "require('./$(NPM_DIR)/node_modules/$$name/package.json').version" 2>/dev/null); \
		[ "$$have" = "$$want" ] || stale="$$stale $$p"; \
	done; \
	if [ -n "$$stale" ]; then \
		if ! command -v npm >/dev/null 2>&1; then echo "WARNING: npm is missing; cannot install$$stale" >&2; exit 0; fi; \
		echo "installing npm$$stale into $(NPM_DIR)"; \
		npm install --no-audit --no-fund --no-save --prefix $(NPM_DIR) $(NPM_TOOLS) || exit 1; \
	fi
	@mkdir -p $(BIN); [ -x $(BIN)/conduit ] || GOBIN=$(abspath $(BIN)) $(GO) install github.com/conduitio/conduit/cmd/conduit@$(CONDUIT_VERSION) || \
		echo "WARNING: could not install conduit $(CONDUIT_VERSION) from the Go module proxy; make bench skips its conduit path" >&2
# (One npm install for every package: with --no-save and no package.json,
# each install removes the packages the previous one put there.)
# Conduit is a peer that `make bench` runs next to walcast (docs/benchmarks.md,
# "Peers in the same run"); bench/conduit.go names the same version.
CONDUIT_VERSION ?= v0.14.0

# kafka runs kfake, an in-memory Kafka-protocol broker, on 127.0.0.1 (port
# KAFKA_PORT, default 9092) until interrupted; KAFKA_DATA keeps its state
# across restarts. For the demo and for trying the kafka sink by hand.
KAFKA_PORT ?= 9092
KAFKA_DATA ?=
# It runs the built binary, not `go run`, which exits 1 when interrupted:
# make would report Ctrl-C, the way to stop it, as an error.
kafka:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/walcast-kfake ./cmd/walcast-kfake
	$(BIN)/walcast-kfake -ports $(KAFKA_PORT) $(if $(KAFKA_DATA),-data-dir $(KAFKA_DATA) -sync)

# demo runs the built binary rather than `go run`: go run exits 1 when
# interrupted, which make reports as an error although Ctrl-C is how the
# demo is meant to end (walcast-demo itself exits 0 on it).
# DEMO_PORT puts the demo's PostgreSQL on that port of 127.0.0.1 (default:
# a free one), for psql from another terminal: make demo DEMO_PORT=54329.
DEMO_PORT ?=
demo: build
	$(GO) build -o $(BIN)/walcast-demo ./cmd/walcast-demo
	$(BIN)/walcast-demo --bin $(BIN) $(if $(DEMO_PORT),--port $(DEMO_PORT)) $(if $(DEMO_SINK),--sink $(DEMO_SINK))

# bench runs the benchmark of docs/benchmarks.md (a private PostgreSQL, the
# workload in fresh slots, each path drains one, 5 runs, best and medians) and writes
# bench/out/results.json. BENCHFLAGS passes flags to walcast-bench, e.g.
# BENCHFLAGS='-scale 0.1 -runs 1' for a quick run.
BENCHFLAGS ?=
bench: build
	$(GO) build -o $(BIN)/ ./cmd/walcast-bench ./cmd/walcast-kfake
	$(BIN)/walcast-bench -bin $(BIN) $(BENCHFLAGS)

clean:
	rm -rf $(BIN)

include proto/Makefile.inc
