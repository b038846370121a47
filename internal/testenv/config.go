package testenv

import (
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
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
	// Built by hand rather than with config.LoadDefaultConfig, so that
	// nothing from the developer's environment or ~/.aws can creep in.
	return aws.Config{
		Region:       motoserver.Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(srv.URL),
		HTTPClient: awshttp.NewBuildableClient().
			WithTimeout(10 * time.Second).
			WithTransportOptions(func(t *http.Transport) { t.Proxy = nil }),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 3
				o.MaxBackoff = 200 * time.Millisecond
				// The default token bucket would start refusing retries
				// when many tests hammer one server at once.
				o.RateLimiter = ratelimit.None
			})
		},
	}
}
