package motoserver

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// program writes an executable file at dir/name and returns its path.
func program(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// The choice of moto, and of the Python that runs it, on machines laid out
// as files: PATH first, then the module's .venv, the python3 beside
// moto_server before the one on PATH.
func TestFindMoto(t *testing.T) {
	module := func(t *testing.T) string {
		t.Helper()
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example.com/m\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Tests run in a package's folder, below the module's root.
		pkg := filepath.Join(root, "some", "pkg")
		if err := os.MkdirAll(pkg, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(pkg)
		return root
	}

	t.Run("the module's .venv when PATH has none", func(t *testing.T) {
		root := module(t)
		t.Setenv("PATH", t.TempDir())
		server := program(t, filepath.Join(root, ".venv", "bin"), "moto_server")
		python := program(t, filepath.Join(root, ".venv", "bin"), "python3")
		got, err := findMoto()
		if err != nil {
			t.Fatal(err)
		}
		if got.server != server || got.python != python {
			t.Errorf("got %+v; want server %s, python %s", got, server, python)
		}
		if err := Installed(); err != nil {
			t.Errorf("Installed() = %v; want nil", err)
		}
	})

	t.Run("PATH before the .venv", func(t *testing.T) {
		root := module(t)
		program(t, filepath.Join(root, ".venv", "bin"), "moto_server")
		bin := t.TempDir()
		server := program(t, bin, "moto_server")
		python := program(t, bin, "python3")
		t.Setenv("PATH", bin)
		got, err := findMoto()
		if err != nil {
			t.Fatal(err)
		}
		if got.server != server || got.python != python {
			t.Errorf("got %+v; want server %s, python %s", got, server, python)
		}
	})

	t.Run("python3 on PATH when none is beside moto_server", func(t *testing.T) {
		module(t)
		motoBin, pyBin := t.TempDir(), t.TempDir()
		server := program(t, motoBin, "moto_server")
		python := program(t, pyBin, "python3")
		t.Setenv("PATH", motoBin+string(os.PathListSeparator)+pyBin)
		got, err := findMoto()
		if err != nil {
			t.Fatal(err)
		}
		if got.server != server || got.python != python {
			t.Errorf("got %+v; want server %s, python %s", got, server, python)
		}
	})

	t.Run("none anywhere", func(t *testing.T) {
		module(t)
		t.Setenv("PATH", t.TempDir())
		if _, err := findMoto(); !errors.Is(err, ErrNotInstalled) {
			t.Errorf("findMoto: error %v; want ErrNotInstalled", err)
		}
		if _, err := Start(); !errors.Is(err, ErrNotInstalled) {
			t.Errorf("Start: error %v; want ErrNotInstalled", err)
		}
	})

	t.Run("only the module's own .venv", func(t *testing.T) {
		// A .venv above the module's root belongs to something else.
		root := module(t)
		program(t, filepath.Join(filepath.Dir(root), ".venv", "bin"), "moto_server")
		t.Setenv("PATH", t.TempDir())
		if _, err := findMoto(); !errors.Is(err, ErrNotInstalled) {
			t.Errorf("findMoto: error %v; want ErrNotInstalled", err)
		}
	})
}

// The output keeps its start, where the launcher says how it patched moto,
// however much request log follows; in between, it keeps the tail.
func TestOutputKeepsItsStartAndTail(t *testing.T) {
	out := &tail{head: 32, max: 64}
	out.Write([]byte("lambdakit-moto: moto 5.2.1 patched\n"))
	for i := range 100 {
		out.Write([]byte(strings.Repeat(string(rune('a'+i%26)), 9) + "\n"))
	}
	got := out.String()
	if !strings.HasPrefix(got, "lambdakit-moto: moto 5.2.1 patc") {
		t.Errorf("output starts %q; want the launcher's line", got[:min(len(got), 40)])
	}
	if !strings.Contains(got, "\n[...]\n") || !strings.HasSuffix(got, "vvvvvvvvv\n") {
		t.Errorf("output %q; want a gap marker, then the last lines", got)
	}
}
