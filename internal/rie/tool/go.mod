// The pinned aws-lambda-rie, AWS's Lambda Runtime Interface Emulator, as a
// tool of a module of its own: the reference that internal/rie compares
// internal/runtimeapi with. It is not in the main go.mod because its module
// needs go 1.26.6, which would raise the go line of the library, and of
// every module that requires it, from 1.25; and its requirements (logrus,
// chi, testify ...) would join every user's module graph. Build it with
//
//	go -C internal/rie/tool tool aws-lambda-rie ...
//	go -C internal/rie/tool build -o DIR/aws-lambda-rie github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie
//
// Update it with go -C internal/rie/tool get -tool ...@VERSION.
module github.com/lambdakit/lambdakit/internal/rie/tool

go 1.26.6

tool github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie

require (
	github.com/aws/aws-lambda-runtime-interface-emulator v0.0.0-20261030222936-bef5c4ba774d // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/go-chi/chi v1.5.5 // indirect
	github.com/go-chi/chi/v5 v5.4.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jessevdk/go-flags v1.5.0 // indirect
	github.com/orcaman/concurrent-map v1.0.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v5 v5.3.1 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/stretchr/objx v0.5.2 // indirect
	github.com/stretchr/testify v1.9.0 // indirect
	golang.org/x/sys v0.14.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
