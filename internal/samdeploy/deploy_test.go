package samdeploy

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	cftypes "github.com/aws/aws-sdk-go-v2/service/cloudformation/types"
)

func TestZipDirIsReproducibleAndKeepsModes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "data.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := zipDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A later build of the same files: newer times, same zip.
	if err := os.Chtimes(filepath.Join(dir, "bootstrap"), aTime, aTime); err != nil {
		t.Fatal(err)
	}
	b, err := zipDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two zips of the same files differ; want the same bytes (and so the same S3 key)")
	}
	zr, err := zip.NewReader(bytes.NewReader(a), int64(len(a)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range zr.File {
		got = append(got, fmt.Sprintf("%s %v", f.Name, f.Mode().Perm()))
	}
	if fmt.Sprint(got) != "[bootstrap -rwxr-xr-x sub/data.json -rw-r--r--]" {
		t.Errorf("zip holds %v; want the bootstrap executable and the data file", got)
	}

	if err := os.Symlink("bootstrap", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := zipDir(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a symlink: error %v; want it refused", err)
	}
}

var aTime = zipEpoch.AddDate(40, 0, 0)

func TestCheckBootstrap(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a Linux executable: this test's own binary")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[runtime.GOARCH]
	if arch == "" {
		t.Skipf("Lambda runs no %s binary", runtime.GOARCH)
	}
	other := map[string]string{"x86_64": "arm64", "arm64": "x86_64"}[arch]
	dir := t.TempDir()
	write := func(content []byte, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "bootstrap"), content, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, "bootstrap"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(raw, 0o755)
	if err := checkBootstrap(dir, arch); err != nil {
		t.Errorf("%s binary as %s: %v", arch, arch, err)
	}
	if err := checkBootstrap(dir, other); err == nil || !strings.Contains(err.Error(), "built for "+arch+", but the function's Architectures is "+other) {
		t.Errorf("%s binary as %s: error %v; want the mismatch named", arch, other, err)
	}
	write(raw, 0o644)
	if err := checkBootstrap(dir, arch); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("not executable: error %v", err)
	}
	write([]byte("#!/bin/sh\n"), 0o755)
	if err := checkBootstrap(dir, arch); err == nil || !strings.Contains(err.Error(), "not a Linux executable") {
		t.Errorf("a script: error %v", err)
	}
	if err := checkBootstrap(t.TempDir(), arch); err == nil || !strings.Contains(err.Error(), "no bootstrap") {
		t.Errorf("no bootstrap: error %v", err)
	}
}

func TestTemplateFunctions(t *testing.T) {
	path := writeFile(t, "template.yaml", `Resources:
  B:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: functions/b, Handler: bootstrap, Runtime: provided.al2023, Architectures: [arm64]}
  A:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: ., Handler: bootstrap}
  Inline:
    Type: AWS::Serverless::Function
    Properties: {InlineCode: "x", Handler: index.handler}
  Q:
    Type: AWS::SQS::Queue
`)
	fns, err := templateFunctions(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(fns); got != "[{A .   } {B functions/b provided.al2023 arm64 }]" {
		t.Errorf("got %s; want A and B, sorted, without the inline one", got)
	}
	for props, want := range map[string]string{
		"{CodeUri: s3://b/k}":                "in S3 already",
		"{PackageType: Image, ImageUri: x}":  "is an image",
		"{Handler: bootstrap}":               "want CodeUri",
		"{CodeUri: !Sub '${AWS::Region}/x'}": "want CodeUri",
	} {
		path := writeFile(t, "template.yaml", "Resources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties: "+props+"\n")
		if _, err := templateFunctions(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want %q", props, err, want)
		}
	}
}

const paramsTemplate = `Parameters:
  Url:
    Type: String
    AllowedPattern: ^https://[a-z.]+$
  Stage:
    Type: String
    AllowedValues: [dev, prod]
    Default: dev
  Count:
    Type: Number
    Default: 3
Resources: {}
`

func TestParameters(t *testing.T) {
	tpl, err := samParameters(writeFile(t, "template.yaml", paramsTemplate))
	if err != nil {
		t.Fatal(err)
	}
	show := func(send []cftypes.Parameter) string {
		var s []string
		for _, p := range send {
			if aws.ToBool(p.UsePreviousValue) {
				s = append(s, aws.ToString(p.ParameterKey)+"=(previous)")
			} else {
				s = append(s, aws.ToString(p.ParameterKey)+"="+aws.ToString(p.ParameterValue))
			}
		}
		return strings.Join(s, " ")
	}

	send, values, err := tpl.parameters(map[string]string{"Url": "https://a.b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(send) + " | " + fmt.Sprint(values); got != "Count=3 Stage=dev Url=https://a.b | map[Count:3 Stage:dev Url:https://a.b]" {
		t.Errorf("create: %s", got)
	}
	// An update keeps what is not overridden, as sam deploy does.
	send, values, err = tpl.parameters(map[string]string{"Stage": "prod"}, map[string]string{"Url": "https://old.b", "Stage": "dev", "Count": "4"})
	if err != nil {
		t.Fatal(err)
	}
	if got := show(send) + " | " + fmt.Sprint(values); got != "Count=(previous) Stage=prod Url=(previous) | map[Count:4 Stage:prod Url:https://old.b]" {
		t.Errorf("update: %s", got)
	}

	for _, c := range []struct {
		overrides map[string]string
		want      []string
	}{
		{nil, []string{"parameter Url has no value", "-parameter-overrides Url=VALUE"}},
		{map[string]string{"Url": "http://a.b"}, []string{`Url="http://a.b" does not match its AllowedPattern`}},
		{map[string]string{"Url": "https://a.b", "Stage": "qa"}, []string{`Stage="qa": not one of its AllowedValues [dev prod]`}},
		{map[string]string{"Url": "https://a.b", "Nope": "1"}, []string{"parameter Nope: the template has no such parameter (it has Count, Stage, Url)"}},
	} {
		_, _, err := tpl.parameters(c.overrides, nil)
		if !errors.Is(err, ErrInput) {
			t.Errorf("%v: error %v; want ErrInput", c.overrides, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %v; want %q", c.overrides, err, w)
			}
		}
	}
}

func TestCheckCapabilities(t *testing.T) {
	tpl := func(resources string) *cfnTemplate {
		var c cfnTemplate
		if err := json.Unmarshal([]byte(`{"Resources": {`+resources+`}}`), &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	role := `"R": {"Type": "AWS::IAM::Role", "Properties": {}}`
	named := `"N": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "x"}}`
	queue := `"Q": {"Type": "AWS::SQS::Queue"}`
	for _, c := range []struct {
		resources string
		caps      []string
		want      string // "" for no error
	}{
		{queue, nil, ""},
		{role, []string{"CAPABILITY_IAM"}, ""},
		{role, []string{"CAPABILITY_NAMED_IAM"}, ""},
		{role, nil, "requires capabilities [CAPABILITY_IAM]"},
		{role + "," + named, []string{"CAPABILITY_IAM"}, "requires capabilities [CAPABILITY_NAMED_IAM]"},
		{named, []string{"CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"}, ""},
	} {
		err := tpl(c.resources).checkCapabilities(c.caps)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s with %v: error %v; want %q", c.resources, c.caps, err, c.want)
		}
	}
}

func TestArchitecture(t *testing.T) {
	var tpl cfnTemplate
	if err := json.Unmarshal([]byte(`{"Resources": {
		"Lit": {"Type": "AWS::Lambda::Function", "Properties": {"Architectures": ["arm64"]}},
		"Ref": {"Type": "AWS::Lambda::Function", "Properties": {"Architectures": [{"Ref": "Arch"}]}},
		"None": {"Type": "AWS::Lambda::Function", "Properties": {}},
		"If": {"Type": "AWS::Lambda::Function", "Properties": {"Architectures": [{"Fn::If": ["C", "arm64", "x86_64"]}]}}}}`), &tpl); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{"Arch": "x86_64"}
	var got []string
	for _, id := range []string{"Lit", "Ref", "None", "If", "Missing"} {
		a, err := tpl.architecture(id, values)
		got = append(got, fmt.Sprintf("%s=%s/%v", id, a, err != nil))
	}
	if s := strings.Join(got, " "); s != "Lit=arm64/false Ref=x86_64/false None=x86_64/false If=/true Missing=/true" {
		t.Errorf("got %s", s)
	}
}

// The transform script on the repository's template: the functions become
// AWS::Lambda::Function resources with their code where it was uploaded,
// their SQS events event source mappings; a wrong parameter is refused.
func TestTransform(t *testing.T) {
	python, err := FindPython()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; failing, because CI is set", err)
		}
		t.Skipf("%v; skipping", err)
	}
	script, template := "../../scripts/sam-transform", "../../template.yaml"
	fns, err := templateFunctions(template)
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]string{}
	for _, f := range fns {
		code[f.LogicalID] = "s3://bucket/prefix/" + f.LogicalID
	}
	params := map[string]string{"PaymentGatewayUrl": "https://gateway.invalid"}
	ctx := context.Background()
	body, version, err := transform(ctx, python, script, template, "us-east-1", params, code)
	if err != nil {
		t.Fatal(err)
	}
	if version == "" {
		t.Error("no translator version on the script's first line")
	}
	var tpl struct {
		Transform any `json:"Transform"`
		Resources map[string]struct {
			Type       string         `json:"Type"`
			Properties map[string]any `json:"Properties"`
		} `json:"Resources"`
	}
	if err := json.Unmarshal(body, &tpl); err != nil {
		t.Fatal(err)
	}
	if tpl.Transform != nil {
		t.Errorf("Transform %v left in the template", tpl.Transform)
	}
	esms := 0
	for id, r := range tpl.Resources {
		if strings.HasPrefix(r.Type, "AWS::Serverless::") {
			t.Errorf("%s is still %s", id, r.Type)
		}
		if r.Type == "AWS::Lambda::EventSourceMapping" {
			esms++
		}
	}
	if esms == 0 {
		t.Error("no AWS::Lambda::EventSourceMapping; want the SQS events'")
	}
	for _, f := range fns {
		r := tpl.Resources[f.LogicalID]
		if got := fmt.Sprint(r.Properties["Code"]); r.Type != "AWS::Lambda::Function" || got != "map[S3Bucket:bucket S3Key:prefix/"+f.LogicalID+"]" {
			t.Errorf("%s: %s with Code %s; want an AWS::Lambda::Function with the uploaded code", f.LogicalID, r.Type, got)
		}
	}

	_, _, err = transform(ctx, python, script, template, "us-east-1", map[string]string{"NoSuchParameter": "x"}, code)
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "declares no parameter NoSuchParameter") {
		t.Errorf("an unknown parameter: error %v; want ErrInput naming it", err)
	}
	bad := writeFile(t, "template.yaml", "Transform: AWS::Serverless-2016-10-31\nResources:\n  F:\n    Type: AWS::Serverless::Function\n    Properties: {Handler: bootstrap, Runtime: provided.al2023, CodeUri: s3://b/k, Events: {E: {Type: SQS, Properties: {}}}}\n")
	if _, _, err := transform(ctx, python, script, bad, "us-east-1", nil, nil); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "not a valid SAM template") {
		t.Errorf("an invalid template: error %v; want ErrInput with the translator's reasons", err)
	}
}

