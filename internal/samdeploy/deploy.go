package samdeploy

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"gopkg.in/yaml.v3"

	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
)

// ErrInput is an input that is not what it must be: the samconfig.toml
// environment, the template, a parameter, the endpoint. errors.Is(err,
// ErrInput) tells such an error, whose message is its own.
var ErrInput = errors.New("samdeploy: bad input")

// inputError is an input that is not what it must be.
type inputError struct{ err error }

func (e inputError) Error() string        { return e.err.Error() }
func (e inputError) Unwrap() error        { return e.err }
func (e inputError) Is(target error) bool { return target == ErrInput }

func badInput(err error) error { return inputError{err} }

// ErrLocalAWS means that nothing answered at the endpoint.
var ErrLocalAWS = errors.New("samdeploy: no local AWS")

// How long Deploy waits for the stack to be created or updated. moto does
// it before it answers; the bound is for a local AWS that hangs.
const (
	stackTimeout = 5 * time.Minute
	pollInterval = 250 * time.Millisecond
)

// maxTemplateBody is CloudFormation's limit for a template passed in the
// request; `sam deploy` uploads a larger one to S3 instead.
const maxTemplateBody = 51200

// Options says what Deploy deploys, and where.
type Options struct {
	// Template is the SAM template; its functions are built in its folder.
	Template string
	// ConfigFile and ConfigEnv name the samconfig.toml environment whose
	// deploy settings are used. With no ConfigFile, the stack is StackName,
	// in the endpoint's default region, its code in a bucket of Deploy's
	// own, with CAPABILITY_IAM, and a deploy that changes nothing succeeds.
	ConfigFile, ConfigEnv string
	// StackName, when set, wins over the configuration's stack_name.
	StackName string
	// ParameterOverrides are added to the environment's parameter_overrides,
	// and win over them.
	ParameterOverrides map[string]string
	// Endpoint is the local AWS, such as http://127.0.0.1:5000: one
	// endpoint for S3 and CloudFormation, on this machine.
	Endpoint string
	// BuildDir keeps the build of each function (BuildDir/LogicalID/), its
	// zip (BuildDir/LogicalID.zip) and the transformed template
	// (BuildDir/template.json); empty: a temporary folder, removed at the
	// end.
	BuildDir string
	// Transform is the transform script (empty: the one built into this
	// package, which scripts/sam-transform links to), Python the
	// interpreter with aws-sam-translator that runs it (empty: FindPython).
	Transform, Python string
	// Logf tells the progress, a line at a time; BuildOutput receives
	// make's output. Both may be nil.
	Logf        func(format string, args ...any)
	BuildOutput io.Writer
}

// Package is a function's code as Deploy uploaded it.
type Package struct {
	LogicalID string
	S3URI     string
	Size      int
	// CodeSHA256 is the zip's SHA-256 in base64, as Lambda reports it
	// (CodeSha256).
	CodeSHA256 string
}

// Output is one of the stack's outputs, as CloudFormation gives it: print
// a queue URL with LocalURL.
type Output struct{ Key, Value, Description string }

// LocalURL returns value, with an SQS queue URL on AWS
// (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME, which moto's
// CloudFormation gives as a queue's Ref) made the URL of the same queue at
// endpoint, the local AWS. Printed as it is, the AWS form would send the
// calls of a fresh shell (lambdakit publish, aws sqs) to AWS. Any other
// value is returned as it is.
func LocalURL(endpoint, value string) string {
	u, err := url.Parse(value)
	if err != nil || u.Scheme != "https" || u.RawQuery != "" || len(strings.Split(strings.Trim(u.Path, "/"), "/")) != 2 {
		return value
	}
	host := strings.ToLower(u.Hostname())
	sqsHost := host == "queue.amazonaws.com" || strings.HasSuffix(host, ".queue.amazonaws.com") ||
		strings.HasPrefix(host, "sqs.") && (strings.HasSuffix(host, ".amazonaws.com") || strings.HasSuffix(host, ".amazonaws.com.cn"))
	if !sqsHost {
		return value
	}
	return strings.TrimSuffix(endpoint, "/") + u.Path
}

// Result is what Deploy did.
type Result struct {
	StackName, StackID string
	Region             string
	// Status is the stack's status at the end: CREATE_COMPLETE or
	// UPDATE_COMPLETE, or the status it kept when there was nothing to
	// change (NoChanges: the same code, template and parameters as the
	// stack's).
	Status            string
	NoChanges         bool
	Packages          []Package
	Outputs           []Output
	Parameters        map[string]string // the value of every template parameter
	TranslatorVersion string
	// TemplatePath is the transformed template, "" when BuildDir is empty.
	TemplatePath string
}

