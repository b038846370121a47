package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/arn"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/deployed"
	"github.com/lambdakit/lambdakit/internal/esm"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/runtimeapi"
	"github.com/lambdakit/lambdakit/internal/samdeploy"
)

// stack is the sample's stack as the queue act deployed it on the demo's
// moto_server, scaled down, and read back from Lambda and SQS as `lambdakit
// run -function` reads it.
type stack struct {
	fn               deployed.Function
	mapping          deployed.Mapping
	sqs              *sqs.Client
	queueURL, dlqURL string
	dlqName          string
	paymentsTable    string            // the ledger, with the idempotency records on its rows
	outputs          map[string]string // the stack's outputs
}

// deployStack deploys template (what make deploy-local does), scales its
// timings down, disables its mapping (this act's run takes its place), and
// reads the function and its mapping back.
func (d *demo) deployStack(ctx context.Context, template string) (*stack, error) {
	dir := filepath.Dir(template)
	dctx, cancel := context.WithTimeout(ctx, queueDeployBound)
	defer cancel()
	res, err := samdeploy.Deploy(dctx, samdeploy.Options{
		Template:   template,
		ConfigFile: filepath.Join(dir, "samconfig.toml"), ConfigEnv: "default",
		// No function runs on the local AWS: a URL that never resolves
		// stands in, as with make deploy-local; the run below points the
		// function at the sandbox gateway.
		ParameterOverrides: map[string]string{"PaymentGatewayUrl": "https://gateway.invalid"},
		Endpoint:           d.moto.URL,
		Transform:          filepath.Join(dir, "scripts", "sam-transform"),
		BuildOutput:        io.Discard,
	})
	if err != nil {
		return nil, fmt.Errorf("deploy %s on the local AWS: %w", template, err)
	}
	outputs := map[string]string{}
	for _, o := range res.Outputs {
		outputs[o.Key] = o.Value
	}
	fmt.Fprintf(d.out, "   deployed %s on the local AWS as make deploy-local does (aws-sam-translator %s, CloudFormation): stack %s %s\n",
		template, res.TranslatorVersion, res.StackName, res.Status)

	cfg := d.moto.AWSConfig()
	lc, sqsc := lambda.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	st := &stack{sqs: sqsc, outputs: outputs}
	read := func() error {
		if st.fn, err = deployed.ReadFunction(ctx, lc, outputs["PaymentFunctionName"]); err != nil {
			return err
		}
		ms, err := deployed.SQSMappings(ctx, lc, st.fn)
		if err != nil {
			return err
		}
		st.mapping, err = deployed.Choose(st.fn.ARN, ms, deployed.QueueRef{})
		return err
	}
	if err := read(); err != nil {
		return nil, err
	}
	if st.queueURL, err = deployed.QueueURL(ctx, sqsc, st.mapping); err != nil {
		return nil, err
	}
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(st.queueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout, sqstypes.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return nil, err
	}
	var redrive struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(attrs.Attributes["RedrivePolicy"]), &redrive); err != nil {
		return nil, fmt.Errorf("the queue %s has no redrive policy: %w", st.queueURL, err)
	}
	dlqARN, err := arn.Parse(redrive.DeadLetterTargetArn)
	if err != nil {
		return nil, fmt.Errorf("the queue %s: its DLQ %q: %w", st.queueURL, redrive.DeadLetterTargetArn, err)
	}
	st.dlqName = dlqARN.Resource
	if st.dlqURL, err = deployed.QueueURL(ctx, sqsc, deployed.Mapping{QueueName: dlqARN.Resource, QueueAccount: dlqARN.AccountID, QueueARN: redrive.DeadLetterTargetArn}); err != nil {
		return nil, err
	}

	// Scaled down with the calls an operator would make.
	fmt.Fprintf(d.out, "   function %s, mapping %s on %s, DLQ %s\n", st.fn.Name, st.mapping.UUID, st.mapping.QueueName, st.dlqName)
	fmt.Fprintf(d.out, "   scaled down: Timeout %v -> %v, VisibilityTimeout %ss -> %ds, maxReceiveCount %s -> %d; the mapping disabled (this run takes its place)\n",
		st.fn.Timeout, queueFunctionTimeout, attrs.Attributes["VisibilityTimeout"], queueVisibility, strings.Trim(string(redrive.MaxReceiveCount), `"`), queueMaxReceiveCount)
	if _, err := lc.UpdateFunctionConfiguration(ctx, &lambda.UpdateFunctionConfigurationInput{
		FunctionName: aws.String(st.fn.ARN), Timeout: aws.Int32(int32(queueFunctionTimeout / time.Second)),
	}); err != nil {
		return nil, err
	}
	policy, _ := json.Marshal(map[string]string{"deadLetterTargetArn": redrive.DeadLetterTargetArn, "maxReceiveCount": strconv.Itoa(queueMaxReceiveCount)})
	if _, err := sqsc.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(st.queueURL), Attributes: map[string]string{
		"VisibilityTimeout": strconv.Itoa(queueVisibility), "RedrivePolicy": string(policy),
	}}); err != nil {
		return nil, err
	}
	if _, err := lc.UpdateEventSourceMapping(ctx, &lambda.UpdateEventSourceMappingInput{UUID: aws.String(st.mapping.UUID), Enabled: aws.Bool(false)}); err != nil {
		return nil, err
	}
	// What the run uses is read back, as `lambdakit run -function` reads it.
	if err := read(); err != nil {
		return nil, err
	}
	if st.fn.Timeout != queueFunctionTimeout || st.mapping.State != "Disabled" {
		return nil, fmt.Errorf("read back after scaling down: timeout %v, mapping %s; want %v, Disabled", st.fn.Timeout, st.mapping.State, queueFunctionTimeout)
	}
	for _, kv := range st.fn.Env {
		if k, v, _ := strings.Cut(kv, "="); k == "PAYMENTS_TABLE" {
			st.paymentsTable = v
		}
	}
	if st.paymentsTable == "" {
		return nil, fmt.Errorf("function %s: no PAYMENTS_TABLE in its environment", st.fn.Name)
	}
	fmt.Fprintf(d.out, "   payments table of the stack (ledger and idempotency records): %s\n", st.paymentsTable)
	return st, nil
}

