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
//	run      run a bootstrap on the messages of an SQS queue, as Lambda's event source mapping does
//	publish  send JSON Lines to an SQS queue, with deduplication IDs from the consumer's idempotency key
//	records  show, delete or list stuck idempotency records in DynamoDB
//	redrive  move messages from a dead-letter queue back to a queue
//	resend   send again the messages of the outbox relay's dead letters
//
// Invoke runs a bootstrap (a Go program built with aws-lambda-go for this
// machine) under a local implementation of the Lambda Runtime API, feeds it
// each event file in order through one warm process, prints one JSON object
// per event on standard output, and sends the function's own output to
// standard error:
//
//	lambdakit invoke [-template template.yaml] [-logical-id ID] [-timeout 3s] \
//	    [-memory 128] [-function-name NAME] [-env-file env.json] \
//	    [-log-format text|json] BOOTSTRAP EVENT_FILE...
//
// The function's settings come from the flags, then from its resource in
// -template, else Lambda's defaults; nothing defaults to the payment sample.
//
// The exit status is 0 when every invocation succeeded, 1 when one failed
// (function error, init error, crash or timeout), 2 for a usage error or an
// unreadable input file (event, env file, template), 3 when the bootstrap could not be started, and 130
// when interrupted. Run 'lambdakit invoke -h' for the details. Invoke runs
// any event; when an SQS function gets one that is not an SQS event (a
// message body on its own, say), it warns on standard error.
//
// Run does what Lambda's SQS event source mapping does, against any SQS
// endpoint: it polls the queue, invokes the bootstrap on each batch through
// the same local Runtime API, and deletes the records the function did not
// report failed, until Ctrl-C or, with -until-empty, an empty queue:
//
//	lambdakit run [-batch-size 10] [-window 0s] [-concurrency 5] [-until-empty] \
//	    [-template template.yaml] [-env-file env.json] ... -queue URL BOOTSTRAP
//
// Run 'lambdakit run -h' for the flags and exit statuses.
//
// Publish sends each line of a JSON Lines file (one JSON object per line;
// a JSON array is refused whole) to a queue as a message:
//
//	lambdakit publish [-key-field PATH] [-group-field PATH] [-max-size N] -queue URL [FILE]
//
// Records, redrive and resend are operator tools: records shows, deletes
// or lists the stuck idempotency records of a function's table, redrive
// moves messages from a dead-letter queue back to their queue, and resend
// sends again the messages of the outbox relay's dead letters
// (outbox.Resend), deleting each dead letter once its messages are sent:
//
//	lambdakit records get|delete|stuck -table TABLE -prefix PREFIX [-json] [KEY]
//	lambdakit redrive [-dry-run] [-max N] -from DLQ_URL -to QUEUE_URL
//	lambdakit resend [-dry-run] [-max N] [-status-attr NAME ...] -from DLQ_URL
//
// Run, publish, redrive and resend send a queue's calls where its URL points: a URL
// on AWS to SQS in the URL's region, a URL on any other host to that host.
// An endpoint configured for SQS (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL)
// that disagrees is refused as a usage error, never followed. Records, whose
// table name names no endpoint, says on standard error where its calls go
// before the first one.
//
// The payment sample's own tools, which start its outside world (moto_server,
// the sandbox gateway, its tables) and tell its story, are not in this CLI:
// they are the sample's command, go run ./functions/payment/demo.
//
// Each command is a type in a file of its own with a Run(ctx, args) method
// that parses its flags once and checks every input before anything
// starts; the error it returns says how it ended, and main turns it into
// the exit status in one place (ExitStatus of internal/cmdline, which the
// sample's demo shares). The statuses mean the same in every command: 1
// when what it ran failed, 2 for a usage error or bad input, 3 when it
// could not do its job, a queue or table that does not exist or cannot be
// read included. Every command takes its flags before its
// arguments, answers -h with its full usage (exit status 0), and a usage
// error with the error, the synopsis and where the full usage is, in three
// lines on standard error, with exit status 2.
package main
