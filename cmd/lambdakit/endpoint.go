package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithyendpoints "github.com/aws/smithy-go/endpoints"

	"github.com/lambdakit/lambdakit/internal/cmdline"
)

// Where the commands send their AWS calls. A command must never send
// traffic where the user did not point it: a queue URL names its host, and
// the endpoint an environment variable left in the shell must neither
// send a local queue's calls to AWS (with the shell's credentials) nor a
// queue's calls to another local server. newSQSClient is the one rule for
// every command that takes a queue URL (run, publish, redrive):
//
//   - A queue URL on AWS, sqs.REGION.amazonaws.com (or the domain of any
//     other partition: awsDomains; the legacy REGION.queue.amazonaws.com
//     and queue.amazonaws.com), gets the SDK's own endpoint
//     for REGION, and REGION is the client's region. The command refuses
//     when the configured SQS endpoint (AWS_ENDPOINT_URL_SQS,
//     AWS_ENDPOINT_URL, endpoint_url in the AWS config file) is not on AWS
//     (moto_server left in the shell), names another region, or when
//     -region names another region. A configured endpoint on AWS in the
//     URL's region (a VPC endpoint) is kept.
//   - A queue URL on any other host (127.0.0.1, localhost, a LocalStack or
//     ElasticMQ host, a VPC endpoint's own name, whose region becomes the
//     client's) makes scheme://host:port of the URL the client's endpoint.
//     The command refuses when a configured SQS endpoint has another
//     scheme, host or port (its path aside).
//   - A URL under an AWS domain that is not SQS's is refused, and so is a
//     FIPS (sqs-fips.) or dual-stack (.api.aws) URL: the SDK chooses those
//     endpoints from the standard URL and AWS_USE_FIPS_ENDPOINT or
//     AWS_USE_DUALSTACK_ENDPOINT, and the refusal says so.
//
// Every queue of one command must be on one endpoint. The refusals are
// usage errors (exit status 2), told in one sentence naming both sides,
// before any request. What AWS_REGION and the like say otherwise stays the
// SDK's: credentials, retries, the region of a queue on a local host.
//
// 'records' takes a table name, which names no host: it uses the SDK's
// endpoint, and says on standard error which one before its first request
// (endpointDescription). So does -function of 'invoke' and 'run'.
//
// And one rule over all of these, in every command: a queue, table,
// stream or function on AWS itself needs -live (checkLive, and
// newSQSClient for a queue). Without it the command refuses, before any
// request, with a usage error that names the endpoint the calls would
// have gone to: a shell that forgot its AWS_ENDPOINT_URL, or a queue URL
// copied from the console, never reaches AWS unasked.

// liveHelp is the help of -live, the same in every command.
const liveHelp = "allow calls to AWS itself: without it, a queue, table, stream or function on AWS is refused before any call, naming the endpoint the calls would go to"

// refuseAWS is the refusal of the -live rule: what would be called on AWS,
// at endpoint, without -live.
func refuseAWS(what, endpoint string) error {
	return refuse("%s is on AWS: its calls would go to %s. Give -live to call AWS itself, or point the command at a local endpoint (AWS_ENDPOINT_URL)", what, endpoint)
}

// checkLive applies the -live rule to a client of service (its endpoint
// variable's suffix: DYNAMODB, LAMBDA, KINESIS) whose configured endpoint
// is endpoint (nil: the SDK's own for region). what names the resource;
// stream is a Kinesis stream's ARN, which the SDK's endpoint depends on
// ("" for any other).
func checkLive(ctx context.Context, environ []string, live bool, what, service string, endpoint *string, region, stream string) error {
	if live || !onAWS(endpoint) {
		return nil
	}
	if e := aws.ToString(endpoint); e != "" {
		return refuseAWS(what, fmt.Sprintf("%s (%s)", e, endpointSource(environ, service)))
	}
	return refuseAWS(what, fmt.Sprintf("%s (the AWS SDK's own: no AWS_ENDPOINT_URL_%s or AWS_ENDPOINT_URL is set)", sdkEndpoint(ctx, service, region, stream), service))
}

