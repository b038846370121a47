// Package storetest is for authors of a lambdakit.Store: RunStoreContract,
// the contract every Store must meet; RunUnknownStatusContract, its part
// about items under a record's ID that no engine wrote (it needs a PutFunc
// that writes to the Store directly); RunIdempotencyChecks, the engine's
// guarantees run over a Store; RunBadInput, bad input of every kind run
// through Batch and Idempotent over a Store; and FaultyStore, a Store
// wrapper that injects faults before or after the inner Store's work, for
// chaos tests.
//
// A consumer's own tests need package lambdakittest instead.
package storetest
