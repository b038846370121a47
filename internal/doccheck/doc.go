// Package doccheck holds the tests that keep the documentation true to the
// code. It has no code of its own; its tests check two things:
//
//   - Every ```go block in README.md and docs/*.md is a complete Go file
//     (package clause and imports), so that a reader can copy it whole, and
//     it compiles against this module as it stands. The blocks are built
//     with `go build -overlay`, as packages that exist only in the overlay:
//     nothing is written into the working tree, so the test is safe to run
//     beside other builds and tests. The test also fails when it finds fewer
//     blocks in a page than that page is known to hold, so that it cannot
//     pass by finding none.
//
//   - Every exported identifier of the library packages (lambdakit,
//     lambdakit/producer, lambdakit/lambdakitotel, lambdakit/lambdakittest,
//     lambdakit/storetest, dynamostore, dynamostore/dynamostoretest,
//     valkeystore) has a
//     doc comment: types, functions, methods of exported types, constants
//     and variables (a const or var group with a comment of its own counts
//     as documented; struct fields are not checked). The files are parsed
//     from disk with go/parser, since internal packages import no library
//     package.
//
// Both run with `make test` (go test ./...).
package doccheck
