// Package layout holds the test that keeps the repository's dependencies
// pointing one way. The folders hold three kinds of code:
//
//   - the library: lambdakit/ (the engine, producer, lambdakitotel,
//     lambdakittest, storetest) and dynamostore/ (with dynamostoretest);
//   - the sample: functions/payment/ (the function, its sandbox gateway and
//     its demo);
//   - development tooling: tools/ (bench, chaos);
//
// beside the installed CLI, cmd/lambdakit, and internal/, the building
// blocks under all of them (a local Lambda Runtime API, the event source
// mapping, the moto_server launcher, test environments).
//
// The arrows: the library imports only the library and internal/; internal/
// imports only internal/; the CLI imports the library and internal/ but
// never the sample; the sample never imports the CLI or tooling; nothing
// but tooling imports tooling. A package that crosses an arrow the wrong
// way fails TestDependenciesPointOneWay.
package layout
