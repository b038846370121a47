# lambdakit: build, test and run the sample payment function.
# `make test` runs every test (unit and integration against moto_server).

GO        ?= go
BIN       := bin
EVENT     ?= events/payments-new.json
# Flags for `make chaos`, e.g. CHAOS_FLAGS="-payments 5000 -seed 3" (go run ./tools/chaos -h)
CHAOS_FLAGS ?=
# Integration tests and the demo need moto_server (DynamoDB and SQS on one
# loopback port), `make lint` needs cfn-lint: Python programs. They come from
# PATH when the machine has them; otherwise make installs them on first use
# into .venv/, a virtual environment of this project (ignored by git, reused
# after), never into the system's Python (see scripts/venv-install).
VENV        := .venv
MOTO_SERVER := $(or $(shell command -v moto_server 2>/dev/null),$(VENV)/bin/moto_server)
CFN_LINT    := $(or $(shell command -v cfn-lint 2>/dev/null),$(VENV)/bin/cfn-lint)
# The tests and the demo look for moto_server on PATH: the venv's comes first
# when moto is installed there.
ifeq ($(MOTO_SERVER),$(VENV)/bin/moto_server)
WITH_MOTO   := PATH="$(abspath $(VENV))/bin:$$PATH"
endif

export AWS_EC2_METADATA_DISABLED := true

# staticcheck, pinned. `make lint` installs it with the Go toolchain into a
# directory of its own under bin/ when it is missing there; a new version
# gets a new directory, so bumping the pin reinstalls.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

.PHONY: all build test test-short lint bench demo invoke chaos deploy clean deps build-PaymentFunction

all: lint test

## deps: install what the tests and the demo need and the machine lacks
deps: $(MOTO_SERVER)

$(VENV)/bin/moto_server:
	@scripts/venv-install $(VENV) moto_server 'moto[server]'

$(VENV)/bin/cfn-lint:
	@scripts/venv-install $(VENV) cfn-lint cfn-lint

## build: the function (bin/bootstrap, for this machine) and the CLI (bin/lambdakit)
build:
	$(GO) build -o $(BIN)/bootstrap ./functions/payment
	$(GO) build -o $(BIN)/lambdakit ./cmd/lambdakit

## test: every test, with the race detector, integration tests included;
## one package at a time (-p 1): several start moto_server and real
## bootstraps with short function timeouts, and two such packages at once on
## 2 cores can starve each other into timeouts
test: deps
	$(WITH_MOTO) $(GO) test -race -count=1 -p 1 -timeout 15m ./...

## lint: go vet, gofmt, staticcheck and cfn-lint on the SAM template
lint: $(STATICCHECK) $(CFN_LINT)
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt: not formatted: $$out" >&2; exit 1; fi
	$(STATICCHECK) ./...
	$(CFN_LINT) template.yaml

$(STATICCHECK):
	GOBIN=$(abspath $(dir $@)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## bench: micro benchmarks, end to end against moto with the bare floor, cold start, flat cost (one run)
## BENCHFLAGS passes flags to the harness, e.g. BENCHFLAGS='-only flat -moto-patch=false'
bench: deps
	$(GO) run ./tools/bench $(BENCHFLAGS)

## fuzz: each fuzz target for FUZZTIME (default 30s); `make test` runs their seeds
# A run whose only failure is "context deadline exceeded" is Go's race at
# the end of -fuzztime (go.dev/issue/75804, before Go 1.27), not a finding.
# Minimizing each new input for the default 60 s would eat short runs.
FUZZTIME ?= 30s
FUZZMINIMIZETIME ?= 1s
FUZZ_TARGETS := FuzzKeyFromField FuzzPayloadCanonical FuzzBatch
.PHONY: fuzz
fuzz:
	@out=$$(mktemp); trap 'rm -f $$out' EXIT; \
	for t in $(FUZZ_TARGETS); do \
		echo "== $$t ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) ./lambdakit/ 2>&1 | tee $$out; \
		grep -q '^ok' $$out && continue; \
		if grep -q '^    context deadline exceeded$$' $$out && ! grep -qE '_test\.go:[0-9]+:|Failing input|panic:' $$out; then \
			echo "$$t: stopped by go.dev/issue/75804 at the end of -fuzztime; not a finding" >&2; continue; \
		fi; \
		exit 1; \
	done

## demo: the whole story locally, without Docker (moto, sandbox gateway, real bootstrap)
demo: deps build
	$(WITH_MOTO) $(GO) run ./functions/payment/demo -bootstrap $(BIN)/bootstrap -template template.yaml -events events

## invoke: the demo environment on the event files you name (EVENT="a.json b.json")
invoke: deps build
	$(WITH_MOTO) $(GO) run ./functions/payment/demo -bootstrap $(BIN)/bootstrap $(EVENT)

## chaos: the payment sample under faults, kills and duplicates across processes, one table of counts (a few minutes)
chaos: deps build
	$(WITH_MOTO) $(GO) run ./tools/chaos -bootstrap $(BIN)/bootstrap -template template.yaml $(CHAOS_FLAGS)

## deploy: sam build && sam deploy with samconfig.toml (needs the SAM CLI and AWS credentials)
deploy:
	sam build
	sam deploy

## build-PaymentFunction: what `sam build` runs (BuildMethod: makefile)
build-PaymentFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "build-PaymentFunction: ARTIFACTS_DIR is not set. 'sam build' sets it and runs this target; for a bootstrap on this machine run 'make build' (bin/bootstrap)." >&2; exit 2; }
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap ./functions/payment

## clean: the build outputs (the .venv stays: rm -rf .venv to reinstall moto and cfn-lint)
clean:
	rm -rf $(BIN) .aws-sam
