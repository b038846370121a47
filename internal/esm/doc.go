// Package esm does locally what Lambda's SQS event source mapping does: it
// long-polls a queue, builds each batch's event exactly as Lambda builds it,
// invokes the function through an Invoker (a runtimeapi.Runner, which runs
// the real bootstrap under a local Runtime API), and deletes the records the
// function did not report failed, leaving those to come back after the
// queue's visibility timeout.
//
// It talks to any SQS endpoint through the AWS SDK: moto_server in tests and
// local runs, or a real queue.
//
// What it does as Lambda does:
//
//   - Batching: up to BatchSize records (10 by default; at most 10 on a FIFO
//     queue, 10,000 on a standard one), gathered for up to Window on a
//     standard queue (MaximumBatchingWindowInSeconds; FIFO queues have no
//     window), cut so that no event exceeds 6 MB.
//   - The event: events.SQSEvent from aws-lambda-go, every system and message
//     attribute SQS returned, eventSource aws:sqs, the queue's ARN (from
//     GetQueueAttributes) as eventSourceARN and its region as awsRegion.
//   - The answer, with ReportBatchItemFailures (the default): records named
//     in batchItemFailures stay in the queue, the others are deleted with
//     DeleteMessageBatch; a response that breaks the rules (see
//     FailedRecords), a function error, an init error, a crash or a timeout
//     leave the whole batch. On a FIFO queue, as on Lambda, a record not
//     named is deleted even when an earlier record of its group was named:
//     keeping the group's order is the function's part (it names every
//     record after its first failure).
//   - Filtering (FilterCriteria, see package eventfilter): a record that
//     matches no pattern is deleted without an invocation; on a stream, it
//     is passed over and the checkpoint moves past it.
//   - Concurrency: up to Concurrency batches in flight (ScalingConfig's
//     MaximumConcurrency), but never two batches holding messages of one
//     FIFO message group.
//
// Run's context says when to stop: once it ends, Run finishes the batches in
// flight (their invocations and deletions are not cut short) and returns.
// With UntilEmpty, Run also stops when the queue has no visible, in-flight or
// delayed messages.
//
// Order on a FIFO queue is SQS's to keep: the mapping invokes records in
// the order received and never holds one group in two batches at once. moto
// 5.2 does not keep it when several messages of a group come back together
// after their visibility timeout: it hands out the last of them first. Real
// SQS returns them in order.
//
// What it does not do: Lambda's backoff after function
// errors (a failed batch simply comes back after the visibility timeout),
// the scaling of pollers, and the Lambda-side retries of throttled
// invocations, which have no local counterpart.
//
// The package is internal: it serves `lambdakit run` and the project's
// tests.
package esm
