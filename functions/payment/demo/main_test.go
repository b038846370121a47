package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// The tests build the demo once and run it as a user would: arguments in,
// exit status and output out. The demo starts its own moto_server.

func TestMain(m *testing.M) { testenv.Main(m) }

// demoRun is a run of the demo, in the background until it ends.
type demoRun struct {
	cmd            *exec.Cmd
	stdout, stderr *logline.Buffer
	exited         chan struct{}
	code           int
}

// start starts the demo with args, and env added to this process's
// environment, and stops it with Ctrl-C's signal at the end of the test, if
// it is still running.
func start(t *testing.T, env []string, args ...string) *demoRun {
	t.Helper()
	r := &demoRun{stdout: &logline.Buffer{}, stderr: &logline.Buffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(testenv.Build(t, "."), args...)
	r.cmd.Env = append(append(os.Environ(), "AWS_EC2_METADATA_DISABLED=true"), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
		close(r.exited)
	}()
	t.Cleanup(func() { r.interrupt(t) })
	return r
}

// demo runs the demo with args to its end, for 3 minutes at most.
func demo(t *testing.T, env []string, args ...string) *demoRun {
	t.Helper()
	r := start(t, env, args...)
	select {
	case <-r.exited:
	case <-time.After(3 * time.Minute):
		r.interrupt(t)
		t.Fatalf("demo %v did not finish within 3 minutes; stdout:\n%s\nstderr:\n%s", args, r.stdout.String(), r.stderr.String())
	}
	return r
}

// interrupt sends SIGINT and waits, 15 s at most, for the demo to end.
func (r *demoRun) interrupt(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
		t.Errorf("the demo did not stop within 15s of SIGINT; stderr:\n%s", r.stderr.String())
	}
}

// waitReady waits, 60 s at most, until demo local says it is ready.
func (r *demoRun) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(r.stderr.String(), "Ctrl-C stops everything") {
		select {
		case <-r.exited:
			t.Fatalf("demo local exited with status %d before it was ready; stderr:\n%s", r.code, r.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo local not ready within 60s; stderr:\n%s", r.stderr.String())
		}
	}
}

// commandName is how the demo names itself in its messages when it runs
// with args: "demo local" for local, else "demo".
func commandName(args []string) string {
	if len(args) > 0 && args[0] == "local" {
		return "demo local"
	}
	return "demo"
}

// A usage error is told in the short form before anything starts: the
// error, the synopsis and where the full usage is, in three lines on
// standard error, nothing on standard output, exit status 2.
func TestUsageErrorsAreShort(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"flag after the arguments", []string{"event.json", "-v"}, "flag -v after the arguments"},
		{"local unknown flag", []string{"local", "-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"local flag after the arguments", []string{"local", "extra", "-listen", "127.0.0.1"}, "flag -listen after the arguments"},
		{"local port too large", []string{"local", "-moto-port", "99999"}, "-moto-port 99999: want a port from 1 to 65535"},
		{"local negative port", []string{"local", "-gateway-port", "-1"}, "-gateway-port -1: want a port"},
		{"local one port for both", []string{"local", "-moto-port", "5055", "-gateway-port", "5055"}, "both 5055"},
		{"local port not a number", []string{"local", "-moto-port", "fivethousand"}, `invalid value "fivethousand" for flag -moto-port`},
		{"local listen not an IP address", []string{"local", "-listen", "my-laptop"}, `-listen "my-laptop": want an IP address`},
		{"local env host with a scheme", []string{"local", "-env-host", "http://host.docker.internal"}, "-env-host"},
		{"local env file in no folder", []string{"local", "-env-file", filepath.Join(dir, "nope", "env.json")}, "its folder does not exist"},
		{"local an argument", []string{"local", "extra"}, `unexpected arguments ["extra"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := commandName(c.args)
			r := demo(t, nil, c.args...)
			stderr := r.stderr.String()
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if r.code != 2 || len(lines) != 3 || !strings.Contains(lines[0], c.want) || r.stdout.String() != "" {
				t.Fatalf("exit status %d, stdout %q, stderr:\n%s\nwant 2, nothing on stdout, and %q in three lines", r.code, r.stdout.String(), stderr, c.want)
			}
			for i, want := range []string{
				name + ": ",
				"Usage: go run ./functions/payment/" + name + " [flags]",
				"Run 'go run ./functions/payment/" + name + " -h' for the flags and details.",
			} {
				if !strings.HasPrefix(lines[i], want) {
					t.Errorf("stderr line %d = %q; want it to start with %q", i+1, lines[i], want)
				}
			}
		})
	}
}

// The story and local answer -h with their full usage, flags included,
// and exit status 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}, {"local", "-h"}} {
		r := demo(t, nil, args...)
		want := "Usage: go run ./functions/payment/" + commandName(args) + " [flags]"
		if r.code != 0 || !strings.HasPrefix(r.stderr.String(), want) || !strings.Contains(r.stderr.String(), "payment sample") || !strings.Contains(r.stderr.String(), "Flags:\n  -") {
			t.Errorf("demo %v: exit status %d, stderr:\n%s\nwant 0 and the usage with the flags", args, r.code, r.stderr.String())
		}
	}
}
