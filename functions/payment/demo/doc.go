// Command demo is the payment sample's own tool, kept out of the installed
// lambdakit CLI, which links no sample code and has no sample defaults. It
// runs the sample function locally, without Docker: moto_server (DynamoDB
// and SQS), the sandbox payment gateway and the tables of template.yaml.
// Run it from the repository's root (make demo does):
//
//	go run ./functions/payment/demo [-bootstrap bin/bootstrap] [-template template.yaml] \
//	    [-events events] [-v] [EVENT_FILE...]
//
// tells the sample's story on its events (make demo), or runs the event
// files named instead; and
//
//	go run ./functions/payment/demo local [-listen 127.0.0.1] [-moto-port 7460] \
//	    [-gateway-port 7461] [-template template.yaml] [-env-file FILE] [-env-host HOST]
//
// starts the sample function's outside world on this machine until Ctrl-C
// and writes the function's environment for lambdakit invoke, lambdakit run
// or sam local. Each answers -h with its full usage.
//
// The flags, the messages and the exit statuses follow the CLI's
// conventions (internal/cmdline): 0 success, 1 a failure of what ran, 2 a
// usage error or an unreadable input, 3 when the tool cannot do its job (a
// port taken, moto_server not starting), 130 when interrupted. go run
// itself reports any status but 0 as 1; build the command to see the
// others.
package main