// A queue's Ref, as moto's CloudFormation gives it, is an AWS URL; the
// outputs give the same queue at the local AWS, and leave every other value
// as it is.
func TestLocalURL(t *testing.T) {
	const local = "http://127.0.0.1:5000"
	for _, c := range []struct{ name, value, want string }{
		{"a queue URL on AWS", "https://sqs.us-east-1.amazonaws.com/123456789012/payments", local + "/123456789012/payments"},
		{"a FIFO queue URL", "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo", local + "/123456789012/payments.fifo"},
		{"a legacy queue URL", "https://eu-west-1.queue.amazonaws.com/123456789012/payments", local + "/123456789012/payments"},
		{"a China queue URL", "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/payments", local + "/123456789012/payments"},
		{"a queue URL at the local AWS already", local + "/123456789012/payments", local + "/123456789012/payments"},
		{"a table name", "payments", "payments"},
		{"an ARN", "arn:aws:sqs:us-east-1:123456789012:payments", "arn:aws:sqs:us-east-1:123456789012:payments"},
		{"another AWS URL", "https://s3.us-east-1.amazonaws.com/bucket/key", "https://s3.us-east-1.amazonaws.com/bucket/key"},
		{"a gateway URL", "https://gateway.invalid/v1", "https://gateway.invalid/v1"},
	} {
		if got := LocalURL(local, c.value); got != c.want {
			t.Errorf("%s: LocalURL(%q) = %q; want %q", c.name, c.value, got, c.want)
		}
	}
}

