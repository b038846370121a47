package main

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// These tests resolve endpoints without sending a request: where a client
// would go is asked of the SDK's endpoint resolver.

// unsetEndpoints removes the SDK's endpoint variables from this process
// for the test (moto.Run set AWS_ENDPOINT_URL), and restores them after.
func unsetEndpoints(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); endpointVariable(k) {
			t.Setenv(k, "") // restored when t ends
			os.Unsetenv(k)
		}
	}
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "us-east-1")
}

// resolved returns the URL a request of client would go to.
func resolved(t *testing.T, client *sqs.Client) string {
	t.Helper()
	o := client.Options()
	ep, err := o.EndpointResolverV2.ResolveEndpoint(t.Context(), sqs.EndpointParameters{
		Region: aws.String(o.Region), Endpoint: o.BaseEndpoint, UseFIPS: aws.Bool(false), UseDualStack: aws.Bool(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ep.URI.String()
}

func TestNewSQSClientGoesWhereTheURLSays(t *testing.T) {
	for _, c := range []struct {
		name, url, endpoint string // endpoint: AWS_ENDPOINT_URL_SQS, if any
		wantURL, wantRegion string
	}{
		{"an AWS URL: the SDK's endpoint in its region", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders", "",
			"https://sqs.eu-west-1.amazonaws.com", "eu-west-1"},
		{"a legacy AWS URL", "https://ap-south-1.queue.amazonaws.com/123456789012/orders", "",
			"https://sqs.ap-south-1.amazonaws.com", "ap-south-1"},
		{"the legacy us-east-1 URL", "https://queue.amazonaws.com/123456789012/orders", "",
			"https://sqs.us-east-1.amazonaws.com", "us-east-1"},
		{"a China URL", "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders", "",
			"https://sqs.cn-north-1.amazonaws.com.cn", "cn-north-1"},
		{"an AWS URL and a VPC endpoint in its region: the VPC endpoint", "https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
			"https://vpce-0a1b-c2d3.sqs.eu-west-1.vpce.amazonaws.com", "https://vpce-0a1b-c2d3.sqs.eu-west-1.vpce.amazonaws.com", "eu-west-1"},
		{"a local URL: its host", "http://127.0.0.1:5999/123456789012/orders", "", "http://127.0.0.1:5999", "us-east-1"},
		{"a local URL and the same endpoint", "http://LOCALHOST:4566/000000000000/orders", "http://localhost:4566/", "http://LOCALHOST:4566", "us-east-1"},
		{"a default port made explicit", "http://sqs.local/123456789012/orders", "http://sqs.local:80", "http://sqs.local", "us-east-1"},
		{"a VPC endpoint's URL: its host and region", "https://vpce-0a1b-c2d3.sqs.eu-west-1.vpce.amazonaws.com/123456789012/orders", "",
			"https://vpce-0a1b-c2d3.sqs.eu-west-1.vpce.amazonaws.com", "eu-west-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			unsetEndpoints(t)
			if c.endpoint != "" {
				t.Setenv("AWS_ENDPOINT_URL_SQS", c.endpoint)
			}
			client, err := newSQSClient(t.Context(), os.Environ(), "", true, c.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := resolved(t, client); got != c.wantURL || client.Options().Region != c.wantRegion {
				t.Errorf("goes to %s in %s; want %s in %s", got, client.Options().Region, c.wantURL, c.wantRegion)
			}
		})
	}
}

func TestNewSQSClientRefuses(t *testing.T) {
	const awsURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
	for _, c := range []struct {
		name, endpoint, region string
		urls                   []string
		want                   string
	}{
		{"an AWS URL, a local endpoint", "http://127.0.0.1:5000", "", []string{awsURL}, "is on AWS, but the SQS endpoint is http://127.0.0.1:5000 (AWS_ENDPOINT_URL_SQS)"},
		{"an AWS URL, an AWS endpoint in another region", "https://sqs.us-east-1.amazonaws.com", "", []string{awsURL}, "is in eu-west-1, but the SQS endpoint https://sqs.us-east-1.amazonaws.com (AWS_ENDPOINT_URL_SQS) is in us-east-1"},
		{"an AWS URL, -region elsewhere", "", "us-east-1", []string{awsURL}, "-region is us-east-1, but the queue URL " + awsURL + " is in eu-west-1"},
		{"an AWS port", "", "", []string{"https://sqs.eu-west-1.amazonaws.com:8443/1/q"}, "port 8443"},
		{"not SQS", "", "", []string{"https://s3.eu-west-1.amazonaws.com/1/q"}, "not SQS's"},
		{"a local URL, another port", "http://127.0.0.1:5000", "", []string{"http://127.0.0.1:5999/1/q"}, "is on http://127.0.0.1:5999, but the SQS endpoint is http://127.0.0.1:5000"},
		{"a local URL, another scheme", "https://127.0.0.1:5000", "", []string{"http://127.0.0.1:5000/1/q"}, "but the SQS endpoint is https://127.0.0.1:5000"},
		{"a local URL, another host", "http://localhost:5000", "", []string{"http://127.0.0.1:5000/1/q"}, "but the SQS endpoint is http://localhost:5000"},
		{"two endpoints", "", "", []string{"http://127.0.0.1:5000/1/a", awsURL}, "on different endpoints (http://127.0.0.1:5000, AWS SQS in eu-west-1)"},
		{"two local endpoints", "", "", []string{"http://127.0.0.1:5000/1/a", "http://localhost:5000/1/b"}, "on different endpoints (http://127.0.0.1:5000, http://localhost:5000)"},
		{"not a URL", "", "", []string{"orders"}, "want a queue URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			unsetEndpoints(t)
			if c.endpoint != "" {
				t.Setenv("AWS_ENDPOINT_URL_SQS", c.endpoint)
			}
			_, err := newSQSClient(t.Context(), os.Environ(), c.region, true, c.urls...)
			var refused *endpointError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v; want a refusal saying %q", err, c.want)
			}
		})
	}
}

// Two URLs of one endpoint, written differently, are one endpoint.
func TestNewSQSClientOneEndpointWrittenTwoWays(t *testing.T) {
	unsetEndpoints(t)
	if _, err := newSQSClient(t.Context(), os.Environ(), "", true, "http://LOCALHOST:80/1/a", "http://localhost/1/b"); err != nil {
		t.Error(err)
	}
}

func TestRedriveDedupID(t *testing.T) {
	long := strings.Repeat("x", 128)
	first := redriveDedupID("abc")
	for _, c := range []struct{ old, wantPrefix string }{
		{"abc", "abc~"},
		{"", "~"},
		{first, "abc~"}, // an earlier redrive's suffix is replaced, not stacked
		{"abc~short", "abc~short~"},
		{long, long[:101] + "~"},
	} {
		got := redriveDedupID(c.old)
		if !strings.HasPrefix(got, c.wantPrefix) || len(got) != len(c.wantPrefix)+redriveSuffixLen || len(got) > 128 || got == c.old {
			t.Errorf("redriveDedupID(%q) = %q; want %q and %d new characters, 128 at most", c.old, got, c.wantPrefix, redriveSuffixLen)
		}
	}
	if a, b := redriveDedupID("abc"), redriveDedupID("abc"); a == b {
		t.Errorf("two sends of one message got the same ID %q; want a new one each time", a)
	}
}

// Every endpoint the SDK itself resolves, in every partition it knows
// (standard, FIPS, dual-stack), is on AWS: a client configured with it, or
// a queue URL on its host, needs -live. The regions are one of each
// partition of the SDK's partitions.json; a variant a partition does not
// offer is skipped.
func TestEveryAWSPartitionNeedsLive(t *testing.T) {
	regions := []string{"us-east-1", "cn-north-1", "us-gov-west-1", "us-iso-east-1", "us-isob-east-1", "eu-isoe-west-1", "us-isof-south-1", "eusc-de-east-1"}
	unsetEndpoints(t)
	for _, region := range regions {
		for _, v := range []struct{ fips, dual bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			ep, err := sqs.NewDefaultEndpointResolverV2().ResolveEndpoint(t.Context(), sqs.EndpointParameters{
				Region: aws.String(region), UseFIPS: aws.Bool(v.fips), UseDualStack: aws.Bool(v.dual),
			})
			if err != nil {
				continue
			}
			endpoint := ep.URI.String()
			if !onAWS(aws.String(endpoint)) {
				t.Errorf("onAWS(%s) = false; the SDK resolves it for %s", endpoint, region)
			}
			queue := endpoint + "/123456789012/orders"
			_, err = newSQSClient(t.Context(), os.Environ(), "", false, queue)
			var refused *endpointError
			if !errors.As(err, &refused) {
				t.Errorf("newSQSClient(%s) without -live: err = %v; want a refusal", queue, err)
			}
		}
	}
}
