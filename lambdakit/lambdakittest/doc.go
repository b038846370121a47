// Package lambdakittest helps test code built on lambdakit: an in-memory
// Store, a Store wrapper that injects faults for chaos tests, builders for
// SQS events, and RunStoreContract, the contract every lambdakit.Store must
// meet.
package lambdakittest
