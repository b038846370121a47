package testenv

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/lambdakit/lambdakit/internal/motoserver"
)

// Config returns an AWS config that talks to srv only: static test
// credentials, Region, srv.URL as the endpoint of every service, no shared
// config files or environment read, bounded requests and retries.
func Config(tb testing.TB, srv *motoserver.Server) aws.Config {
	tb.Helper()
	if srv == nil {
		tb.Fatal("testenv: Config needs a running Server")
	}
	return srv.AWSConfig()
}
