# walcast: build, test, demo, bench, proto.
#
#   make demo    throwaway PostgreSQL + a pipeline + changes flowing to stdout
#   make test    everything CI runs (vet, gofmt, race-enabled tests)

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.buildVersion=$(VERSION)
PLUGINS  := $(notdir $(wildcard plugins/*))

.PHONY: all build test vet fmt-check demo bench clean

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
test: build vet fmt-check
	$(GO) test -race -timeout 25m -count=1 ./...

demo: build
	$(GO) run ./cmd/walcast-demo --bin $(BIN)

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./...

clean:
	rm -rf $(BIN)

include proto/Makefile.inc
