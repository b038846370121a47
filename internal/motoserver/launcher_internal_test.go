package motoserver

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// launcherCommand is what Start runs, or skips t when there is no moto.
func launcherCommand(t *testing.T) command {
	t.Helper()
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; failing, because CI is set", ErrNotInstalled)
		}
		t.Skip(ErrNotInstalled)
	}
	c := newCommand(installationOf(bin))
	if c.script == "" {
		t.Fatalf("Start would run moto_server without the launcher: %s", c.notice)
	}
	return c
}

// startCapturing starts c and returns the server and what start printed on
// os.Stderr.
func startCapturing(t *testing.T, c command) (*Server, string) {
	t.Helper()
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	s, _, err := start(c, loopback, port)
	os.Stderr = stderr
	w.Close()
	printed, _ := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(s.Stop)
	return s, string(printed)
}

// With a moto the launcher was not written for, or one whose code moved, it
// runs plain moto, and Start says so in one line on standard error. The
// server works all the same.
func TestLauncherFallsBackToPlainMoto(t *testing.T) {
	c := launcherCommand(t)
	cases := []struct {
		name    string
		prelude string // Python run before the launcher, to change the moto it finds
		args    []string
		env     string
		want    string // in the line
	}{
		{
			name:    "another moto version",
			prelude: "import moto\nmoto.__version__ = '5.99.0'\n",
			want:    "warning: moto 5.99.0 found (" + c.server + "), but lambdakit's local stack supports moto " + supportedMoto[0] + ": running plain moto",
		},
		{
			name: "transact_write_items no longer copies tables",
			// A supported version, so that the check of the code is reached.
			prelude: "import moto\nmoto.__version__ = '" + supportedMoto[0] + "'\n" +
				"import moto.dynamodb.models as m\nm.DynamoDBBackend.transact_write_items = lambda self, items: None\n",
			want: ": DynamoDBBackend.transact_write_items is not the one this launcher patches",
		},
		{
			name: "patch turned off",
			env:  "LAMBDAKIT_MOTO_PATCH=0",
			want: ": LAMBDAKIT_MOTO_PATCH=0, so transactions copy whole tables",
		},
		{
			name: "moto not importable from this Python",
			// -S: no site-packages, so no moto; the launcher runs
			// moto_server from PATH instead.
			args: []string{"-S"},
			want: "running plain moto (moto_server from PATH): ",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.script = tc.prelude + c.script
			c.args = append(append([]string(nil), tc.args...), c.args...)
			if tc.env != "" {
				k, v, _ := strings.Cut(tc.env, "=")
				t.Setenv(k, v)
			}
			s, printed := startCapturing(t, c)
			lines := strings.Split(strings.TrimRight(printed, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "lambdakit-moto: ") || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("start printed %q; want one line containing %q", printed, tc.want)
			}
			if strings.Contains(s.Output(), " patched: ") {
				t.Fatalf("moto's output says it was patched:\n%s", s.Output())
			}
			if tc.name == "transact_write_items no longer copies tables" {
				return // its transactions are the test's stand-in, not moto's
			}
			wantAtomic(t, s)
		})
	}
}

// Start on the moto it was written for patches it and prints nothing.
func TestLauncherPatchesSupportedMoto(t *testing.T) {
	s, printed := startCapturing(t, launcherCommand(t))
	out := s.Output()
	if strings.Contains(out, "lambdakit-moto: running plain moto: moto ") {
		t.Skipf("the installed moto is not one the launcher supports: %s", fallbackLine(out))
	}
	if printed != "" {
		t.Fatalf("start printed %q; want nothing", printed)
	}
	if !strings.Contains(out, "lambdakit-moto: moto "+supportedMoto[0]+" patched: ") {
		t.Fatalf("moto's output has no line saying it was patched:\n%s", out)
	}
	wantAtomic(t, s)
}

// The version check, on the versions the launcher could report: a moto
// it was not written for gets a warning that names the version found, the
// moto_server it belongs to, the version supported and how to install it;
// a supported one, or one the launcher could not name, gets none.
func TestVersionWarning(t *testing.T) {
	if want := []string{"5.2.1"}; !slices.Equal(supportedMoto, want) {
		t.Errorf("SUPPORTED_MOTO = %q; want %q (the version the patch was tested against; update this test with launcher.py)", supportedMoto, want)
	}
	for _, found := range []string{"5.3.0", "5.2.0", "5.2.1.dev0", "6.0.0", "unknown"} {
		w := versionWarning(found, "/opt/moto/bin/moto_server")
		shown := found
		if found == "unknown" {
			shown = "of an unknown version"
		}
		for _, want := range []string{
			"lambdakit-moto: warning: moto " + shown + " found (/opt/moto/bin/moto_server)",
			"supports moto 5.2.1",
			"running plain moto",
			"pip install 'moto[server]==5.2.1'",
			"make deps",
		} {
			if !strings.Contains(w, want) {
				t.Errorf("versionWarning(%q) = %q; want it to say %q", found, w, want)
			}
		}
		if strings.Contains(w, "\n") {
			t.Errorf("versionWarning(%q) = %q; want one line", found, w)
		}
	}
	for _, found := range []string{"5.2.1", ""} {
		if w := versionWarning(found, "/opt/moto/bin/moto_server"); w != "" {
			t.Errorf("versionWarning(%q) = %q; want no warning", found, w)
		}
	}
}