// sdkEndpoint is the endpoint the AWS SDK resolves for service in region
// when none is configured, as its own resolver says, without a request.
// For Kinesis it is the stream's account's control endpoint, where a
// mapping's first calls (ListShards) go.
func sdkEndpoint(ctx context.Context, service, region, stream string) string {
	var (
		ep  smithyendpoints.Endpoint
		err = fmt.Errorf("no resolver for %s", service)
	)
	r := aws.String(region)
	switch service {
	case "SQS":
		ep, err = sqs.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, sqs.EndpointParameters{Region: r})
	case "DYNAMODB":
		ep, err = dynamodb.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, dynamodb.EndpointParameters{Region: r})
	case "DYNAMODB_STREAMS":
		ep, err = dynamodbstreams.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, dynamodbstreams.EndpointParameters{Region: r})
	case "KINESIS":
		ep, err = kinesis.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, kinesis.EndpointParameters{Region: r, StreamARN: aws.String(stream), OperationType: aws.String("control")})
	case "LAMBDA":
		ep, err = lambda.NewDefaultEndpointResolverV2().ResolveEndpoint(ctx, lambda.EndpointParameters{Region: r})
	}
	if err != nil {
		return fmt.Sprintf("AWS's %s endpoint in %s", service, firstNonEmpty(region, "no region"))
	}
	return ep.URI.String()
}

// endpointError is a command line whose queue URL and AWS configuration
// disagree about where to send the calls: a usage error.
type endpointError struct{ msg string }

func (e *endpointError) Error() string { return e.msg }

func refuse(format string, args ...any) error {
	return &endpointError{fmt.Sprintf(format, args...)}
}

// asUsage turns a refusal into the command's usage error, and leaves any
// other error to wrap.
func asUsage(fs *cmdline.Flags, err error, wrap func(error) error) error {
	var refused *endpointError
	if errors.As(err, &refused) {
		return fs.UsageError("%s", refused.msg)
	}
	return wrap(err)
}

// queueHost is where a queue URL says its queue is.
type queueHost struct {
	url    string
	aws    bool   // a standard SQS host of AWS
	live   bool   // a queue on AWS: a standard SQS host, or an interface VPC endpoint's
	region string // the region an SQS host of AWS names (a VPC endpoint's too)
	origin string // not aws: scheme://host[:port] as the URL gives it, the endpoint
	norm   string // not aws: origin, normalized (see origin)
}

// where says, for messages and for comparing two queues, where the queue
// is.
func (h queueHost) where() string {
	if h.aws {
		return "AWS SQS in " + h.region
	}
	return h.norm
}

// validQueueURL reports whether u has the shape of a queue URL:
// http(s)://host/account/name.
func validQueueURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != "" && strings.Trim(p.Path, "/") != ""
}

// awsDomains and dualStackDomains are the DNS suffixes of AWS's
// partitions, as the AWS SDK's partition list gives them (dnsSuffix and
// dualStackDnsSuffix): aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b,
// aws-iso-e, aws-iso-f and aws-eusc. A partition missing here would let a
// command reach it without -live (TestEveryAWSPartitionNeedsLive).
var (
	awsDomains       = []string{".amazonaws.com", ".amazonaws.com.cn", ".c2s.ic.gov", ".sc2s.sgov.gov", ".cloud.adc-e.uk", ".csp.hci.ic.gov", ".amazonaws.eu"}
	dualStackDomains = []string{".api.aws", ".api.amazonwebservices.com.cn", ".api.aws.ic.gov", ".api.aws.scloud", ".api.cloud-aws.adc-e.uk", ".api.aws.hci.ic.gov", ".api.amazonwebservices.eu"}
)

// awsDomain returns the AWS domain host is under, or "", and whether it is
// a dual-stack one.
func awsDomain(host string) (domain string, dualStack bool) {
	for _, d := range awsDomains {
		if strings.HasSuffix(host, d) {
			return d, false
		}
	}
	for _, d := range dualStackDomains {
		if strings.HasSuffix(host, d) {
			return d, true
		}
	}
	return "", false
}

