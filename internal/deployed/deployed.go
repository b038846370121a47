// Package deployed reads what a function deployed on Lambda runs with: its
// settings and environment (GetFunctionConfiguration) and its SQS event
// source mappings (ListEventSourceMappings), so that a local run uses
// exactly the deployed configuration instead of a second copy of it.
//
// It works against any Lambda endpoint: AWS, or moto_server after
// `make deploy-local`.
package deployed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	lambdatypes "github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// LambdaAPI is the part of the Lambda client this package calls.
type LambdaAPI interface {
	GetFunctionConfiguration(ctx context.Context, in *lambda.GetFunctionConfigurationInput, optFns ...func(*lambda.Options)) (*lambda.GetFunctionConfigurationOutput, error)
	ListEventSourceMappings(ctx context.Context, in *lambda.ListEventSourceMappingsInput, optFns ...func(*lambda.Options)) (*lambda.ListEventSourceMappingsOutput, error)
}

// Function is a deployed function's configuration, as a local run needs it.
type Function struct {
	Name     string
	ARN      string
	Region   string // the ARN's
	Timeout  time.Duration
	MemoryMB int
	// LogFormat is "text" or "json"; LogLevel the application log level
	// with JSON logs, or "".
	LogFormat, LogLevel string
	// Env is the function's environment variables, KEY=value, sorted by
	// name.
	Env []string
	// Architecture is the instruction set it runs on: arm64 or x86_64.
	Architecture string
}

// Mapping is one SQS event source mapping of a function.
type Mapping struct {
	UUID         string
	State        string // Enabled, Disabled, Creating, ...
	QueueARN     string
	QueueName    string
	QueueAccount string
	QueueRegion  string
	BatchSize    int
	// Window is MaximumBatchingWindowInSeconds.
	Window time.Duration
	// ReportBatchItemFailures is FunctionResponseTypes holding
	// ReportBatchItemFailures: responses are partial batch responses.
	ReportBatchItemFailures bool
	// MaximumConcurrency is ScalingConfig.MaximumConcurrency, 0 if unset.
	MaximumConcurrency int
	// Filters are the patterns of FilterCriteria, none if unset.
	Filters []string
}

// ReadFunction returns the configuration of the function name (a name, a
// partial or a full ARN, as Lambda accepts it).
func ReadFunction(ctx context.Context, c LambdaAPI, name string) (Function, error) {
	out, err := c.GetFunctionConfiguration(ctx, &lambda.GetFunctionConfigurationInput{FunctionName: aws.String(name)})
	if err != nil {
		return Function{}, fmt.Errorf("function %s: %w", name, err)
	}
	f, err := FromConfiguration(out)
	if err != nil {
		return Function{}, fmt.Errorf("function %s: %w", name, err)
	}
	return f, nil
}

// FromConfiguration reads what GetFunctionConfiguration answered.
func FromConfiguration(out *lambda.GetFunctionConfigurationOutput) (Function, error) {
	f := Function{
		Name:      aws.ToString(out.FunctionName),
		ARN:       aws.ToString(out.FunctionArn),
		Timeout:   time.Duration(aws.ToInt32(out.Timeout)) * time.Second,
		MemoryMB:  int(aws.ToInt32(out.MemorySize)),
		LogFormat: "text",
	}
	a, err := arn.Parse(f.ARN)
	if err != nil {
		return Function{}, fmt.Errorf("its ARN %q: %w", f.ARN, err)
	}
	f.Region = a.Region
	if lc := out.LoggingConfig; lc != nil && lc.LogFormat == lambdatypes.LogFormatJson {
		f.LogFormat = "json"
		f.LogLevel = string(lc.ApplicationLogLevel)
	}
	f.Architecture = string(lambdatypes.ArchitectureX8664) // Lambda's default
	if len(out.Architectures) > 0 {
		f.Architecture = string(out.Architectures[0])
	}
	if out.Environment != nil {
		for k, v := range out.Environment.Variables {
			f.Env = append(f.Env, k+"="+v)
		}
		slices.Sort(f.Env)
	}
	return f, nil
}

// SQSMappings returns the event source mappings of the function f whose
// source is an SQS queue, in the order Lambda lists them.
//
// Lambda finds a function's mappings by any form of its name. moto 5.2.1
// compares the FunctionName filter with the string the mapping was created
// with, which CloudFormation gives as the name and other callers as the
// ARN; so when the ARN finds none, the name is asked too.
func SQSMappings(ctx context.Context, c LambdaAPI, f Function) ([]Mapping, error) {
	ms, err := sqsMappings(ctx, c, f.ARN)
	if err != nil || len(ms) > 0 || f.Name == "" || f.Name == f.ARN {
		return ms, err
	}
	return sqsMappings(ctx, c, f.Name)
}

