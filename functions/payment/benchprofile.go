//go:build benchprofile

package main

// Built with the benchprofile tag (make bench's -function-profiles), the
// bootstrap writes CPU profiles for the bench: see internal/benchprofile.
import _ "github.com/lambdakit/lambdakit/internal/benchprofile"