// sqsHostRegion returns the region an SQS host of AWS names, and whether
// host is one of SQS's standard hosts, the ones the SDK resolves for a
// region (sqs.REGION.amazonaws.com and its partitions' forms, the legacy
// REGION.queue.amazonaws.com and queue.amazonaws.com), as opposed to a VPC
// endpoint's (vpce-ID.sqs.REGION.vpce.amazonaws.com), which names a region
// too. ok is false for a host that is neither; FIPS and dual-stack hosts
// are neither: see parseQueueURL.
func sqsHostRegion(host string) (region string, standard, ok bool) {
	host = normHost(host)
	if host == "queue.amazonaws.com" {
		return "us-east-1", true, true
	}
	d, dualStack := awsDomain(host)
	if d == "" || dualStack {
		return "", false, false
	}
	labels := strings.Split(strings.TrimSuffix(host, d), ".")
	switch {
	case len(labels) == 2 && labels[0] == "sqs":
		return labels[1], true, true
	case len(labels) == 2 && labels[1] == "queue" && d == ".amazonaws.com":
		return labels[0], true, true
	}
	// vpce-ID[-AZ].sqs.REGION.vpce: an interface VPC endpoint of SQS.
	if n := len(labels); n >= 4 && labels[n-1] == "vpce" && labels[n-3] == "sqs" && strings.HasPrefix(labels[0], "vpce-") {
		return labels[n-2], false, true
	}
	return "", false, false
}

// normHost is a host name as DNS compares it: lower case, without the
// trailing dot of a fully qualified name.
func normHost(host string) string { return strings.TrimSuffix(strings.ToLower(host), ".") }

// origin returns scheme://host:port of u, the port made explicit, in lower
// case: two URLs with the same origin reach the same server.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// parseQueueURL says where the queue of a URL is.
func parseQueueURL(raw string) (queueHost, error) {
	if !validQueueURL(raw) {
		return queueHost{}, refuse("%q: want a queue URL, such as https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo", raw)
	}
	u, _ := url.Parse(raw)
	region, standard, isSQS := sqsHostRegion(u.Hostname())
	domain, dualStack := awsDomain(normHost(u.Hostname()))
	switch {
	case standard:
		if p := u.Port(); p != "" && p != "443" {
			return queueHost{}, refuse("the queue URL %s names an AWS host with port %s: SQS answers on 443 only", raw, p)
		}
		return queueHost{url: raw, aws: true, live: true, region: region}, nil
	case strings.HasPrefix(normHost(u.Hostname()), "sqs-fips.") || dualStack:
		// The SDK picks these from the standard URL and its own
		// settings; routing by this URL's host would bypass them.
		return queueHost{}, refuse("the queue URL %s names a FIPS or dual-stack SQS endpoint: give the queue's standard URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) and set AWS_USE_FIPS_ENDPOINT=true or AWS_USE_DUALSTACK_ENDPOINT=true, which the AWS SDK applies", raw)
	case !isSQS && domain != "":
		return queueHost{}, refuse("the queue URL %s names an AWS host that is not SQS's", raw)
	}
	// A custom endpoint (a VPC endpoint's name included): it is kept as
	// given, and compared by origin.
	return queueHost{url: raw, live: isSQS, region: region, origin: u.Scheme + "://" + u.Host, norm: origin(u)}, nil
}

// endpointSource names where the SDK found the endpoint it has for
// service ("SQS", "DYNAMODB"), for messages: the variable, else the config
// file.
func endpointSource(environ []string, service string) string {
	for _, name := range []string{"AWS_ENDPOINT_URL_" + service, "AWS_ENDPOINT_URL"} {
		if lookup(environ, name) != "" {
			return name
		}
	}
	return "endpoint_url in the AWS config file"
}

