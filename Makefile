GO      ?= go
ARGS    ?=
TESTFLAGS ?= -race -count=1 -timeout 40m

.PHONY: run test build deps test-deps vet bench fuzz

## run: install the daemon's Python packages when missing (and allowed), then run aiod
run: deps
	$(GO) run ./cmd/aiod $(ARGS)

## test: install what the tests need, then vet and run every test with the race detector
test: test-deps vet
	$(GO) test $(TESTFLAGS) ./...

build:
	$(GO) build -o bin/aiod ./cmd/aiod

deps:
	.ci/deps.sh run

test-deps:
	.ci/deps.sh test

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

## bench: the REST-versus-floor latency benchmark (numbers in bench/README.md)
bench:
	$(GO) test ./bench/ -run '^$$' -bench . -benchtime 300x

## fuzz: a short run of each fuzz target
fuzz:
	$(GO) test ./gateway/ -run '^$$' -fuzz FuzzParseV2Execute -fuzztime 30s
	$(GO) test ./stream/ -run '^$$' -fuzz FuzzDecodeStream -fuzztime 30s
	$(GO) test ./kernel/ -run '^$$' -fuzz FuzzDecode -fuzztime 30s