// Deploy does what `sam build && sam deploy --config-env ENV` do, against
// the local AWS at o.Endpoint: builds each function of the template with
// `make build-<LogicalID>`, zips it, uploads it to S3 (a bucket of its
// own with resolve_s3), transforms the template with aws-sam-translator,
// checks the parameters and capabilities as CloudFormation would, and
// creates or updates the stack. An update that would change nothing leaves
// the stack as it is, as `sam deploy` does: NoChanges, an error only with
// fail_on_empty_changeset.
func Deploy(ctx context.Context, o Options) (*Result, error) {
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	buildOut := o.BuildOutput
	if buildOut == nil {
		buildOut = io.Discard
	}
	if err := CheckEndpoint(o.Endpoint); err != nil {
		return nil, err
	}
	cfg := Config{ResolveS3: true, Capabilities: []string{"CAPABILITY_IAM"}}
	source := "no samconfig.toml"
	if o.ConfigFile != "" {
		var err error
		if cfg, err = ReadConfig(o.ConfigFile, o.ConfigEnv); err != nil {
			return nil, badInput(err)
		}
		source = fmt.Sprintf("[%s] of %s", cfg.Env, o.ConfigFile)
	}
	if o.StackName != "" {
		cfg.StackName = o.StackName
	}
	if cfg.StackName == "" {
		return nil, badInput(errors.New("no stack name: give one, or a samconfig.toml environment with stack_name"))
	}
	overrides := maps.Clone(cfg.ParameterOverrides)
	maps.Copy(overrides, o.ParameterOverrides)
	fns, err := templateFunctions(o.Template)
	if err != nil {
		return nil, badInput(err)
	}
	params, err := samParameters(o.Template)
	if err != nil {
		return nil, badInput(err)
	}
	if o.Transform != "" {
		if _, err := os.Stat(o.Transform); err != nil {
			return nil, badInput(fmt.Errorf("the transform script: %w", err))
		}
	}

	awsCfg := motoserver.Config(o.Endpoint)
	if cfg.Region != "" {
		awsCfg.Region = cfg.Region
	}
	cf := cloudformation.NewFromConfig(awsCfg)
	s3c := s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.UsePathStyle = true })

	res := &Result{StackName: cfg.StackName, Region: awsCfg.Region}
	logf("stack %s (%s), region %s, on the local AWS at %s", cfg.StackName, source, awsCfg.Region, o.Endpoint)
	existing, err := describeStack(ctx, cf, cfg.StackName)
	if err != nil {
		return nil, localAWSError(o.Endpoint, err)
	}
	previous, err := previousParameters(existing, o.Endpoint)
	if err != nil {
		return nil, err
	}
	send, values, err := params.parameters(overrides, previous)
	if err != nil {
		return nil, err
	}
	python := o.Python
	if python == "" {
		if python, err = FindPython(); err != nil {
			return nil, err
		}
	}
	res.Parameters = values

	buildDir := o.BuildDir
	if buildDir == "" {
		if buildDir, err = os.MkdirTemp("", "lambdakit-deploy-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(buildDir)
	}
	script := o.Transform
	if script == "" {
		script = filepath.Join(buildDir, "sam-transform.py")
		if err := os.WriteFile(script, transformScript, 0o644); err != nil {
			return nil, err
		}
	}
	bucket := cfg.S3Bucket
	if bucket == "" {
		bucket = managedBucket
	}
	zips := map[string][]byte{}
	code := map[string]string{}
	pkgDirs := map[string]string{}
	for _, fn := range fns {
		goarch, err := fn.goArch(values)
		if err != nil {
			return nil, badInput(err)
		}
		dir := filepath.Join(buildDir, fn.LogicalID)
		pkgDir, err := build(ctx, filepath.Dir(o.Template), fn, goarch, dir, buildOut, logf)
		if err != nil {
			return nil, err
		}
		pkgDirs[fn.LogicalID] = pkgDir
		z, err := zipDir(pkgDir)
		if err != nil {
			return nil, fmt.Errorf("zip %s: %w", pkgDir, err)
		}
		if o.BuildDir != "" {
			if err := os.WriteFile(dir+".zip", z, 0o644); err != nil {
				return nil, err
			}
		}
		sum := md5.Sum(z) // the key `sam package` gives it
		key := strings.TrimPrefix(cfg.S3Prefix+"/"+hex.EncodeToString(sum[:]), "/")
		zips[fn.LogicalID], code[fn.LogicalID] = z, "s3://"+bucket+"/"+key
		sha := sha256.Sum256(z)
		res.Packages = append(res.Packages, Package{LogicalID: fn.LogicalID, S3URI: code[fn.LogicalID], Size: len(z), CodeSHA256: base64.StdEncoding.EncodeToString(sha[:])})
	}

	body, version, err := transform(ctx, python, script, o.Template, awsCfg.Region, values, code)
	if err != nil {
		return nil, err
	}
	res.TranslatorVersion = version
	var tpl cfnTemplate
	if err := json.Unmarshal(body, &tpl); err != nil {
		return nil, fmt.Errorf("the transformed template: %w", err)
	}
	if o.BuildDir != "" {
		res.TemplatePath = filepath.Join(buildDir, "template.json")
		if err := os.WriteFile(res.TemplatePath, body, 0o644); err != nil {
			return nil, err
		}
	}
	logf("transformed %s with aws-sam-translator %s%s", o.Template, version, map[bool]string{true: " into " + res.TemplatePath}[res.TemplatePath != ""])
	if err := tpl.checkCapabilities(cfg.Capabilities); err != nil {
		return nil, err
	}
	for _, fn := range fns {
		if !customRuntime(fn.Runtime) {
			continue // no bootstrap to check
		}
		arch, err := tpl.architecture(fn.LogicalID, values)
		if err != nil {
			return nil, badInput(err)
		}
		if err := checkBootstrap(pkgDirs[fn.LogicalID], arch); err != nil {
			return nil, fmt.Errorf("function %s: %w", fn.LogicalID, err)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		return nil, err
	}
	if compact.Len() > maxTemplateBody {
		return nil, fmt.Errorf("the transformed template is %d bytes, over CloudFormation's %d for a template in the request; deploy-local does not upload templates to S3", compact.Len(), maxTemplateBody)
	}

	if err := ensureBucket(ctx, s3c, bucket, awsCfg.Region); err != nil {
		return nil, err
	}
	for _, p := range res.Packages {
		key := strings.TrimPrefix(p.S3URI, "s3://"+bucket+"/")
		if _, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
			logf("%s: %s is there already (same zip), not uploaded again", p.LogicalID, p.S3URI)
			continue
		}
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(zips[p.LogicalID])}); err != nil {
			return nil, fmt.Errorf("upload %s: %w", p.S3URI, err)
		}
		logf("%s: uploaded %s (%d bytes)", p.LogicalID, p.S3URI, p.Size)
	}

	var tags []cftypes.Tag
	for _, k := range slices.Sorted(maps.Keys(cfg.Tags)) {
		tags = append(tags, cftypes.Tag{Key: aws.String(k), Value: aws.String(cfg.Tags[k])})
	}
	var caps []cftypes.Capability
	for _, c := range cfg.Capabilities {
		caps = append(caps, cftypes.Capability(c))
	}
	// CreateStack and UpdateStack rather than a change set, which `sam
	// deploy` uses: moto (5.2.1) does not work out a stack's outputs when
	// it executes a change set.
	if existing == nil {
		_, err = cf.CreateStack(ctx, &cloudformation.CreateStackInput{
			StackName:    aws.String(cfg.StackName),
			TemplateBody: aws.String(compact.String()),
			Parameters:   send,
			Capabilities: caps,
			Tags:         tags,
		})
	} else {
		_, err = cf.UpdateStack(ctx, &cloudformation.UpdateStackInput{
			StackName:    aws.String(cfg.StackName),
			TemplateBody: aws.String(compact.String()),
			Parameters:   send,
			Capabilities: caps,
			Tags:         tags,
		})
	}
	if err != nil && noChanges(err.Error()) {
		res.NoChanges = true
		if err := res.readStack(ctx, cf); err != nil {
			return nil, err
		}
		if cfg.FailOnEmptyChangeset {
			return res, fmt.Errorf("no changes to deploy to stack %s, and fail_on_empty_changeset is true", cfg.StackName)
		}
		logf("no changes to deploy: stack %s is up to date (%s); the same build, template and parameters as its last deploy", cfg.StackName, res.Status)
		return res, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s stack %s: %w", map[bool]string{true: "create", false: "update"}[existing == nil], cfg.StackName, err)
	}
	if cfg.ConfirmChangeset {
		logf("confirm_changeset is true in [%s]: deploy-local asks nothing, and makes no change set", cfg.Env)
	}
	if err := res.waitStack(ctx, cf); err != nil {
		return nil, err
	}
	want := map[bool]string{true: "CREATE_COMPLETE", false: "UPDATE_COMPLETE"}[existing == nil]
	if res.Status != want {
		return res, fmt.Errorf("stack %s: %s, not %s%s", cfg.StackName, res.Status, want, failureEvents(ctx, cf, cfg.StackName))
	}
	logf("stack %s: %s", cfg.StackName, res.Status)
	return res, nil
}