// newSQSClient loads the AWS configuration as the SDK does and returns a
// client for the queues at queueURLs, which must be on one endpoint, by the
// rule at the top of this file. region is the region the command line
// asks for ("" for none); live is -live, without which a queue on AWS is
// refused. A refusal is an *endpointError; any other error is the
// configuration's.
func newSQSClient(ctx context.Context, environ []string, region string, live bool, queueURLs ...string) (*sqs.Client, error) {
	var hosts []queueHost
	for _, u := range queueURLs {
		h, err := parseQueueURL(u)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, refuse("no queue URL")
	}
	q := hosts[0]
	for _, h := range hosts[1:] {
		if h.where() != q.where() {
			return nil, refuse("the queues %s and %s are on different endpoints (%s, %s): give queues on one endpoint", q.url, h.url, q.where(), h.where())
		}
	}
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	// The endpoint the SDK would use, from the variables and the config
	// file, as it resolves them: nil when none is configured.
	configured := aws.ToString(sqs.NewFromConfig(cfg).Options().BaseEndpoint)
	source := endpointSource(environ, "SQS")

	if region != "" && q.region != "" && region != q.region {
		return nil, refuse("-region is %s, but the queue URL %s is in %s", region, q.url, q.region)
	}
	var c *url.URL
	if configured != "" {
		c, err = url.Parse(configured)
		if err != nil || c.Hostname() == "" {
			return nil, refuse("the SQS endpoint %q (%s) is not a URL", configured, source)
		}
	}
	if q.aws {
		if c != nil {
			cr, _, isSQS := sqsHostRegion(c.Hostname())
			switch {
			case !isSQS:
				return nil, refuse("the queue URL %s is on AWS, but the SQS endpoint is %s (%s): unset %[3]s, or give the URL of a queue on that endpoint", q.url, configured, source)
			case cr != q.region:
				return nil, refuse("the queue URL %s is in %s, but the SQS endpoint %s (%s) is in %s", q.url, q.region, configured, source, cr)
			}
		}
		if !live {
			return nil, refuseAWS("the queue "+q.url, firstNonEmpty(configured, sdkEndpoint(ctx, "SQS", q.region, "")))
		}
		cfg.Region = q.region
		return sqs.NewFromConfig(cfg), nil
	}
	if q.live && !live {
		return nil, refuseAWS("the queue "+q.url+" (an interface VPC endpoint of SQS)", q.origin)
	}

	if c != nil && origin(c) != q.norm {
		return nil, refuse("the queue URL %s is on %s, but the SQS endpoint is %s (%s): unset %[4]s, or make the two agree", q.url, q.origin, configured, source)
	}
	switch {
	case q.region != "":
		cfg.Region = q.region // a VPC endpoint signs for its region
	case cfg.Region == "":
		cfg.Region = "us-east-1" // any will do for a local server; the SDK needs one to sign
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(q.origin) }), nil
}

// queueReadError says, in the same words in every command, that the queue
// at queueURL cannot be read: because it does not exist, when SQS says so,
// else why. Either is exit status 3 (cmdline.CannotRun).
func queueReadError(queueURL string, err error) error {
	var gone *types.QueueDoesNotExist
	if errors.As(err, &gone) {
		return fmt.Errorf("cannot read the queue %s: it does not exist (check its account, region and name)", queueURL)
	}
	return fmt.Errorf("cannot read the queue %s: %w", queueURL, err)
}

// endpointDescription says, in a few words for standard error, where a
// client of service (its endpoint variable's suffix: DYNAMODB, LAMBDA) with
// this configuration sends its calls: the configured endpoint and where it
// comes from, or AWS in the client's region.
func endpointDescription(environ []string, service, display string, endpoint *string, region string) string {
	if e := aws.ToString(endpoint); e != "" {
		return fmt.Sprintf("at %s (%s)", e, endpointSource(environ, service))
	}
	return fmt.Sprintf("on AWS %s in %s (no AWS_ENDPOINT_URL_%s or AWS_ENDPOINT_URL is set)", display, firstNonEmpty(region, "no region"), service)
}

// onAWS reports whether a client whose configured endpoint is endpoint
// (nil: none, the SDK's own) sends its calls to AWS.
func onAWS(endpoint *string) bool {
	e := aws.ToString(endpoint)
	if e == "" {
		return true
	}
	u, err := url.Parse(e)
	if err != nil {
		return false
	}
	d, _ := awsDomain(normHost(u.Hostname()))
	return d != ""
}

// endpointVariable reports whether name is one of the SDK's endpoint
// variables: AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>,
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS.
func endpointVariable(name string) bool {
	return name == "AWS_ENDPOINT_URL" || strings.HasPrefix(name, "AWS_ENDPOINT_URL_") || name == "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
}

// functionEnviron is the environment a function gets besides Lambda's
// variables: the shell's, then extra (an env file's). When
// extra sets an endpoint variable, it sets the function's endpoints alone:
// the shell's endpoint variables are left out, since the SDK prefers a
// service's own variable to AWS_ENDPOINT_URL, and an
// AWS_ENDPOINT_URL_DYNAMODB left in the shell would send the function's
// DynamoDB calls elsewhere than the env file says.
func functionEnviron(shell, extra []string) []string {
	if !slices.ContainsFunc(extra, func(kv string) bool { k, _, _ := strings.Cut(kv, "="); return endpointVariable(k) }) {
		return append(slices.Clip(shell), extra...)
	}
	env := make([]string, 0, len(shell)+len(extra))
	for _, kv := range shell {
		if k, _, _ := strings.Cut(kv, "="); !endpointVariable(k) {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
