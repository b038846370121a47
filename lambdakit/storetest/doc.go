// Package storetest is for authors of a lambdakit.Store: RunStoreContract,
// the contract every Store must meet; RunIdempotencyChecks, the engine's
// guarantees run over a Store; RunBadInput, bad input of every kind run
// through Batch and Idempotent over a Store; and FaultyStore, a Store
// wrapper that injects faults before or after the inner Store's work, for
// chaos tests.
//
// A consumer's own tests need package lambdakittest instead.
package storetest