// managedBucket stands for the bucket `sam deploy` makes with resolve_s3
// (aws-sam-cli-managed-default-samclisourcebucket-<random>).
const managedBucket = "aws-sam-cli-managed-default-samclisourcebucket-local"

// CheckEndpoint accepts only an http(s) URL on this machine's loopback:
// Deploy sends static test credentials and deploys to a local AWS only.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return badInput(fmt.Errorf("endpoint %q: want the local AWS's URL, such as http://127.0.0.1:5000", endpoint))
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return badInput(fmt.Errorf("endpoint %q is not on this machine's loopback (127.0.0.1): deploy-local deploys to a local AWS only; deploy to AWS with sam deploy", endpoint))
	}
	return nil
}

// localAWSError tells a request that reached nothing from one that the
// local AWS refused.
func localAWSError(endpoint string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Errorf("the local AWS at %s: %w", endpoint, err)
	}
	return fmt.Errorf("%w answers at %s (%v): start one, e.g. 'go run ./functions/payment/demo local' (its moto_server serves S3, CloudFormation, Lambda, SQS and DynamoDB), or name it with -endpoint", ErrLocalAWS, endpoint, err)
}

// describeStack returns the stack, or nil when there is none.
func describeStack(ctx context.Context, cf *cloudformation.Client, name string) (*cftypes.Stack, error) {
	out, err := cf.DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(name)})
	var api smithy.APIError
	if errors.As(err, &api) && strings.Contains(api.ErrorMessage(), "does not exist") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range out.Stacks {
		if s.StackStatus != cftypes.StackStatusDeleteComplete {
			return &s, nil
		}
	}
	return nil, nil
}

