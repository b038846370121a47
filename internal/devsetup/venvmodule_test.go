package devsetup_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/venv-install python:MODULE installs a package that has no
// program, such as aws-sam-translator (make deps): it does nothing when the
// venv's Python imports MODULE, and otherwise installs, saying which module
// it looks for.
func TestVenvInstallPythonModule(t *testing.T) {
	requireVenv(t, "python3")
	script, err := filepath.Abs(filepath.Join(root, "scripts", "venv-install"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", filepath.Join(dir, ".venv")).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv: %v\n%s", err, out)
	}
	// json is in every Python: installed, so nothing to do or say.
	r := run(t, dir, pipEnv(t, "python3"), script, ".venv", "python:json", "no-such-package")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("python:json: exit status %d, stderr %q; want 0 and nothing said", r.code, r.stderr)
	}
	// A module it lacks: an install, which fails here (no pip in this venv,
	// no index), saying what it was for.
	r = run(t, dir, pipEnv(t, "python3"), script, ".venv", "python:no_such_module_lk", "no-such-package==1.0")
	if r.code != 1 || !strings.Contains(r.stderr, "cannot import no_such_module_lk: installing no-such-package==1.0 into .venv/") {
		t.Errorf("python:no_such_module_lk: exit status %d, stderr:\n%s\nwant 1, naming the module and the package", r.code, r.stderr)
	}
}