// newDeployedRunner runs bootstrap as the deployed function fn: its name,
// timeout, memory and environment, with the calls that environment's
// resources need sent to endpoint (the demo's moto_server, or a proxy in
// front of it), and the sandbox gateway for the gateway URL the stack was
// deployed with.
func (d *demo) newDeployedRunner(bootstrap string, fn deployed.Function, environ []string, endpoint string) (*runtimeapi.Runner, error) {
	return runtimeapi.NewRunner(bootstrap, func(o *runtimeapi.RunnerOptions) {
		o.FunctionName = fn.Name
		o.Region = fn.Region
		o.Timeout = fn.Timeout
		o.MemoryMB = fn.MemoryMB
		// As newRunner: a line for every message, which the demo reads.
		o.LogFormat = "JSON"
		o.LogLevel = "DEBUG"
		o.Env = append(withoutEndpoints(environ), withoutEndpoints(fn.Env)...)
		o.Env = append(o.Env, motoserver.Env(endpoint)...)
		o.Env = append(o.Env, "PAYMENT_GATEWAY_URL="+d.gatewayURL)
		o.Stdout = &d.logs
		o.Stderr = &d.logs
	})
}

// runMapping runs the stack's queue mapping, as read back, on invoker
// until the queue is empty, within queueRunBound.
func (st *stack) runMapping(ctx context.Context, invoker esm.Invoker, onBatch func(esm.BatchResult)) (esm.Summary, error) {
	mapping, err := esm.New(st.sqs, st.queueURL, invoker, func(o *esm.Options) {
		o.BatchSize = st.mapping.BatchSize
		o.Window = st.mapping.Window
		o.Concurrency = esm.MinConcurrency
		o.ReportBatchItemFailures = st.mapping.ReportBatchItemFailures
		o.FunctionTimeout = st.fn.Timeout
		o.UntilEmpty = true
		o.OnBatch = onBatch
	})
	if err != nil {
		return esm.Summary{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, queueRunBound)
	defer cancel()
	summary, err := mapping.Run(runCtx)
	switch {
	case err != nil:
		return summary, err
	case ctx.Err() != nil:
		return summary, ctx.Err()
	case !summary.Empty:
		return summary, fmt.Errorf("the queue was not empty after %v", queueRunBound)
	}
	return summary, nil
}
