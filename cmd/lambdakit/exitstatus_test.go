package main_test

import (
	"regexp"
	"strings"
	"testing"
)

// One rule for every command: what the command works on (a queue, a table)
// that does not exist is exit status 3, the tool unable to do its job; 1 is
// for what it ran failing (a line, a message, an invocation). run's is
// tested with run.
func TestMissingQueueOrTableIsExitStatus3(t *testing.T) {
	srv := moto.Server(t)
	missing := srv.URL + "/123456789012/no-such-queue"
	sqsEnv := awsEnv("SQS", srv.URL)
	for _, c := range []struct {
		name  string
		env   []string
		stdin string
		args  []string
		want  string
	}{
		{"publish", sqsEnv, `{"a":1}`, []string{"publish", "-queue", missing}, "cannot read the queue " + missing + ": it does not exist"},
		{"publish -max-size", sqsEnv, `{"a":1}`, []string{"publish", "-max-size", "1000", "-queue", missing}, "cannot read the queue " + missing + ": it does not exist"},
		{"redrive -from", sqsEnv, "", []string{"redrive", "-from", missing, "-to", missing + "-2"}, "cannot read the queue " + missing + ": it does not exist"},
		{"records", awsEnv("DYNAMODB", srv.URL), "", []string{"records", "get", "-table", "no-such-table", "-prefix", "p", "k"}, `table "no-such-table" does not exist`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := cli(t, c.env, c.stdin, c.args...)
			if r.code != 3 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit status %d; want 3 and %q\n%s", r.code, c.want, r.stderr)
			}
		})
	}
	// Each command's -h says so.
	for _, args := range [][]string{{"publish", "-h"}, {"redrive", "-h"}, {"records", "get", "-h"}} {
		r := lambdakit(t, nil, args...)
		if !regexp.MustCompile(`(?m)^  3    .*does not exist`).MatchString(r.stderr) {
			t.Errorf("%s -h: the exit statuses do not say that a missing queue or table is 3:\n%s", args[0], r.stderr)
		}
	}
}
