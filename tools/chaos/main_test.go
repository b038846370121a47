package main

import (
	"context"
	"strings"
	"testing"
)

func TestRunRejects(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"-payments", "many"}, 2, "invalid value"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-ddb-500", "0.7", "-ddb-throttle", "0.7"}, 3, "add up to"},
		{[]string{"-timeout", "1s"}, 3, "function timeout"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tt.code, tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q; want nothing", stdout.String())
			}
		})
	}
}
