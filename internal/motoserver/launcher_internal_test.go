package motoserver

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	port, err := freePort()
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
			want:    "running plain moto: moto 5.99.0: this launcher was written for moto ",
		},
		{
			name: "transact_write_items no longer copies tables",
			// A supported version, so that the check of the code is reached.
			prelude: "import moto\nmoto.__version__ = '" + supportedMoto(t) + "'\n" +
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
	if !strings.Contains(out, "lambdakit-moto: moto "+supportedMoto(t)+" patched: ") {
		t.Fatalf("moto's output has no line saying it was patched:\n%s", out)
	}
	wantAtomic(t, s)
}

// supportedMoto returns the first moto version the launcher names in
// SUPPORTED_MOTO.
func supportedMoto(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^SUPPORTED_MOTO = \("([^"]+)"`).FindStringSubmatch(launcherSource)
	if m == nil {
		t.Fatal("launcher.py has no SUPPORTED_MOTO line")
	}
	return m[1]
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
