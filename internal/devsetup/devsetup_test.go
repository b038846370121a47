package devsetup_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// root is the repository's root, from this package's folder.
const root = "../.."

type result struct {
	code           int
	stdout, stderr string
}

// run runs name with args in dir, with exactly env, for 2 minutes at most.
func run(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within 2 minutes; stderr:\n%s", name, args, stderr.String())
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// pipEnv is an environment in which pip can reach no package index: the only
// one it knows is a loopback port where nothing listens, and it does not
// retry, so that the test is quick and never leaves the machine.
func pipEnv(t *testing.T, python string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"PYTHON=" + python,
		"PIP_INDEX_URL=http://127.0.0.1:1/",
		"PIP_CONFIG_FILE=" + os.DevNull,
		"PIP_RETRIES=0",
		"PIP_NO_INPUT=1",
	}
}

// externallyManaged returns the path of a Python whose installation refuses
// pip (PEP 668's EXTERNALLY-MANAGED marker, as Debian and Ubuntu ship it),
// or "" when this machine has none.
func externallyManaged(t *testing.T) string {
	t.Helper()
	for _, python := range []string{"/usr/bin/python3"} {
		out, err := exec.Command(python, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))").Output()
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(out)), "EXTERNALLY-MANAGED")); err == nil {
			return python
		}
	}
	return ""
}

func requireVenv(t *testing.T, python string) {
	t.Helper()
	if err := exec.Command(python, "-c", "import venv, ensurepip").Run(); err != nil {
		t.Skipf("%s cannot make virtual environments (%v)", python, err)
	}
}

// Making a venv takes seconds, so one Python is tried: one that refuses
// pip (PEP 668), the case this script exists for, when the machine has
// one, else python3.
func TestVenvInstallWithoutAPackageIndex(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(root, "scripts", "venv-install"))
	if err != nil {
		t.Fatal(err)
	}
	python := externallyManaged(t)
	if python == "" {
		python = "python3"
	}
	t.Logf("python: %s", python)
	requireVenv(t, python)
	dir := t.TempDir()
	r := run(t, dir, pipEnv(t, python), script, ".venv", "moto_server", "moto[server]")
	if r.code != 1 {
		t.Errorf("exit status %d; want 1\n%s", r.code, r.stderr)
	}
	want := "no Python package index could be reached to install moto[server]"
	if strings.Count(r.stderr, want) != 1 {
		t.Errorf("stderr:\n%s\nwant %q once", r.stderr, want)
	}
	if strings.Contains(r.stderr, "externally-managed") {
		t.Errorf("the system's Python was asked to install:\n%s", r.stderr)
	}
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n") + 1; n != 2 {
		t.Errorf("stderr in %d lines; want 2 (what it does, why it failed):\n%s", n, r.stderr)
	}
	// The venv stays, for the next run to reuse.
	if _, err := os.Stat(filepath.Join(dir, ".venv", "bin", "python")); err != nil {
		t.Errorf("no venv left for the next run: %v", err)
	}
}

func TestVenvInstallReusesTheVenv(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(root, "scripts", "venv-install"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, ".venv", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "cfn-lint"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// No python at all: a run that found the program must not need one.
	env := pipEnv(t, "python3")
	env[0] = "PATH=" + t.TempDir() + ":/bin:/usr/bin"
	env[2] = "PYTHON=no-such-python"
	r := run(t, dir, env, script, ".venv", "cfn-lint", "cfn-lint")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("exit status %d, stderr %q; want 0 and nothing said", r.code, r.stderr)
	}
}

func TestVenvInstallCannotMakeTheVenv(t *testing.T) {
	requireVenv(t, "python3")
	script, err := filepath.Abs(filepath.Join(root, "scripts", "venv-install"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A file where the venv's parent folder should be.
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, dir, pipEnv(t, "python3"), script, "file/.venv", "moto_server", "moto[server]")
	if r.code != 1 || !strings.Contains(r.stderr, "could not create the virtual environment file/.venv") {
		t.Errorf("exit status %d, stderr:\n%s\nwant 1 and why", r.code, r.stderr)
	}
}

func requireMake(t *testing.T) string {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH")
	}
	return mk
}

// Without ARTIFACTS_DIR, `make build-PaymentFunction` would write
// /bootstrap: it must refuse, and say what to run instead.
func TestBuildPaymentFunctionNeedsArtifactsDir(t *testing.T) {
	mk := requireMake(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	// GO=false: were the check gone, the build would fail instead of
	// writing /bootstrap.
	for _, args := range [][]string{{"build-PaymentFunction", "GO=false"}, {"build-PaymentFunction", "GO=false", "ARTIFACTS_DIR="}} {
		r := run(t, root, env, mk, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "ARTIFACTS_DIR is not set") || !strings.Contains(r.stderr, "make build") {
			t.Errorf("make %v: exit status %d, stderr:\n%s\nwant a failure naming ARTIFACTS_DIR and 'make build'", args, r.code, r.stderr)
		}
	}
	dir := t.TempDir()
	r := run(t, root, env, mk, "-n", "build-PaymentFunction", "ARTIFACTS_DIR="+dir)
	if r.code != 0 || !strings.Contains(r.stdout, "-o "+dir+"/bootstrap") {
		t.Errorf("make -n with ARTIFACTS_DIR: exit status %d, stdout:\n%s\nwant the build into %s", r.code, r.stdout, dir)
	}
}

// Where the machine has no moto_server, `make test` installs it into .venv
// and runs the tests with .venv/bin first on PATH; where it has one, the
// Makefile uses it as it is. `make -n` shows the plan without running it.
func TestMakeTestFindsMoto(t *testing.T) {
	mk := requireMake(t)
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	venvPath := `PATH="` + filepath.Join(abs, ".venv", "bin") + `:$PATH"`

	t.Run("without moto_server on PATH", func(t *testing.T) {
		r := run(t, root, []string{"PATH=" + filepath.Dir(mk) + ":/bin", "HOME=" + t.TempDir()}, mk, "-n", "test")
		if r.code != 0 || !strings.Contains(r.stdout, venvPath+" go run ./tools/testrun") {
			t.Errorf("make -n test: exit status %d, stdout:\n%s\nwant the tests run with %s", r.code, r.stdout, venvPath)
		}
		if _, err := os.Stat(filepath.Join(root, ".venv", "bin", "moto_server")); err != nil &&
			!strings.Contains(r.stdout, "scripts/venv-install .venv moto_server 'moto[server]==") {
			t.Errorf("make -n test: stdout:\n%s\nwant moto, pinned, installed into .venv first", r.stdout)
		}
	})
	t.Run("with moto_server on PATH", func(t *testing.T) {
		if _, err := exec.LookPath("moto_server"); err != nil {
			t.Skip("no moto_server on PATH")
		}
		r := run(t, root, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, mk, "-n", "test")
		// moto_server comes from PATH: nothing installs moto, and the tests
		// run without the .venv's bin first on PATH. (The .venv may still
		// get aws-sam-translator, when this machine's python3 lacks it.)
		if r.code != 0 || strings.Contains(r.stdout, "venv-install .venv moto_server") || strings.Contains(r.stdout, ".venv/bin:") {
			t.Errorf("make -n test: exit status %d, stdout:\n%s\nwant moto_server from PATH, not the .venv's", r.code, r.stdout)
		}
	})
}
