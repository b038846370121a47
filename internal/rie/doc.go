// Package rie runs a Lambda bootstrap under aws-lambda-rie, AWS's Lambda
// Runtime Interface Emulator: the Runtime API server that runs inside
// Lambda's base images and inside the container of `sam local invoke`. It
// is the reference that internal/runtimeapi, lambdakit's own emulator, is
// compared with (this package's tests, and functions/payment's), and what
// `make invoke RIE=1` runs the sample on (the command rieinvoke).
//
// The emulator is pinned by the module internal/rie/tool, as a tool: go
// fetches it from the module proxy, checks it against that module's go.sum
// and builds it (Build). Its own go.mod keeps it out of the library's: the
// emulator's module needs a newer Go than the library does.
//
// An Emulator is one aws-lambda-rie process, on free loopback ports,
// serving one bootstrap. Invoke posts an event to its invoke endpoint
// (/2015-03-31/functions/function/invocations) and returns its answer as it
// came (Response); Response.Result reads that answer as the runtimeapi.Result
// Lambda would have given, so that the two emulators can be compared
// outcome by outcome. aws-lambda-rie answers less than Lambda does, and
// Result says where it has to guess.
//
// aws-lambda-rie supports Linux only.
package rie
