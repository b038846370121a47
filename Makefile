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
# aws-sam-translator, pinned: make deploy-local and its test transform
# template.yaml with it (scripts/sam-transform), as CloudFormation's
# AWS::Serverless transform does. A python3 on PATH that has it is used as
# it is; otherwise it goes into the .venv, where the deploy looks next.
SAM_TRANSLATOR_VERSION := 1.110.0
SAM_TRANSLATOR := $(if $(shell python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("samtranslator") is None)' 2>/dev/null && echo y),,sam-translator)
# redis-server (or valkey-server): valkeystore's tests, the sample's test on
# Valkey and `make bench` start real ones. From PATH when the machine has
# one; otherwise scripts/redis-install installs the distribution's package
# with apt-get (as root, or through sudo without a password), or says what
# to run.
REDIS_SERVER := $(or $(shell command -v valkey-server 2>/dev/null),$(shell command -v redis-server 2>/dev/null),redis-server)
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
# actionlint, pinned, for .github/workflows: installed as staticcheck is.
ACTIONLINT_VERSION  := v1.7.12
ACTIONLINT          := $(BIN)/actionlint-$(ACTIONLINT_VERSION)/actionlint

.PHONY: all build test lint bench demo invoke chaos deploy clean deps build-PaymentFunction build-RelayFunction build-LedgerFunction

all: lint test

## deps: install what the tests and the demo need and the machine lacks
deps: $(MOTO_SERVER) $(SAM_TRANSLATOR) $(REDIS_SERVER)

.PHONY: redis-server
redis-server:
	@scripts/redis-install

# moto, pinned: the local stack's launcher (internal/motoserver/launcher.py)
# patches the moto versions it names in SUPPORTED_MOTO, and with any other it
# runs plain moto and warns (a test keeps this pin among them). A moto_server
# on PATH is used as it is; a .venv made before this pin keeps its moto until
# `rm -rf .venv && make deps`.
MOTO_VERSION := 5.2.1

$(VENV)/bin/moto_server:
	@scripts/venv-install $(VENV) moto_server 'moto[server]==$(MOTO_VERSION)'

$(VENV)/bin/cfn-lint:
	@scripts/venv-install $(VENV) cfn-lint cfn-lint

# aws-sam-translator into the .venv (SAM_TRANSLATOR, above)
.PHONY: sam-translator
sam-translator:
	@scripts/venv-install $(VENV) python:samtranslator 'aws-sam-translator==$(SAM_TRANSLATOR_VERSION)'

## build: the functions (bin/bootstrap, bin/relay, bin/ledger, for this machine) and the CLI (bin/lambdakit)
build:
	$(GO) build -o $(BIN)/bootstrap ./functions/payment
	$(GO) build -o $(BIN)/relay ./functions/relay
	$(GO) build -o $(BIN)/ledger ./functions/ledger
	$(GO) build -o $(BIN)/lambdakit ./cmd/lambdakit

## test: every test, integration tests included, the race detector on the
## packages where goroutines meet (tools/testrun lists them); progress
## package by package, then one line: packages, tests, time. TEST_P
## packages run at once per group; each starts its own servers.
## TESTRUN_FLAGS passes more flags, e.g. TESTRUN_FLAGS='-json=test.json -v'
## (go run ./tools/testrun -h lists them).
TEST_P ?= 2
TESTRUN_FLAGS ?=
test: deps
	$(WITH_MOTO) $(GO) run ./tools/testrun -p $(TEST_P) -timeout 15m $(TESTRUN_FLAGS)

## lint: go vet, gofmt, staticcheck, cfn-lint on the SAM templates, actionlint on the workflows
lint: $(STATICCHECK) $(CFN_LINT) $(ACTIONLINT)
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt: not formatted: $$out" >&2; exit 1; fi
	$(STATICCHECK) ./...
	$(CFN_LINT) template.yaml tools/e2e/gateway.yaml
	$(ACTIONLINT) .github/workflows/*.yml

$(STATICCHECK):
	GOBIN=$(abspath $(dir $@)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(ACTIONLINT):
	GOBIN=$(abspath $(dir $@)) $(GO) install github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION)

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

## demo: the whole story locally, without Docker (moto, sandbox gateway, real bootstrap);
## VALKEY=1 keeps the idempotency records in a redis-server the demo starts (valkeystore)
demo: deps build
	$(WITH_MOTO) $(GO) run ./functions/payment/demo -bootstrap $(BIN)/bootstrap -relay-bootstrap $(BIN)/relay -ledger-bootstrap $(BIN)/ledger -template template.yaml -events events $(if $(filter 1,$(VALKEY)),-valkey)

# The shell commands that start `demo local` (moto_server, the gateway, the
# tables) on free ports in the background, its PID in $$pid, and wait up to
# 60 s for the environment file it writes, $$dir/env.json. $(1) is the
# target, for messages; $(2) goes before the command (setsid, or nothing).
demo_local_start = $(GO) build -o $$dir/demo ./functions/payment/demo; \
	$(WITH_MOTO) $(2) $$dir/demo local -moto-port 0 -gateway-port 0 -env-file $$dir/env.json & pid=$$!; \
	for i in $$(seq 600); do \
		if [ -s $$dir/env.json ] && tail -n 1 $$dir/env.json | grep -qx '}'; then break; fi; \
		kill -0 $$pid 2>/dev/null || { echo "make $(1): demo local stopped" >&2; exit 3; }; \
		sleep 0.1; \
	done; \
	[ -s $$dir/env.json ] || { echo "make $(1): demo local did not start within 60 s" >&2; exit 3; }

## invoke: the demo environment on the event files you name (EVENT="a.json b.json");
## RIE=1 runs them under AWS's aws-lambda-rie instead of lambdakit's Runtime API (Linux)
# With RIE=1: `demo local` (moto_server, the gateway, the tables) on free
# ports, in the background until the events have run; the function's
# environment comes from the file it writes (docs/local-tooling.md).
invoke: deps build
ifeq ($(RIE),1)
	@set -e; dir=$$(mktemp -d); pid=; \
	trap 'if [ -n "$$pid" ]; then kill $$pid 2>/dev/null || true; wait $$pid 2>/dev/null || true; fi; rm -rf "$$dir"' EXIT; \
	trap 'exit 130' INT TERM; \
	$(call demo_local_start,invoke,); \
	$(GO) run ./internal/rie/rieinvoke -template template.yaml -logical-id PaymentFunction -env-file $$dir/env.json $(BIN)/bootstrap $(EVENT)
else
	$(WITH_MOTO) $(GO) run ./functions/payment/demo -bootstrap $(BIN)/bootstrap $(EVENT)
endif

## chaos: the payment sample under faults, kills and duplicates across processes, one table of counts (a few minutes)
chaos: deps build
	$(WITH_MOTO) $(GO) run ./tools/chaos -bootstrap $(BIN)/bootstrap -template template.yaml $(CHAOS_FLAGS)

# The go flags of the deployable bootstrap. sam build (BuildMethod: go1.x)
# passes only -trimpath, GOOS and GOARCH to go build and takes the rest from
# the environment: make deploy hands it these, and CGO_ENABLED=0, so that
# the binary is static whatever machine builds it. -ldflags=-s implies -w.
LAMBDA_GOFLAGS := -tags=lambda.norpc -trimpath -ldflags=-s

# Flags for sam deploy, e.g. DEPLOY_FLAGS=--guided the first time (it asks
# for PaymentGatewayUrl, which has no default) or DEPLOY_FLAGS="--config-env prod".
DEPLOY_FLAGS ?=

## deploy: sam build && sam deploy with samconfig.toml (needs the SAM CLI and AWS credentials; DEPLOY_FLAGS=--guided the first time)
deploy:
	CGO_ENABLED=0 GOFLAGS='$(LAMBDA_GOFLAGS)' sam build
	sam deploy $(DEPLOY_FLAGS)

# make deploy-local: the local AWS (default: the moto_server of `go run
# ./functions/payment/demo local`, started in another terminal), the
# samconfig.toml environment, and parameters on top of its
# parameter_overrides. PaymentGatewayUrl has no value in samconfig.toml; the
# local AWS runs no function, so a .invalid URL (never resolves) stands in.
LOCAL_AWS ?=
CONFIG_ENV ?= default
LOCAL_PARAMETER_OVERRIDES ?= PaymentGatewayUrl=https://gateway.invalid

.PHONY: deploy-local up e2e
## deploy-local: sam build && sam deploy against the local AWS (LOCAL_AWS, default demo local's moto_server): creates or updates the stack, prints its outputs
deploy-local: $(SAM_TRANSLATOR)
	$(GO) run ./functions/payment/demo deploy -config-env $(CONFIG_ENV) -build-dir .aws-sam/deploy-local \
		$(if $(LOCAL_AWS),-endpoint $(LOCAL_AWS) )-parameter-overrides '$(LOCAL_PARAMETER_OVERRIDES)'

## up: the sample's stack on a local AWS, every function running: demo local (moto_server, the
## sandbox gateway) on free ports, deploy-local, then lambdakit up; Ctrl-C stops it all
# The stack's functions reach the gateway through an env file of up's;
# demo local's own (PAYMENTS_TABLE ...) is for a function without a stack.
# On Ctrl-C, up stops first, then demo local: up's functions never see
# their local AWS go away. setsid, where there is one, keeps demo local
# out of the terminal's Ctrl-C, which would stop it at once.
up: deps build
	@set -e; dir=$$(mktemp -d); pid=; up=; \
	trap 'if [ -n "$$up" ]; then kill -INT $$up 2>/dev/null || true; wait $$up 2>/dev/null || true; fi; \
		if [ -n "$$pid" ]; then kill $$pid 2>/dev/null || true; wait $$pid 2>/dev/null || true; fi; rm -rf "$$dir"' EXIT; \
	trap 'exit 130' INT TERM; \
	$(call demo_local_start,up,$$(command -v setsid || true)); \
	aws=$$(sed -n 's/.*"AWS_ENDPOINT_URL": "\(.*\)".*/\1/p' $$dir/env.json); \
	gw=$$(sed -n 's/.*"PAYMENT_GATEWAY_URL": "\(.*\)".*/\1/p' $$dir/env.json); \
	printf '{"Parameters": {"PAYMENT_GATEWAY_URL": "%s"}}\n' "$$gw" > $$dir/up-env.json; \
	$(BIN)/lambdakit deploy-local -endpoint $$aws -parameter-overrides 'PaymentGatewayUrl=https://gateway.invalid'; \
	$(BIN)/lambdakit up -endpoint $$aws -stack-name lambdakit-payment -env-file $$dir/up-env.json & up=$$!; \
	wait $$up

## e2e: the payment story from the outside (new payments, a resend, a poison payment, a crash after
## a charge, the events to the ledger) against a stack the story brings up here (moto_server,
## deploy-local, up; about a minute and a half); E2E_FLAGS='-live -stack-name NAME' plays it against
## a stack deployed on AWS instead (go run ./tools/e2e -h, docs/testing.md)
E2E_FLAGS ?=
e2e: $(MOTO_SERVER) $(SAM_TRANSLATOR)
	$(GO) build -o $(BIN)/lambdakit ./cmd/lambdakit
	$(WITH_MOTO) $(GO) run ./tools/e2e -lambdakit $(BIN)/lambdakit $(E2E_FLAGS)

## build-PaymentFunction: the deployable bootstrap (linux/arm64, static) into ARTIFACTS_DIR, without SAM
## (sam build compiles the function itself; this is the same build, named as SAM's makefile method would)
build-PaymentFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "build-PaymentFunction: ARTIFACTS_DIR is not set: name the folder for the deployable bootstrap (make build-PaymentFunction ARTIFACTS_DIR=bin/lambda); for a bootstrap on this machine run 'make build' (bin/bootstrap)." >&2; exit 2; }
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 GOFLAGS='$(LAMBDA_GOFLAGS)' $(GO) build -o $(ARTIFACTS_DIR)/bootstrap ./functions/payment

## build-RelayFunction: the outbox relay's deployable bootstrap, as build-PaymentFunction
build-RelayFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "build-RelayFunction: ARTIFACTS_DIR is not set: name the folder for the deployable bootstrap (make build-RelayFunction ARTIFACTS_DIR=bin/relay)." >&2; exit 2; }
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 GOFLAGS='$(LAMBDA_GOFLAGS)' $(GO) build -o $(ARTIFACTS_DIR)/bootstrap ./functions/relay

## build-LedgerFunction: the ledger consumer's deployable bootstrap, as build-PaymentFunction
build-LedgerFunction:
	@test -n "$(ARTIFACTS_DIR)" || { echo "build-LedgerFunction: ARTIFACTS_DIR is not set: name the folder for the deployable bootstrap (make build-LedgerFunction ARTIFACTS_DIR=bin/ledger-lambda)." >&2; exit 2; }
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 GOFLAGS='$(LAMBDA_GOFLAGS)' $(GO) build -o $(ARTIFACTS_DIR)/bootstrap ./functions/ledger

## clean: the build outputs (the .venv stays: rm -rf .venv to reinstall moto and cfn-lint)
clean:
	rm -rf $(BIN) .aws-sam
