# rtrctl build, test and demo. `make test` and `make demo` install what is
# missing (Debian packages via apt-get when root) and start their own
# throwaway servers on loopback ports.

GO        ?= go
BIN       ?= bin/rtrctl
SERVICES  ?= $(CURDIR)/.services
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOTESTFLAGS ?= -p 2 -timeout 20m

.PHONY: all build deps test test-unit lint bench bench-scale demo services-up services-down fuzz clean

all: build

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/rtrctl

deps:
	@scripts/install-deps.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The whole suite against real servers: PostgreSQL 15 and MariaDB 10.11
# started once for the run (services-up), Kafka in-process (kfake).
test: deps lint
	@scripts/test.sh $(GOTESTFLAGS) ./...

services-up: deps
	@$(GO) run ./internal/testenv/cmd/rtr-services up $(SERVICES)

services-down:
	@$(GO) run ./internal/testenv/cmd/rtr-services down $(SERVICES)

fuzz:
	@scripts/fuzz.sh   # every fuzz target, FUZZTIME each (default 10s)

# Every benchmark: the speed and load runs, then the scale runs.
bench: deps build
	@scripts/bench.sh
	@BENCH_ROWS=$(BENCH_ROWS) scripts/bench-scale.sh

# Time and peak RSS of ingest, read and compact at 1M and BENCH_ROWS rows
# beside psql COPY (docs/benchmarks.md); slow, part of bench, not of test.
BENCH_ROWS ?= 10000000
bench-scale: deps build
	@BENCH_ROWS=$(BENCH_ROWS) scripts/bench-scale.sh

demo: deps build
	@scripts/demo.sh

clean:
	rm -rf bin $(SERVICES)
