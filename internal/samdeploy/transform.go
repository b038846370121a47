package samdeploy

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"

	"github.com/lambdakit/lambdakit/internal/childproc"
	"github.com/lambdakit/lambdakit/internal/motoserver"
)

// transformScript is sam-transform.py, the script that transforms a
// template with aws-sam-translator, for a Deploy outside this repository.
//
//go:embed sam-transform.py
var transformScript []byte

// ErrNoTranslator means that no Python with aws-sam-translator was found.
// Tests skip on it, except under CI.
var ErrNoTranslator = errors.New("samdeploy: no Python with aws-sam-translator (python3 on PATH, or the project's .venv/bin/python): run 'make deps', or pip install aws-sam-translator")

// How long finding the Python and transforming may take: importing the
// translator alone takes a second or two.
const (
	probeTimeout     = 30 * time.Second
	transformTimeout = 2 * time.Minute
)

// FindPython returns the Python that has aws-sam-translator: python3 on
// PATH when it has it, else the project's virtual environment, .venv/bin/python
// under the root of the module holding the working directory (where `make
// deps` installs it when the machine has none).
func FindPython() (string, error) {
	var candidates []string
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	if p := motoserver.VenvProgram("python"); p != "" {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		// find_spec finds the package without importing it, which takes
		// seconds; the transform imports it.
		cmd := exec.CommandContext(ctx, p, "-c", `import importlib.util, sys; sys.exit(importlib.util.find_spec("samtranslator") is None)`)
		cmd.Env = pythonEnv()
		err := cmd.Run()
		cancel()
		if err == nil {
			return p, nil
		}
	}
	return "", ErrNoTranslator
}

// pythonEnv is the environment of the translator's Python: this process's,
// without any AWS setting of the developer's, with static test credentials
// and an endpoint where nothing listens. The translator needs no AWS access;
// if it ever tried, it would reach nothing.
func pythonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env, motoserver.Env("http://127.0.0.1:1")...)
}

// transform runs the transform script with python on the SAM template, with
// the parameter values and the S3 locations of the functions' code, and
// returns the CloudFormation template (JSON) and the translator's version.
func transform(ctx context.Context, python, script, template, region string, params, code map[string]string) ([]byte, string, error) {
	args := []string{script, template, region}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		args = append(args, "--param", k+"="+params[k])
	}
	for _, k := range slices.Sorted(maps.Keys(code)) {
		args = append(args, "--code", k+"="+code[k])
	}
	ctx, cancel := context.WithTimeout(ctx, transformTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = pythonEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	childproc.Setup(cmd)
	cmd.Cancel = func() error { childproc.Signal(cmd, true); return nil }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	first, rest, _ := strings.Cut(stderr.String(), "\n")
	version := strings.TrimPrefix(first, "sam-transform: aws-sam-translator ")
	if version == first {
		version, rest = "", stderr.String()
	}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return nil, "", fmt.Errorf("%s %s: stopped after %v: %w", python, script, transformTimeout, ctx.Err())
	case errors.As(err, &exit):
		return nil, "", badInput(fmt.Errorf("%s %s: %v\n%s", python, script, err, strings.TrimSpace(rest)))
	case err != nil:
		return nil, "", fmt.Errorf("%s %s: %w", python, script, err)
	}
	return stdout.Bytes(), version, nil
}

// cfnTemplate is what Deploy reads of the transformed template.
type cfnTemplate struct {
	Parameters map[string]struct {
		Type           string `json:"Type"`
		Default        any    `json:"Default"`
		AllowedValues  []any  `json:"AllowedValues"`
		AllowedPattern string `json:"AllowedPattern"`
	} `json:"Parameters"`
	Resources map[string]struct {
		Type       string          `json:"Type"`
		Properties json.RawMessage `json:"Properties"`
	} `json:"Resources"`
}

