// Package lambdakittest helps test a consumer built on lambdakit: builders
// for SQS events and redeliveries (Message, Event, Redelivery), MemoryStore,
// an in-memory Store that counts its calls, Logger, a quiet logger that
// shows a test's log lines only if it fails, LogBuffer, which captures
// the engine's log lines for assertions, and CrashStore with Clock, to
// play a process that dies mid-handler and the redelivery that takes its
// record over once the lease has ended.
//
// What the author of a Store needs (the contract every Store must meet, a
// Store that injects faults) is in package storetest.
package lambdakittest
