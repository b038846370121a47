// Package chaos runs the payment sample under faults on the real wire and
// counts what matters: no payment charged twice, none lost, no lock left
// stuck.
//
// Run starts moto_server (DynamoDB), the sandbox payment gateway and
// several processes of the real payment bootstrap, each under its own
// local Lambda Runtime API (runtimeapi.Runner). It plays the SQS event
// source itself: batches of up to ten FIFO records, every payment
// delivered several times (some copies at the same moment in different
// processes, some re-encoded by another JSON encoder, some delivered again
// after they succeeded), failed records and failed invocations delivered
// again after a visibility timeout up to a receive count, then a
// dead-letter queue, which is redriven once the faults are off.
//
// Each process reaches DynamoDB through a Proxy of its own, which fails a
// chosen fraction of requests (500s, throttling, connection resets,
// latency, and answers lost after moto applied the request), and the
// gateway through a front of its own, which answers slowly or kills the
// process right after a charge. Because each process has its own
// listeners, a fault knows whose request it is: the proxy can kill a
// process exactly between the charge and the completion, when its
// UpdateItem arrives.
//
// The verdict comes from outside the function: the gateway's own record of
// charges, a ledger lookup made on every gateway call (a payment that was
// completed must never reach the gateway again), the payments table (the
// ledger rows, each its payment's idempotency record) scanned at the end,
// and the processes' JSON logs.
//
// Requests to moto_server pass through a Gate, one at a time: moto runs
// requests on threads without a lock around its DynamoDB backend, so under
// concurrent requests its conditional writes are not atomic (two
// conditional puts on one key can both succeed), which DynamoDB
// guarantees. Without the Gate the run would find moto's races, not
// lambdakit's.
package chaos