// scalar returns a template value (a default, an allowed value) as
// CloudFormation compares it: as text.
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// parameters decides the value of each of the template's parameters as
// `sam deploy` does: an override's value; else, when the stack exists and
// has the parameter, its previous value (UsePreviousValue); else the
// template's default. It returns the parameters to send and the value of
// each one, and checks what CloudFormation would check before creating
// anything (moto does not): that each parameter has a value, among
// AllowedValues and matching AllowedPattern, and that every override names
// a parameter of the template.
func (t *cfnTemplate) parameters(overrides, previous map[string]string) ([]cftypes.Parameter, map[string]string, error) {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(overrides)) {
		if _, ok := t.Parameters[name]; !ok {
			errs = append(errs, fmt.Errorf("parameter %s: the template has no such parameter (it has %s)", name, cmp.Or(strings.Join(slices.Sorted(maps.Keys(t.Parameters)), ", "), "none")))
		}
	}
	var send []cftypes.Parameter
	values := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(t.Parameters)) {
		p := t.Parameters[name]
		v, override := overrides[name]
		prev, hasPrev := previous[name]
		switch {
		case override:
			send = append(send, cftypes.Parameter{ParameterKey: aws.String(name), ParameterValue: aws.String(v)})
		case hasPrev:
			send = append(send, cftypes.Parameter{ParameterKey: aws.String(name), UsePreviousValue: aws.Bool(true)})
			v = prev
		case p.Default != nil:
			// Sent, though CloudFormation would take the default anyway:
			// moto finds an update with nothing new only when every
			// parameter is named.
			v = scalar(p.Default)
			send = append(send, cftypes.Parameter{ParameterKey: aws.String(name), ParameterValue: aws.String(v)})
		default:
			errs = append(errs, fmt.Errorf("parameter %s has no value: the template gives it no default and the samconfig.toml environment no override; pass it with -parameter-overrides %s=VALUE", name, name))
			continue
		}
		values[name] = v
		if len(p.AllowedValues) > 0 && !slices.ContainsFunc(p.AllowedValues, func(a any) bool { return scalar(a) == v }) {
			errs = append(errs, fmt.Errorf("parameter %s=%q: not one of its AllowedValues %v", name, v, p.AllowedValues))
		}
		if p.AllowedPattern != "" && (p.Type == "String" || p.Type == "") {
			re, err := regexp.Compile(`^(?:` + p.AllowedPattern + `)$`)
			if err != nil {
				errs = append(errs, fmt.Errorf("parameter %s: its AllowedPattern %q is not a pattern Go can check: %v", name, p.AllowedPattern, err))
			} else if !re.MatchString(v) {
				errs = append(errs, fmt.Errorf("parameter %s=%q does not match its AllowedPattern %s", name, v, p.AllowedPattern))
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, badInput(errors.Join(errs...))
	}
	return send, values, nil
}

// iamTypes are the resource types for which CloudFormation requires
// CAPABILITY_IAM, each with the property that names the resource, which
// requires CAPABILITY_NAMED_IAM instead.
var iamTypes = map[string]string{
	"AWS::IAM::AccessKey":           "",
	"AWS::IAM::Group":               "GroupName",
	"AWS::IAM::InstanceProfile":     "InstanceProfileName",
	"AWS::IAM::ManagedPolicy":       "ManagedPolicyName",
	"AWS::IAM::Policy":              "",
	"AWS::IAM::Role":                "RoleName",
	"AWS::IAM::User":                "UserName",
	"AWS::IAM::UserToGroupAddition": "",
}

// checkCapabilities refuses, as CloudFormation would (moto does not), a
// template with IAM resources that the capabilities do not acknowledge.
func (t *cfnTemplate) checkCapabilities(capabilities []string) error {
	has := func(c string) bool { return slices.Contains(capabilities, c) }
	var need string
	var why []string
	for _, id := range slices.Sorted(maps.Keys(t.Resources)) {
		r := t.Resources[id]
		nameProp, ok := iamTypes[r.Type]
		if !ok {
			continue
		}
		var props map[string]any
		_ = json.Unmarshal(r.Properties, &props)
		if nameProp != "" && props[nameProp] != nil {
			need = "CAPABILITY_NAMED_IAM"
		} else if need == "" {
			need = "CAPABILITY_IAM"
		}
		why = append(why, id)
	}
	switch {
	case need == "":
		return nil
	case has("CAPABILITY_NAMED_IAM"), need == "CAPABILITY_IAM" && has("CAPABILITY_IAM"):
		return nil
	}
	return badInput(fmt.Errorf("the template has IAM resources (%s): CloudFormation requires capabilities [%s], and the samconfig.toml environment's capabilities are %q",
		strings.Join(why, ", "), need, strings.Join(capabilities, " ")))
}

// architecture returns the instruction set of the Lambda function id of the
// transformed template: its Architectures, with a !Ref to a parameter
// resolved from values; x86_64, Lambda's default, when it has none.
func (t *cfnTemplate) architecture(id string, values map[string]string) (string, error) {
	r, ok := t.Resources[id]
	if !ok || r.Type != "AWS::Lambda::Function" {
		return "", fmt.Errorf("the transformed template has no AWS::Lambda::Function %s", id)
	}
	var props struct {
		Architectures []any `json:"Architectures"`
	}
	if err := json.Unmarshal(r.Properties, &props); err != nil {
		return "", fmt.Errorf("function %s: %w", id, err)
	}
	switch len(props.Architectures) {
	case 0:
		return "x86_64", nil
	case 1:
	default:
		return "", fmt.Errorf("function %s: Architectures has %d items; Lambda takes one", id, len(props.Architectures))
	}
	switch a := props.Architectures[0].(type) {
	case string:
		return a, nil
	case map[string]any:
		if ref, ok := a["Ref"].(string); ok && len(a) == 1 {
			if v, ok := values[ref]; ok {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("function %s: Architectures %v: want a literal or a !Ref to a parameter", id, props.Architectures[0])
}
