# lambdakit: build, test and run the sample payment function.
# `make test` runs every test (unit and integration against moto_server).

GO        ?= go
BIN       := bin
EVENT     ?= events/payments-new.json
# Integration tests and the demo need moto_server (DynamoDB and SQS on one
# loopback port). It is on the development image; elsewhere it comes from pip.
MOTO      := $(shell command -v moto_server 2>/dev/null)
CFN_LINT  := $(shell command -v cfn-lint 2>/dev/null)

export AWS_EC2_METADATA_DISABLED := true

# staticcheck, pinned. `make lint` installs it with the Go toolchain into a
# directory of its own under bin/ when it is missing there; a new version
# gets a new directory, so bumping the pin reinstalls.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(BIN)/staticcheck-$(STATICCHECK_VERSION)/staticcheck

.PHONY: all build test test-short lint bench demo invoke deploy clean deps build-PaymentFunction

all: lint test

## deps: install what the tests and the demo need and the machine lacks
deps:
ifeq ($(MOTO),)
	python3 -m pip install --quiet 'moto[server]'
endif
	@command -v moto_server >/dev/null || { echo "moto_server is still missing; install it with: pip install 'moto[server]'" >&2; exit 1; }

## build: the function (bin/bootstrap, for this machine) and the CLI (bin/lambdakit)
build:
	$(GO) build -o $(BIN)/bootstrap ./functions/payment
	$(GO) build -o $(BIN)/lambdakit ./cmd/lambdakit

## test: every test, with the race detector, integration tests included
test: deps
	$(GO) test -race -count=1 -timeout 15m ./...

## lint: go vet, gofmt, staticcheck and cfn-lint on the SAM template
lint: $(STATICCHECK)
ifeq ($(CFN_LINT),)
	python3 -m pip install --quiet cfn-lint
endif
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt: not formatted: $$out" >&2; exit 1; fi
	$(STATICCHECK) ./...
	cfn-lint template.yaml

$(STATICCHECK):
	GOBIN=$(abspath $(dir $@)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## bench: micro benchmarks, end to end against moto with the bare floor, cold start, flat cost (one run)
## BENCHFLAGS passes flags to the harness, e.g. BENCHFLAGS='-only flat -moto-patch=false'
bench: deps
	$(GO) run ./internal/bench/cmd/bench $(BENCHFLAGS)

## demo: the whole story locally, without Docker (moto, sandbox gateway, real bootstrap)
demo: deps build
	$(BIN)/lambdakit demo -bootstrap $(BIN)/bootstrap -template template.yaml -events events

## invoke: the demo environment on the event files you name (EVENT="a.json b.json")
invoke: deps build
	$(BIN)/lambdakit demo $(EVENT)

## deploy: sam build && sam deploy with samconfig.toml (needs the SAM CLI and AWS credentials)
deploy:
	sam build
	sam deploy

## build-PaymentFunction: what `sam build` runs (BuildMethod: makefile)
build-PaymentFunction:
	GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(ARTIFACTS_DIR)/bootstrap ./functions/payment

clean:
	rm -rf $(BIN) .aws-sam