// previousParameters returns the stack's parameters, for an update: nil
// when there is no stack to update. A stack that CloudFormation cannot
// update is an error that says why.
func previousParameters(s *cftypes.Stack, endpoint string) (map[string]string, error) {
	if s == nil {
		return nil, nil
	}
	name, status := aws.ToString(s.StackName), string(s.StackStatus)
	switch {
	case status == "REVIEW_IN_PROGRESS":
		return nil, fmt.Errorf("stack %s is REVIEW_IN_PROGRESS: a change set made it and was never executed; delete the stack (aws --endpoint-url %s cloudformation delete-stack --stack-name %s) and deploy again", name, endpoint, name)
	case strings.HasSuffix(status, "_IN_PROGRESS"):
		return nil, fmt.Errorf("stack %s is %s: wait until it is done, then deploy again", name, status)
	case status == "ROLLBACK_COMPLETE" || status == "ROLLBACK_FAILED" || status == "CREATE_FAILED" || status == "DELETE_FAILED":
		return nil, fmt.Errorf("stack %s is %s: its creation failed, and CloudFormation cannot update such a stack; delete it (aws --endpoint-url %s cloudformation delete-stack --stack-name %s) and deploy again", name, status, endpoint, name)
	}
	previous := map[string]string{}
	for _, p := range s.Parameters {
		previous[aws.ToString(p.ParameterKey)] = aws.ToString(p.ParameterValue)
	}
	return previous, nil
}

// noChanges says whether a CloudFormation message means that a change set
// would change nothing.
func noChanges(msg string) bool {
	return strings.Contains(msg, "didn't contain changes") || strings.Contains(msg, "No updates are to be performed")
}

// ensureBucket makes the bucket unless it exists.
func ensureBucket(ctx context.Context, s3c *s3.Client, bucket, region string) error {
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err == nil {
		return nil
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(bucket)}
	if region != "us-east-1" {
		in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(region)}
	}
	if _, err := s3c.CreateBucket(ctx, in); err != nil {
		var owned *s3types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			return fmt.Errorf("create bucket %s: %w", bucket, err)
		}
	}
	return nil
}

