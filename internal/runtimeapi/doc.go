// Package runtimeapi runs a Lambda bootstrap binary on this machine, without
// Docker, the way Lambda and `sam local invoke` run it: the binary talks to
// the Lambda Runtime API over HTTP, and this package serves that API.
//
// Server implements the Runtime API (version 2018-06-01) on a loopback port:
// a runtime asks for the next event (GET .../invocation/next), then posts a
// response, a function error, or an init error. Server.Invoke queues an
// event and waits for whichever answer comes, or for the deadline. A Server
// knows nothing about processes, so it also serves a runtime that a test runs
// in-process or that a developer starts by hand with AWS_LAMBDA_RUNTIME_API
// pointing at Server.Addr.
//
// Runner adds the process: it starts the bootstrap with the environment
// Lambda sets, keeps it warm across invocations, and handles what a Server
// alone cannot see. A process that exits during an invocation is reported as
// a crash; one that runs past the timeout is killed; either way the next
// invocation gets a fresh process (a cold start), as on Lambda. Between
// invocations the process is frozen (SIGSTOP to its process group, on unix)
// and thawed for the next event, as Lambda freezes an idle environment, so
// that work a handler leaves running does not finish locally while it
// would wait on Lambda.
//
// Outcomes of the function itself, including its failures, are reported in a
// Result; an error return means the invocation could not be run or observed
// (the context ended, the Server or Runner was closed, the binary would not
// start).
//
// The package is internal: it serves the lambdakit CLI and the project's
// tests, and its API may change with them.
package runtimeapi
