// Command lambdakit is the developer CLI of lambdakit: local tooling that
// runs the real function binary the way Lambda does, without Docker.
//
// Usage:
//
//	lambdakit <command> [flags] [arguments]
//
// Commands:
//
//	invoke   run a bootstrap binary on event files through a local Lambda Runtime API
//
// Invoke runs a bootstrap (a Go program built with aws-lambda-go for this
// machine) under a local implementation of the Lambda Runtime API, feeds it
// each event file in order through one warm process, prints one JSON object
// per event on standard output, and sends the function's own output to
// standard error:
//
//	lambdakit invoke [-timeout 30s] [-memory 256] [-function-name payment] \
//	    [-env-file env.json] [-logical-id PaymentFunction] [-log-format text|json] \
//	    BOOTSTRAP EVENT_FILE...
//
// The exit status is 0 when every invocation succeeded, 1 when one failed
// (function error, init error, crash or timeout), 2 for a usage error or an
// unreadable input file, 3 when the bootstrap could not be started, and 130
// when interrupted. Run 'lambdakit invoke -h' for the details.
package main
