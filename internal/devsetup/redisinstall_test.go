package devsetup_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// scripts/redis-install does nothing where a server is on PATH, and where
// none is and apt-get is missing too, it fails saying what to install.
func TestRedisInstall(t *testing.T) {
	script, err := filepath.Abs(filepath.Join(root, "scripts", "redis-install"))
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	// A PATH of the tools the script needs, and of what the case adds.
	bin := func(t *testing.T, extra ...string) string {
		dir := t.TempDir()
		for _, tool := range []string{"bash", "id", "mktemp", "tail"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Skipf("no %s", tool)
			}
			if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range extra {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Run("a server on PATH", func(t *testing.T) {
		for _, server := range []string{"redis-server", "valkey-server"} {
			r := run(t, root, []string{"PATH=" + bin(t, server)}, bash, script)
			if r.code != 0 || r.stderr != "" {
				t.Errorf("with %s: exit status %d, stderr %q; want 0 and silence", server, r.code, r.stderr)
			}
		}
	})
	t.Run("no server and no apt-get", func(t *testing.T) {
		r := run(t, root, []string{"PATH=" + bin(t)}, bash, script)
		if r.code != 1 || !strings.Contains(r.stderr, "no apt-get: install Redis 7 or Valkey") {
			t.Errorf("exit status %d, stderr %q; want 1 and what to install", r.code, r.stderr)
		}
	})
}