// waitStack waits until the stack's operation is done, and reads it.
func (r *Result) waitStack(ctx context.Context, cf *cloudformation.Client) error {
	ctx, cancel := context.WithTimeout(ctx, stackTimeout)
	defer cancel()
	for {
		if err := r.readStack(ctx, cf); err != nil {
			return err
		}
		if !strings.HasSuffix(r.Status, "_IN_PROGRESS") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack %s still %s after %v: %w", r.StackName, r.Status, stackTimeout, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// readStack reads the stack's status and outputs into r.
func (r *Result) readStack(ctx context.Context, cf *cloudformation.Client) error {
	s, err := describeStack(ctx, cf, r.StackName)
	if err != nil {
		return fmt.Errorf("DescribeStacks %s: %w", r.StackName, err)
	}
	if s == nil {
		return fmt.Errorf("stack %s does not exist", r.StackName)
	}
	r.StackID, r.Status, r.Outputs = aws.ToString(s.StackId), string(s.StackStatus), nil
	for _, o := range s.Outputs {
		r.Outputs = append(r.Outputs, Output{Key: aws.ToString(o.OutputKey), Value: aws.ToString(o.OutputValue), Description: aws.ToString(o.Description)})
	}
	slices.SortFunc(r.Outputs, func(a, b Output) int { return strings.Compare(a.Key, b.Key) })
	return nil
}

// failureEvents returns the reasons of the stack's latest failed resources,
// for an error message.
func failureEvents(ctx context.Context, cf *cloudformation.Client, stack string) string {
	out, err := cf.DescribeStackEvents(ctx, &cloudformation.DescribeStackEventsInput{StackName: aws.String(stack)})
	if err != nil {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, e := range out.StackEvents {
		if strings.HasSuffix(string(e.ResourceStatus), "FAILED") && e.ResourceStatusReason != nil && n < 10 {
			fmt.Fprintf(&b, "\n  %s (%s): %s: %s", aws.ToString(e.LogicalResourceId), aws.ToString(e.ResourceType), e.ResourceStatus, aws.ToString(e.ResourceStatusReason))
			n++
		}
	}
	return b.String()
}

// samParameters reads the SAM template's Parameters (the transform leaves
// them as they are), to decide their values before transforming.
func samParameters(path string) (*cfnTemplate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Parameters map[string]struct {
			Type           string `yaml:"Type"`
			Default        any    `yaml:"Default"`
			AllowedValues  []any  `yaml:"AllowedValues"`
			AllowedPattern string `yaml:"AllowedPattern"`
		} `yaml:"Parameters"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Through JSON, so that the values compare as in the transformed
	// template.
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var t cfnTemplate
	return &t, json.Unmarshal(b, &t)
}

// Print writes the stack's status and its outputs, a queue URL as the URL
// of the same queue at endpoint, the local AWS (LocalURL): the AWS form
// that moto's CloudFormation gives would send a fresh shell's calls to AWS.
func (r *Result) Print(w io.Writer, endpoint string) error {
	if r.NoChanges {
		fmt.Fprintf(w, "Stack %s: %s (no changes to deploy)\n", r.StackName, r.Status)
	} else {
		fmt.Fprintf(w, "Stack %s: %s\n", r.StackName, r.Status)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range r.Outputs {
		fmt.Fprintf(tw, "  %s\t%s\n", o.Key, LocalURL(endpoint, o.Value))
	}
	return tw.Flush()
}

// CommandError is how a command that ran Deploy ends on err (see
// internal/cmdline): bad input, no local AWS or translator, interrupted,
// or failed.
func CommandError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return cmdline.Interrupted(err)
	case errors.Is(err, ErrInput):
		return cmdline.BadInput(err)
	case errors.Is(err, ErrLocalAWS), errors.Is(err, ErrNoTranslator), errors.Is(err, ErrNoStack):
		return cmdline.CannotRun(err)
	}
	return cmdline.Failed(err)
}

// ErrNoStack means that the stack ReadStack was asked for is not deployed.
var ErrNoStack = errors.New("samdeploy: no such stack")

// ReadStack returns the stack name deployed on the local AWS at endpoint,
// in moto's region: its status and outputs.
func ReadStack(ctx context.Context, endpoint, name string) (*Result, error) {
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	cfg := motoserver.Config(endpoint)
	cf := cloudformation.NewFromConfig(cfg)
	s, err := describeStack(ctx, cf, name)
	switch {
	case err != nil:
		return nil, localAWSError(endpoint, err)
	case s == nil:
		return nil, fmt.Errorf("%w: %s at %s (deploy it with deploy-local)", ErrNoStack, name, endpoint)
	}
	r := &Result{StackName: name, Region: cfg.Region}
	if err := r.readStack(ctx, cf); err != nil {
		return nil, err
	}
	return r, nil
}