func sqsMappings(ctx context.Context, c LambdaAPI, fn string) ([]Mapping, error) {
	var out []Mapping
	err := eachMapping(ctx, c, fn, func(m lambdatypes.EventSourceMappingConfiguration) {
		src := aws.ToString(m.EventSourceArn)
		a, err := arn.Parse(src)
		if err != nil || a.Service != "sqs" {
			return // a stream, Kafka, MQ: not a queue
		}
		mp := Mapping{
			UUID:         aws.ToString(m.UUID),
			State:        aws.ToString(m.State),
			QueueARN:     src,
			QueueName:    a.Resource,
			QueueAccount: a.AccountID,
			QueueRegion:  a.Region,
			BatchSize:    int(aws.ToInt32(m.BatchSize)),
			Window:       time.Duration(aws.ToInt32(m.MaximumBatchingWindowInSeconds)) * time.Second,
			ReportBatchItemFailures: slices.Contains(m.FunctionResponseTypes,
				lambdatypes.FunctionResponseTypeReportBatchItemFailures),
		}
		if m.ScalingConfig != nil {
			mp.MaximumConcurrency = int(aws.ToInt32(m.ScalingConfig.MaximumConcurrency))
		}
		mp.Filters = patterns(m.FilterCriteria)
		out = append(out, mp)
	})
	return out, err
}

// StreamMapping is what run takes of a function's mapping on a stream.
type StreamMapping struct {
	UUID, State string
	// Filters are the patterns of FilterCriteria, none if unset.
	Filters []string
}

// StreamMappingOf returns f's event source mapping on the stream
// streamARN (a DynamoDB stream's or a Kinesis data stream's), and false
// when f has none there. As SQSMappings, it lists the mappings by f's ARN,
// then by its name.
func StreamMappingOf(ctx context.Context, c LambdaAPI, f Function, streamARN string) (StreamMapping, bool, error) {
	for _, fn := range []string{f.ARN, f.Name} {
		if fn == "" {
			continue
		}
		var found *StreamMapping
		err := eachMapping(ctx, c, fn, func(m lambdatypes.EventSourceMappingConfiguration) {
			if found == nil && aws.ToString(m.EventSourceArn) == streamARN {
				found = &StreamMapping{UUID: aws.ToString(m.UUID), State: aws.ToString(m.State), Filters: patterns(m.FilterCriteria)}
			}
		})
		if err != nil {
			return StreamMapping{}, false, err
		}
		if found != nil {
			return *found, true, nil
		}
	}
	return StreamMapping{}, false, nil
}

// eachMapping calls visit with each event source mapping of the function
// fn (its name or ARN), page by page.
func eachMapping(ctx context.Context, c LambdaAPI, fn string, visit func(lambdatypes.EventSourceMappingConfiguration)) error {
	in := &lambda.ListEventSourceMappingsInput{FunctionName: aws.String(fn)}
	for pages := 0; ; pages++ {
		if pages == 100 { // 10,000 mappings: more than Lambda allows a function
			return fmt.Errorf("function %s: more than %d pages of event source mappings", fn, pages)
		}
		page, err := c.ListEventSourceMappings(ctx, in)
		if err != nil {
			return fmt.Errorf("function %s: event source mappings: %w", fn, err)
		}
		for _, m := range page.EventSourceMappings {
			visit(m)
		}
		if aws.ToString(page.NextMarker) == "" {
			return nil
		}
		in.Marker = page.NextMarker
	}
}

// patterns are the patterns of fc, none when it is nil.
func patterns(fc *lambdatypes.FilterCriteria) []string {
	if fc == nil {
		return nil
	}
	var out []string
	for _, f := range fc.Filters {
		out = append(out, aws.ToString(f.Pattern))
	}
	return out
}

// QueueURLAPI is the part of the SQS client QueueURL calls.
type QueueURLAPI interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// QueueURL asks SQS for the URL of the mapping's queue.
func QueueURL(ctx context.Context, c QueueURLAPI, m Mapping) (string, error) {
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(m.QueueName), QueueOwnerAWSAccountId: aws.String(m.QueueAccount)})
	if err != nil {
		return "", fmt.Errorf("the queue of mapping %s (%s): %w", m.UUID, m.QueueARN, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// QueueRef names a queue as a queue URL does: its name, and the account
// and region when the URL says them. An empty field matches any.
type QueueRef struct{ Name, Account, Region string }

func (q QueueRef) matches(m Mapping) bool {
	return q.Name == m.QueueName && (q.Account == "" || q.Account == m.QueueAccount) && (q.Region == "" || q.Region == m.QueueRegion)
}

// Choose returns the mapping to run: the only one, or the one of the queue
// want names when want is not zero. The error says what there is.
func Choose(fn string, ms []Mapping, want QueueRef) (Mapping, error) {
	var arns []string
	for _, m := range ms {
		arns = append(arns, m.QueueARN)
	}
	if want != (QueueRef{}) {
		i := slices.IndexFunc(ms, want.matches)
		if i < 0 {
			return Mapping{}, fmt.Errorf("function %s has no SQS event source mapping for the queue %s (it has: %s)", fn, want.describe(), listOrNone(arns))
		}
		return ms[i], nil
	}
	switch len(ms) {
	case 0:
		return Mapping{}, errors.New("function " + fn + " has no SQS event source mapping")
	case 1:
		return ms[0], nil
	}
	return Mapping{}, fmt.Errorf("function %s has SQS event source mappings for %s: choose one with -queue", fn, strings.Join(arns, ", "))
}

func (q QueueRef) describe() string {
	s := q.Name
	if q.Account != "" {
		s = q.Account + "/" + s
	}
	if q.Region != "" {
		s += " in " + q.Region
	}
	return s
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
