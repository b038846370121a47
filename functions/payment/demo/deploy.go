package main

import (
	"context"
	"fmt"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/samdeploy"
)

const deployUsage = `Usage: go run ./functions/payment/demo deploy [-endpoint URL] [-config-env ENV] [flags]

What 'sam build && sam deploy --config-env ENV' do, against the local AWS at
-endpoint: a moto_server on this machine, by default the one that 'go run
./functions/payment/demo local' starts (it serves S3, CloudFormation,
Lambda, SQS and DynamoDB on one port). make deploy-local runs it.

It builds each function of -template with 'make build-<LogicalID>
ARTIFACTS_DIR=...', zips it, uploads it to the local S3 (s3_bucket, or with
resolve_s3 a bucket of its own, under s3_prefix), transforms the template
with aws-sam-translator (-transform, run by python3 or the project's .venv),
checks the parameters, capabilities and each bootstrap's architecture as
CloudFormation and Lambda would, and creates or updates the stack with the
environment's stack_name, region, capabilities, parameter_overrides and
tags (a parameter not overridden keeps its value in the stack, as with sam
deploy). A deploy that changes nothing says so and succeeds (unless
fail_on_empty_changeset). There is no change set to confirm: moto does not
work out the outputs of a stack that a change set made. The stack's outputs go to
standard output, the progress to standard error.

It only ever talks to 127.0.0.1 (or localhost), with static test
credentials. What it proves, and what only a real AWS account can: see
docs/deploy-with-sam.md.

Flags:
`

// deployCommand is the sample's local deploy, what the command runs as
// "demo deploy".
type deployCommand struct {
	stdio
	opts      samdeploy.Options
	overrides string
}

func (c *deployCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "deploy", deployUsage, "")
	fs.StringVar(&c.opts.Endpoint, "endpoint", fmt.Sprintf("http://127.0.0.1:%d", defaultMotoPort), "the local AWS's `URL`, on loopback; the default is demo local's moto_server")
	fs.StringVar(&c.opts.ConfigEnv, "config-env", "default", "the samconfig.toml `environment` whose deploy settings to use")
	fs.StringVar(&c.opts.ConfigFile, "config-file", "samconfig.toml", "the SAM CLI configuration `file`")
	fs.StringVar(&c.opts.Template, "template", "template.yaml", "the SAM `template`; its functions are built with the Makefile in its folder")
	fs.StringVar(&c.overrides, "parameter-overrides", "", "template `parameters` as 'NAME=VALUE ...' (sam's syntax), added to the environment's parameter_overrides and winning over them")
	fs.StringVar(&c.opts.BuildDir, "build-dir", "", "keep each function's build (LogicalID/) and zip (LogicalID.zip), and the transformed template (template.json), in this `folder` (default: a temporary one, removed)")
	fs.StringVar(&c.opts.Transform, "transform", "scripts/sam-transform", "the transform `script`")
	fs.StringVar(&c.opts.Python, "python", "", "the `python` with aws-sam-translator that runs the script (default: python3 on PATH if it has it, else .venv/bin/python)")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fs.UsageError("unexpected arguments %q", rest)
	}
	if err := samdeploy.CheckEndpoint(c.opts.Endpoint); err != nil {
		return fs.UsageError("%v", err)
	}
	if c.opts.ParameterOverrides, err = samdeploy.ParseOverrides(c.overrides); err != nil {
		return fs.UsageError("-parameter-overrides %v", err)
	}
	return nil
}

// Run implements command.
func (c *deployCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	c.opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "demo deploy: "+format+"\n", args...)
	}
	c.opts.BuildOutput = c.stderr
	res, err := samdeploy.Deploy(ctx, c.opts)
	if err != nil {
		return samdeploy.CommandError(ctx, err)
	}
	return res.Print(c.stdout, c.opts.Endpoint)
}
