// Package bench is the harness behind `make bench`: one command that prints,
// in one run so that ratios hold on a noisy machine, the micro benchmarks of
// the idempotent path, the first-delivery CPU of the payment function
// against a bare floor doing the same job, in rounds run side by side
// (FirstDeliveryCPU: the measure the 1.05× target is held to), the payment
// function end to end against the local stack next to the floor, batches
// from 10 to 10,000 records (BatchSizes), batches against a slow gateway
// (GatewayDelay), cold starts, and a long run showing that the local
// stack's cost does not grow with its tables.
//
// End to end, the real bootstrap (functions/payment, built as SAM builds
// it) runs under the local Runtime API (internal/runtimeapi) against
// moto_server, started as every local run starts it (internal/motoserver),
// behind a Proxy that counts DynamoDB requests and computes their request
// units and counts the connections to it (ConnCounter), and the sandbox
// gateway, whose connections are counted too. Each row is a Scenario:
// batches delivered to containers, fresh or warm from an earlier row. The floor is
// tools/bench/bare, run through the same Runtime API with the same
// batches and concurrency.
//
// A new row is one more Scenario: its batches (built with Payments,
// InBatches, Redelivered, Mixed), the containers it runs on, and, for a
// setting of the function, extra environment. cmd/bench assembles the rows.
//
// The harness reads processes' CPU time and memory from /proc, so it runs
// on Linux only. It is internal: its API may change with the project.
package bench
