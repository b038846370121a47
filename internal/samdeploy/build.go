package samdeploy

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lambdakit/lambdakit/internal/childproc"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

// buildTimeout bounds one function's build: a cold cross-compile of the
// function and its dependencies takes a minute or two on a small machine.
const buildTimeout = 10 * time.Minute

// function is a serverless function of the SAM template whose code Deploy
// builds: CodeUri is a folder on this machine.
type function struct {
	LogicalID string
	CodeURI   string // as the template writes it, relative to the template's folder
}

// templateFunctions returns the template's functions that have code to
// build, sorted by logical ID. A function whose code is elsewhere (an S3
// CodeUri, an image) is an error: Deploy uploads local code only.
func templateFunctions(path string) ([]function, error) {
	res, err := samtemplate.Resources(path)
	if err != nil {
		return nil, err
	}
	var out []function
	for _, id := range slices.Sorted(maps.Keys(res)) {
		r := res[id]
		if r.Type != "AWS::Serverless::Function" {
			continue
		}
		var p struct {
			CodeURI     yaml.Node `yaml:"CodeUri"`
			InlineCode  yaml.Node `yaml:"InlineCode"`
			PackageType string    `yaml:"PackageType"`
		}
		if err := r.Properties.Decode(&p); err != nil {
			return nil, fmt.Errorf("%s: function %s: %w", path, id, err)
		}
		switch {
		case p.InlineCode.Kind != 0:
			continue // nothing to build or upload
		case p.PackageType == "Image":
			return nil, fmt.Errorf("%s: function %s is an image; deploy-local builds and uploads zip packages only", path, id)
		case p.CodeURI.Kind != yaml.ScalarNode || p.CodeURI.Tag != "!!str" || p.CodeURI.Value == "":
			return nil, fmt.Errorf("%s: function %s: want CodeUri, a folder of this repository (Globals' CodeUri is not read)", path, id)
		case strings.HasPrefix(p.CodeURI.Value, "s3://"):
			return nil, fmt.Errorf("%s: function %s: CodeUri %s is in S3 already; deploy-local builds local code only", path, id, p.CodeURI.Value)
		}
		out = append(out, function{LogicalID: id, CodeURI: p.CodeURI.Value})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no AWS::Serverless::Function with local code to deploy", path)
	}
	return out, nil
}

// build runs `make build-<LogicalID> ARTIFACTS_DIR=<dir>` in the
// template's folder, as `sam build` would for a makefile build method (the
// repository's Makefile names its function builds so), into an empty dir.
// make's output goes to out.
func build(ctx context.Context, templateDir string, fn function, dir string, out io.Writer) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(abs); err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", templateDir, "build-"+fn.LogicalID, "ARTIFACTS_DIR="+abs)
	cmd.Env = append(os.Environ(), "AWS_EC2_METADATA_DISABLED=true")
	cmd.Stdout, cmd.Stderr = out, out
	// make and the compilers it starts are one process group, ended
	// together when the context ends.
	childproc.Setup(cmd)
	cmd.Cancel = func() error { childproc.Signal(cmd, true); return nil }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("make build-%s: stopped after %v: %w", fn.LogicalID, buildTimeout, ctx.Err())
		}
		return fmt.Errorf("make build-%s ARTIFACTS_DIR=%s (in %s): %w", fn.LogicalID, abs, templateDir, err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("make build-%s left %s empty", fn.LogicalID, abs)
	}
	return nil
}

// zipEpoch is the time of every file in a package, so that the same build
// makes the same zip, and so the same S3 key and no change to deploy.
var zipEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// zipDir zips the files under dir, sorted, with their permissions (the
// bootstrap stays executable) and nothing else of the machine's.
func zipDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file; a Lambda package holds files only", path)
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: filepath.ToSlash(rel), Method: zip.Deflate, Modified: zipEpoch}
		h.SetMode(info.Mode().Perm())
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// elfArchitectures maps an ELF machine to Lambda's name for it.
var elfArchitectures = map[elf.Machine]string{elf.EM_AARCH64: "arm64", elf.EM_X86_64: "x86_64"}

// checkBootstrap checks that dir holds what a custom runtime (provided.*)
// starts, an executable bootstrap, and that it is a Linux binary for arch
// ("arm64" or "x86_64"): Lambda would fail to start anything else, and no
// local AWS runs it to find out.
func checkBootstrap(dir, arch string) error {
	path := filepath.Join(dir, "bootstrap")
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("the package has no bootstrap, which a provided.* runtime starts: %w", err)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not a Linux executable: %w", path, err)
	}
	defer f.Close()
	got, ok := elfArchitectures[f.Machine]
	switch {
	case !ok:
		return fmt.Errorf("%s is built for %v, which Lambda does not run", path, f.Machine)
	case got != arch:
		return fmt.Errorf("%s is built for %s, but the function's Architectures is %s: Lambda would not start it", path, got, arch)
	case f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN:
		return fmt.Errorf("%s is an ELF %v, not an executable", path, f.Type)
	}
	return nil
}