// The launcher's version line is what the Go side reads.
func TestFoundVersion(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"lambdakit-moto: moto 5.2.1 patched: ...\nlambdakit-moto: moto version 5.2.1\n * Running on http://127.0.0.1:5000\n", "5.2.1"},
		{"lambdakit-moto: running plain moto: moto 5.3.0: ...\r\nlambdakit-moto: moto version 5.3.0\r\n", "5.3.0"},
		{"lambdakit-moto: running plain moto (moto_server from PATH): cannot import moto\n", ""},
		{"", ""},
	} {
		if got := foundVersion(c.out); got != c.want {
			t.Errorf("foundVersion(%q) = %q; want %q", c.out, got, c.want)
		}
	}
	if !strings.Contains(launcherSource, `VERSION = PREFIX + " moto version"`) || versionPrefix != "lambdakit-moto: moto version " {
		t.Error("launcher.py's VERSION line and versionPrefix disagree")
	}
}

// `make deps` installs a moto the launcher supports: the Makefile's pin,
// as make expands it, is one of SUPPORTED_MOTO.
func TestMakefilePinsASupportedMoto(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	cmd := exec.Command(mk, "-n", "-B", ".venv/bin/moto_server")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n .venv/bin/moto_server: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`scripts/venv-install \.venv moto_server 'moto\[server\]==([^']+)'`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("make -n .venv/bin/moto_server:\n%s\nwant moto[server] pinned with ==", out)
	}
	if !slices.Contains(supportedMoto, string(m[1])) {
		t.Errorf("the Makefile pins moto %s; the launcher supports %q", m[1], supportedMoto)
	}
	if !strings.Contains(ErrNotInstalled.Error(), "pip install 'moto[server]=="+string(m[1])+"'") {
		t.Errorf("ErrNotInstalled = %q; want it to name the pinned moto", ErrNotInstalled)
	}
}

// wantAtomic runs a transaction whose second condition fails on s and
// checks that its first item was not written.
func wantAtomic(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db := dynamodb.NewFromConfig(s.AWSConfig())
	table := aws.String("atomic")
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            table,
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	key := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: key("b")}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: table, Item: key("a")}},
		{Put: &types.Put{TableName: table, Item: key("b"), ConditionExpression: aws.String("attribute_not_exists(id)")}},
	}})
	if tce := (*types.TransactionCanceledException)(nil); !errors.As(err, &tce) {
		t.Fatalf("TransactWriteItems: %v; want TransactionCanceledException", err)
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key("a"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if got.Item != nil {
		t.Fatalf("item a is %v after the cancelled transaction; want absent", got.Item)
	}
}

// Start finds the Python that runs moto_server from its #! line, and
// otherwise uses python3; without any, it runs moto_server itself and says
// why.
func TestNewCommandFindsMotosPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	dir := t.TempDir()
	script := func(name, first string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(first+"\nimport sys\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("an absolute python in the #! line is used", func(t *testing.T) {
		c := newCommand(installationOf(script("abs", "#!"+python)))
		if c.path != python || c.script == "" {
			t.Fatalf("newCommand = %q with script %v; want %q with the launcher", c.path, c.script != "", python)
		}
	})
	t.Run("env python3 in the #! line is looked up on PATH", func(t *testing.T) {
		c := newCommand(installationOf(script("env", "#!/usr/bin/env python3")))
		if c.path != python {
			t.Fatalf("newCommand = %q; want %q", c.path, python)
		}
	})
	t.Run("a shell shim falls back to python3 on PATH", func(t *testing.T) {
		c := newCommand(installationOf(script("shim", "#!/usr/bin/env bash")))
		if c.path != python {
			t.Fatalf("newCommand = %q; want %q", c.path, python)
		}
	})
	t.Run("without any python moto_server runs plain and says why", func(t *testing.T) {
		shim := script("moto_server", "#!/bin/sh")
		t.Setenv("PATH", dir)
		c := newCommand(installationOf(shim))
		if c.path != shim || c.script != "" || len(c.args) != 0 {
			t.Fatalf("newCommand = %+v; want moto_server itself", c)
		}
		if !strings.HasPrefix(c.notice, fallbackPrefix) {
			t.Fatalf("notice %q; want a line starting %q", c.notice, fallbackPrefix)
		}
	})
}
