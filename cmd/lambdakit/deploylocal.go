package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/samdeploy"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const deployLocalUsage = `Usage: lambdakit deploy-local -endpoint URL [-stack-name NAME] [flags]

Deploys a SAM template (-template) on a local AWS, a moto_server on this
machine (-endpoint, default $AWS_ENDPOINT_URL), as 'sam build && sam deploy'
would: each function is built (the Makefile's build-<LogicalID> target, or
go build of a Go main package CodeUri for Linux, or CodeUri as it is when
it holds a bootstrap), zipped, uploaded, the template transformed with
aws-sam-translator (python3 or the project's .venv) and the stack created
or updated. Settings come from the samconfig.toml next to the template
when there is one. It prints the stack's outputs as local URLs and the
lines that point a shell at the local AWS. More: docs/local-tooling.md.

Flags:
`

const deployLocalExitStatus = `
Exit status:
  0    the stack is created, updated, or had nothing to change
  1    the build, transform or deploy failed
  2    usage error, or a template or configuration it cannot deploy
  3    no local AWS at -endpoint, or no aws-sam-translator
  130  interrupted
`

// deployLocalCommand deploys any SAM template on the local AWS.
type deployLocalCommand struct {
	stdio
	opts      samdeploy.Options
	overrides string
}

func (c *deployLocalCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "deploy-local", deployLocalUsage, deployLocalExitStatus)
	fs.StringVar(&c.opts.Endpoint, "endpoint", "", "the local AWS's `URL`, on loopback (default $AWS_ENDPOINT_URL)")
	fs.StringVar(&c.opts.Template, "template", "template.yaml", "the SAM `template`")
	fs.StringVar(&c.opts.StackName, "stack-name", "", "the stack's `name` (default: samconfig.toml's stack_name)")
	fs.StringVar(&c.opts.ConfigFile, "config-file", "", "the SAM CLI configuration `file` (default: samconfig.toml next to the template, if any)")
	fs.StringVar(&c.opts.ConfigEnv, "config-env", "default", "the configuration's `environment`")
	fs.StringVar(&c.overrides, "parameter-overrides", "", "template `parameters` as 'NAME=VALUE ...', winning over the configuration's")
	fs.StringVar(&c.opts.BuildDir, "build-dir", "", "keep the builds, zips and transformed template in this `folder`")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fs.UsageError("unexpected arguments %q", rest)
	}
	if c.opts.Endpoint == "" {
		c.opts.Endpoint = lookup(c.environ, "AWS_ENDPOINT_URL")
	}
	if c.opts.Endpoint == "" {
		return fs.UsageError("no -endpoint and no AWS_ENDPOINT_URL: name the local AWS, such as http://127.0.0.1:5000 (moto_server -p 5000)")
	}
	if err := samdeploy.CheckEndpoint(c.opts.Endpoint); err != nil {
		return fs.UsageError("-endpoint: %v", err)
	}
	if c.opts.ConfigFile == "" {
		if p := filepath.Join(filepath.Dir(c.opts.Template), "samconfig.toml"); fileExists(p) {
			c.opts.ConfigFile = p
		}
	}
	if c.opts.ConfigFile == "" && c.opts.StackName == "" {
		return fs.UsageError("no -stack-name, and no samconfig.toml next to %s to take stack_name from", c.opts.Template)
	}
	if c.opts.ParameterOverrides, err = samdeploy.ParseOverrides(c.overrides); err != nil {
		return fs.UsageError("-parameter-overrides %v", err)
	}
	return nil
}

// Run implements command.
func (c *deployLocalCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	c.opts.Logf = func(format string, args ...any) {
		fmt.Fprintf(c.stderr, "lambdakit deploy-local: "+format+"\n", args...)
	}
	c.opts.BuildOutput = c.stderr
	res, err := samdeploy.Deploy(ctx, c.opts)
	if err != nil {
		return samdeploy.CommandError(ctx, err)
	}
	if err := res.Print(c.stdout, c.opts.Endpoint); err != nil {
		return err
	}
	fns, err := samtemplate.Functions(c.opts.Template)
	if err != nil {
		return cmdline.BadInput(err)
	}
	for _, fn := range fns {
		if why := unrunnable(fn.Runtime); why != "" {
			fmt.Fprintf(c.stdout, "Function %s: %s\n", fn.LogicalID, why)
		}
	}
	fmt.Fprintf(c.stdout, "The local AWS, for a shell (static test credentials; no instance metadata):\n%s", shellLines(c.opts.Endpoint, res.Region))
	return nil
}

// unrunnable says why lambdakit does not run a function of runtime
// locally, and what it would need; "" for the runtimes it runs.
func unrunnable(runtime string) string {
	switch runtime {
	case "provided.al2023", "provided.al2", "":
		return ""
	}
	return fmt.Sprintf("runtime %s is deployed but not run locally: lambdakit runs provided.al2023 and provided.al2 bootstraps; %s needs its runtime's interface client (AWS's base image, or sam local) to run", runtime, runtime)
}

// shellLines are the export lines that point a shell's AWS SDK and CLI at
// the local AWS at endpoint, in region.
func shellLines(endpoint, region string) string {
	return fmt.Sprintf("  export AWS_ENDPOINT_URL=%s AWS_REGION=%s\n  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true\n", endpoint, region)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
