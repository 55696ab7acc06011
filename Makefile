GO      ?= go
ARGS    ?=
TESTFLAGS ?= -race -count=1 -parallel 4 -timeout 45m
# The packages whose tests take longest go first, so that they start first:
# go test ./... runs two packages at a time on two cores, in this order.
TESTPKGS ?= ./gateway ./cmd/aiod ./gateway/e2e ./kernel ./kernel/remote ./...

.PHONY: run test test-short build deps test-deps vet vendor bench bench-quick bench-go fuzz

## run: install the daemon's Python packages when missing (and allowed), then run aiod
run: deps
	$(GO) run ./cmd/aiod $(ARGS)

## test: install what the tests need, then vet and run every test with the race detector
## (-trimpath: builds do not depend on the clone's folder, so a fresh clone reuses the
## build cache: 69 s of compiling on this machine otherwise, and the daemon the tests build)
test: export GOFLAGS += -trimpath
test: test-deps vet
	$(GO) test $(TESTFLAGS) $(TESTPKGS)

## test-short: the fast layer: unit tests only (no kernels, daemons, servers or browsers), well under 2 minutes
test-short:
	$(GO) test -short -count=1 ./...

build:
	$(GO) build -buildvcs=auto -o bin/aiod ./cmd/aiod

deps:
	.ci/deps.sh run

test-deps:
	.ci/deps.sh test

## vendor: rebuild the notebook page's bundled libraries (web/static/vendor/) from
## web/vendor/package-lock.json; commit the result (web.TestVendorBundleIsCurrent checks it)
vendor:
	npm ci --prefix web/vendor --no-audit --no-fund --ignore-scripts
	node web/vendor/build.mjs

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

## bench: the full comparison (floor, aiod REST/WS, Jupyter Server, one-shots, memory), minutes
bench: test-deps
	$(GO) run ./bench/cmd/aiobench compare --json bench/results/full.json --svg bench/results/full.svg

## bench-quick: the same in under a minute, with fewer kernels (labelled in its output)
bench-quick: test-deps
	$(GO) run ./bench/cmd/aiobench compare --quick --json bench/results/quick.json --svg bench/results/quick.svg

## bench-go: the Go benchmarks (REST vs floor, one-shots, remote kernels, WebSocket delay)
bench-go:
	$(GO) test ./bench/ -run '^$$' -bench . -benchtime 200x
	$(GO) test ./gateway/ -run '^$$' -bench "WSStreamDelay|SSEvsWSDelay" -benchtime 2000x

## fuzz: a short run of each fuzz target
fuzz:
	$(GO) test ./gateway/call/ -run '^$$' -fuzz FuzzParseExecute -fuzztime 30s
	$(GO) test ./stream/ -run '^$$' -fuzz FuzzDecodeStream -fuzztime 30s
	$(GO) test ./kernel/ -run '^$$' -fuzz FuzzDecode -fuzztime 30s
	$(GO) test ./gateway/guard/ -run '^$$' -fuzz FuzzParseHost -fuzztime 30s
	$(GO) test ./gateway/guard/ -run '^$$' -fuzz FuzzParseOrigin -fuzztime 30s