// build takes the Makefile's build-<LogicalID> target first, then go
// build of a Go main package, then CodeUri as it is; a provided.* function
// with none of these is refused, naming what it needs.
func TestBuildTakesTheFirstWayThatApplies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and go build")
	}
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("Makefile", "build-Made:\n\techo made > $(ARTIFACTS_DIR)/bootstrap\n", 0o644)
	write("go/go.mod", "module example.com/fn\n\ngo 1.22\n", 0o644)
	write("go/main.go", "package main\n\nfunc main() {}\n", 0o644)
	write("built/bootstrap", "#!/bin/sh\n", 0o755)
	write("py/index.py", "def handler(e, c): pass\n", 0o644)
	write("empty/README", "nothing to run\n", 0o644)
	logf := func(string, ...any) {}
	for _, c := range []struct {
		fn      function
		want    string // the folder to zip, under dir; "" for the build folder
		wantErr string
	}{
		{fn: function{LogicalID: "Made", CodeURI: "go", Runtime: "provided.al2023"}},
		{fn: function{LogicalID: "Go", CodeURI: "go", Runtime: "provided.al2023"}},
		{fn: function{LogicalID: "Built", CodeURI: "built", Runtime: "provided.al2"}, want: "built"},
		{fn: function{LogicalID: "Py", CodeURI: "py", Runtime: "python3.12"}, want: "py"},
		{fn: function{LogicalID: "Empty", CodeURI: "empty", Runtime: "provided.al2023"}, wantErr: "holds no bootstrap and no Go main package, and " + filepath.Join(dir, "Makefile") + " has no build-Empty target"},
	} {
		out := filepath.Join(t.TempDir(), c.fn.LogicalID)
		got, err := build(t.Context(), dir, c.fn, "amd64", out, io.Discard, logf)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v; want %q", c.fn.LogicalID, err, c.wantErr)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", c.fn.LogicalID, err)
			continue
		}
		want := out
		if c.want != "" {
			want = filepath.Join(dir, c.want)
		}
		if got != want {
			t.Errorf("%s: package folder %s; want %s", c.fn.LogicalID, got, want)
		}
		switch c.fn.LogicalID {
		case "Made":
			if b, err := os.ReadFile(filepath.Join(got, "bootstrap")); string(b) != "made\n" {
				t.Errorf("Made: bootstrap %q, %v; want the Makefile's", b, err)
			}
		case "Go":
			if err := checkBootstrap(got, "x86_64"); err != nil {
				t.Errorf("Go: %v", err)
			}
		}
	}
}
