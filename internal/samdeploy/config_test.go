package samdeploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const sampleConfig = `# comment
version = 0.1

[default.global.parameters]
stack_name = "app"   # trailing comment

[default.deploy.parameters]
capabilities = "CAPABILITY_IAM CAPABILITY_AUTO_EXPAND"
resolve_s3 = true
s3_prefix = 'app'
region = "eu-west-1"
confirm_changeset = true
parameter_overrides = "Url=\"https://x.example.com/a b\" Stage=dev Quote='x y'"
tags = ["app=\"x\"", "team=core"]

[other.deploy.parameters]
stack_name = "other"
s3_bucket = "bucket"
fail_on_empty_changeset = false
parameter_overrides = ["A=1", "B=\"2 3\""]
capabilities = ["CAPABILITY_NAMED_IAM"]

[nostack.deploy.parameters]
resolve_s3 = true
`

func TestReadConfig(t *testing.T) {
	path := writeFile(t, "samconfig.toml", sampleConfig)
	c, err := ReadConfig(path, "default")
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %s %v %s %q %v %v %v %v", c.StackName, c.Region, c.ResolveS3, c.S3Prefix, c.Capabilities, c.ParameterOverrides, c.Tags, c.ConfirmChangeset, c.FailOnEmptyChangeset)
	want := `app eu-west-1 true app ["CAPABILITY_IAM" "CAPABILITY_AUTO_EXPAND"] map[Quote:x y Stage:dev Url:https://x.example.com/a b] map[app:x team:core] true true`
	if got != want {
		t.Errorf("[default]: got %s; want %s", got, want)
	}

	c, err = ReadConfig(path, "other")
	if err != nil {
		t.Fatal(err)
	}
	got = fmt.Sprintf("%s %s %v %q %v %v", c.StackName, c.S3Bucket, c.FailOnEmptyChangeset, c.Capabilities, c.ParameterOverrides, c.ConfirmChangeset)
	if want := `other bucket false ["CAPABILITY_NAMED_IAM"] map[A:1 B:2 3] false`; got != want {
		t.Errorf("[other]: got %s; want %s", got, want)
	}

	if _, err := ReadConfig(path, "nostack"); err == nil || !strings.Contains(err.Error(), "no stack_name") {
		t.Errorf("[nostack]: error %v; want no stack_name", err)
	}
	if _, err := ReadConfig(path, "prod"); err == nil || !strings.Contains(err.Error(), `no environment "prod"; it has default, nostack, other`) {
		t.Errorf("[prod]: error %v; want the environments listed", err)
	}
}

func TestReadConfigDefaultsAndErrors(t *testing.T) {
	path := writeFile(t, "samconfig.toml", "[e.deploy.parameters]\nstack_name = \"s\"\nresolve_s3 = true\n")
	c, err := ReadConfig(path, "e")
	if err != nil {
		t.Fatal(err)
	}
	if !c.FailOnEmptyChangeset || c.ConfirmChangeset || c.Region != "" {
		t.Errorf("defaults: %+v; want fail_on_empty_changeset true (sam's default), confirm_changeset false, no region", c)
	}
	for content, want := range map[string]string{
		"[e.deploy.parameters]\nstack_name = \"s\"\n":                                      "neither s3_bucket nor resolve_s3",
		"[e.deploy.parameters]\nstack_name = 5\nresolve_s3 = true\n":                       "stack_name: want a string",
		"[e.deploy.parameters]\nstack_name = \"s\"\nresolve_s3 = \"yes\"\n":                "resolve_s3: want true or false",
		"[e.deploy.parameters]\nstack_name = \"s\"\nresolve_s3 = true\ntags = \"a\"\n":     "want NAME=VALUE pairs",
		"[e.deploy.parameters]\nstack_name = \"s\"\nresolve_s3 = true\ntags = true\n":      "want a string or an array of strings",
		"[e.deploy.parameters]\nstack_name = \"s\"\nresolve_s3 = true\nregion = [\"a\"]\n": "region: want a string",
	} {
		_, err := ReadConfig(writeFile(t, "samconfig.toml", content), "e")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v; want %q", content, err, want)
		}
	}
}

// Every environment of the repository's samconfig.toml that deploys reads
// without error: the parser reads the file the SAM CLI reads.
func TestRepositorySamconfig(t *testing.T) {
	raw, err := os.ReadFile("../../samconfig.toml")
	if err != nil {
		t.Fatal(err)
	}
	tables, err := parseTOML(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	deploys := 0
	for name := range tables {
		env, ok := strings.CutSuffix(name, ".deploy.parameters")
		if !ok {
			continue
		}
		deploys++
		c, err := ReadConfig("../../samconfig.toml", env)
		if err != nil {
			t.Errorf("[%s]: %v", env, err)
			continue
		}
		if c.Region == "" || len(c.Capabilities) == 0 {
			t.Errorf("[%s]: %+v; want a region and capabilities", env, c)
		}
	}
	if deploys == 0 {
		t.Error("samconfig.toml has no deploy environment")
	}
}

func TestParseTOMLRefusesWhatItDoesNotRead(t *testing.T) {
	for content, want := range map[string]string{
		"[a]\nk = [\n  \"x\",\n]\n": "line 2",
		"[a]\nk = { x = 1 }\n":      "line 2",
		"[[a]]\nk = 1\n":            "line 1",
		"[a]\nk = \"\"\"x\"\"\"\n":  "multi-line",
		"[a]\nk = 1\nk = 2\n":       "appears twice",
		"[a]\n[a]\n":                "appears twice",
		"k = 1\n":                   "before any [table]",
		"[a]\nk = \"x\" y\n":        "unexpected",
		"[a]\nk = nope\n":           "not a string",
		"[a]\nk = \"\\q\"\n":        "unknown escape",
		"[a]\nk = \"open\n":         "unterminated",
		"[a.b c]\n":                 "table name",
	} {
		_, err := parseTOML(content)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v; want %q", content, err, want)
		}
	}
	tables, err := parseTOML("version = 0.1\n[ a . b ]\ns = \"t\\u00e9\\\"\\\\\" # c\nl = 'c:\\x'\nn = 1_000\nf = 0.5\nb = false\narr = [ \"x\", 'y' ] # c\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(tables); got != `map[a.b:map[arr:[x y] b:false f:0.5 l:c:\x n:1_000 s:té"\]]` {
		t.Errorf("got %s", got)
	}
}

func TestParseOverrides(t *testing.T) {
	got, err := ParseOverrides(` A=1  B="two words" C='x y' D="esc \"q\" \\" "E F"=g H= `)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%q", got); s != `map["A":"1" "B":"two words" "C":"x y" "D":"esc \"q\" \\" "E F":"g" "H":""]` {
		t.Errorf("got %s", s)
	}
	if got, err := ParseOverrides("A=1 A=2"); err != nil || got["A"] != "2" {
		t.Errorf("a repeated name: %v, %v; want the last value", got, err)
	}
	for _, bad := range []string{"A", "=x", `A="open`, `A="x"y`, "A 1"} {
		if _, err := ParseOverrides(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:5000", "http://localhost:7460/", "http://[::1]:80", "https://127.0.0.2:1"} {
		if err := CheckEndpoint(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:5000", "http://127.0.0.1", "http://example.com:5000", "http://10.0.0.1:5000", "https://sqs.us-east-1.amazonaws.com:443", "ftp://127.0.0.1:21", "http://127.0.0.1:5000/path"} {
		if err := CheckEndpoint(bad); !errors.Is(err, ErrInput) {
			t.Errorf("%q: error %v; want ErrInput", bad, err)
		}
	}
}
