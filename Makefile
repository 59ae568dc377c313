# walcast: build, test, demo, bench, proto.
#
#   make demo    throwaway PostgreSQL + a pipeline + changes flowing to stdout
#   make test    everything CI runs (vet, gofmt, race-enabled tests)
#   make tools   the external programs the tests use (kcat, chromium)
#   make kafka   a Kafka-protocol broker (kfake) on 127.0.0.1:9092

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.buildVersion=$(VERSION)
PLUGINS  := $(notdir $(wildcard plugins/*))

.PHONY: all build test vet fmt-check demo bench clean tools kafka

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/walcast ./cmd/walcast
	@for p in $(PLUGINS); do \
		echo "$(GO) build -o $(BIN)/walcast-sink-$$p ./plugins/$$p"; \
		$(GO) build -o $(BIN)/walcast-sink-$$p ./plugins/$$p || exit 1; \
	done

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Tests start their own PostgreSQL clusters from the machine's binaries
# (host/pgtest) and build the binaries they run themselves.
test: tools build vet fmt-check
	$(GO) test -race -timeout 25m -count=1 ./...

# tools installs what the tests run besides Go and PostgreSQL, from Debian:
# kcat, the independent librdkafka client that checks what a
# read_committed Kafka consumer sees, and chromium, the headless browser
# the console test drives. CI starts from a fresh machine, so this runs
# before tests; each is installed only when missing.
TOOLS := kcat:kcat chromium:chromium
tools:
	@missing=; for t in $(TOOLS); do \
		command -v "$${t%%:*}" >/dev/null 2>&1 || missing="$$missing $${t#*:}"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=sudo; \
	else echo "WARNING:$$missing missing and installing needs root: run 'sudo apt-get install -y$$missing'; the tests that use them fail until they are installed" >&2; exit 0; fi; \
	echo "installing$$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y --no-install-recommends $$missing || { $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $$missing; }

# kafka runs kfake, an in-memory Kafka-protocol broker, on 127.0.0.1 (port
# KAFKA_PORT, default 9092) until interrupted; KAFKA_DATA keeps its state
# across restarts. For the demo and for trying the kafka sink by hand.
KAFKA_PORT ?= 9092
KAFKA_DATA ?=
kafka:
	$(GO) run ./cmd/walcast-kfake -ports $(KAFKA_PORT) $(if $(KAFKA_DATA),-data-dir $(KAFKA_DATA) -sync)

demo: build
	$(GO) run ./cmd/walcast-demo --bin $(BIN)

# bench runs the benchmark of BENCHMARKS.md (a private PostgreSQL, the
# workload in fresh slots, each path drains one, 3 runs, medians) and writes
# bench/out/results.json. BENCHFLAGS passes flags to walcast-bench, e.g.
# BENCHFLAGS='-scale 0.1 -runs 1' for a quick run.
BENCHFLAGS ?=
bench: build
	$(GO) build -o $(BIN)/ ./cmd/walcast-bench ./cmd/walcast-kfake
	$(BIN)/walcast-bench -bin $(BIN) $(BENCHFLAGS)

clean:
	rm -rf $(BIN)

include proto/Makefile.inc
