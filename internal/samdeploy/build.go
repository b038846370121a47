package samdeploy

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	gobuild "go/build"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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
	// Runtime and the architecture as the template gives them (see
	// samtemplate.Function).
	Runtime, Architecture, ArchitectureRef string
}

// customRuntime reports whether runtime starts a bootstrap of the package
// (provided.al2023, provided.al2), the runtimes lambdakit runs locally.
func customRuntime(runtime string) bool { return strings.HasPrefix(runtime, "provided") }

// templateFunctions returns the template's functions that have code to
// build, sorted by logical ID. A function whose code is elsewhere (an S3
// CodeUri, an image) is an error: Deploy uploads local code only.
func templateFunctions(path string) ([]function, error) {
	res, err := samtemplate.Resources(path)
	if err != nil {
		return nil, err
	}
	settings, err := samtemplate.Functions(path)
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
		s, err := samtemplate.FindFunction(settings, id)
		if err != nil {
			return nil, err
		}
		out = append(out, function{LogicalID: id, CodeURI: p.CodeURI.Value, Runtime: s.Runtime, Architecture: s.Architecture, ArchitectureRef: s.ArchitectureRef})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no AWS::Serverless::Function with local code to deploy", path)
	}
	return out, nil
}

// goArch returns the GOARCH of the function's architecture, a !Ref
// resolved from the parameters' values.
func (fn function) goArch(values map[string]string) (string, error) {
	arch := fn.Architecture
	if fn.ArchitectureRef != "" {
		arch = values[fn.ArchitectureRef]
	}
	switch arch {
	case "", "x86_64":
		return "amd64", nil
	case "arm64":
		return "arm64", nil
	}
	return "", fmt.Errorf("function %s: Architectures %q: want x86_64 or arm64", fn.LogicalID, arch)
}

// lambdaGoFlags are the flags of a function's go build, as the sample's
// Makefile gives them: lambda.norpc leaves aws-lambda-go's RPC mode out,
// which the provided.* runtimes never use.
var lambdaGoFlags = []string{"-tags=lambda.norpc", "-trimpath", "-ldflags=-s"}

// build makes the package of fn and returns the folder to zip, in the
// first way that applies:
//
//   - `make build-<LogicalID> ARTIFACTS_DIR=<dir>` in the template's
//     folder, when its Makefile has that target, as `sam build` does for a
//     makefile build method (the sample's way), into dir, emptied first;
//   - for a provided.* runtime whose CodeUri is a Go main package, `go
//     build` of it for Linux and goarch, static, into dir/bootstrap, as
//     `sam build` does for a go1.x build method;
//   - CodeUri as it is: a bootstrap built elsewhere, or the code of another
//     runtime, whose dependencies Deploy does not install.
//
// The tools' output goes to out; logf tells which way was taken.
func build(ctx context.Context, templateDir string, fn function, goarch, dir string, out io.Writer, logf func(string, ...any)) (string, error) {
	codeDir := filepath.Join(templateDir, fn.CodeURI)
	makefile, _ := os.ReadFile(filepath.Join(templateDir, "Makefile"))
	target := regexp.MustCompile(`(?m)^build-` + regexp.QuoteMeta(fn.LogicalID) + `\s*:`)
	var pkg *gobuild.Package
	if customRuntime(fn.Runtime) {
		linux := gobuild.Default
		linux.GOOS, linux.GOARCH = "linux", goarch
		pkg, _ = linux.ImportDir(codeDir, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	var cmd *exec.Cmd
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	switch {
	case target.Match(makefile):
		logf("building %s: make build-%s ARTIFACTS_DIR=%s", fn.LogicalID, fn.LogicalID, abs)
		cmd = exec.CommandContext(ctx, "make", "--no-print-directory", "build-"+fn.LogicalID, "ARTIFACTS_DIR="+abs)
		cmd.Dir = templateDir
	case pkg != nil && pkg.Name == "main":
		logf("building %s: GOOS=linux GOARCH=%s go build %s in %s", fn.LogicalID, goarch, fn.CodeURI, templateDir)
		cmd = goBuild(ctx, codeDir, "linux", goarch, filepath.Join(abs, "bootstrap"))
	case customRuntime(fn.Runtime) || fn.Runtime == "":
		if !fileExists(filepath.Join(codeDir, "bootstrap")) {
			return "", fmt.Errorf("function %s (%s): CodeUri %s holds no bootstrap and no Go main package, and %s has no build-%s target: give it one of these", fn.LogicalID, fn.Runtime, codeDir, filepath.Join(templateDir, "Makefile"), fn.LogicalID)
		}
		logf("%s: CodeUri %s as it is (its bootstrap)", fn.LogicalID, codeDir)
		return codeDir, nil
	default:
		logf("%s: runtime %s: CodeUri %s as it is, its dependencies not installed (sam build would install them)", fn.LogicalID, fn.Runtime, codeDir)
		return codeDir, nil
	}
	if err := os.RemoveAll(abs); err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	if err := runBuild(cmd, out); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("build %s: stopped after %v: %w", fn.LogicalID, buildTimeout, ctx.Err())
		}
		return "", fmt.Errorf("build %s: %w", fn.LogicalID, err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return "", err
	}
	if len(entries) == 0 {
		return "", fmt.Errorf("%s left %s empty", cmd, abs)
	}
	return abs, nil
}

// goBuild returns the go build of the main package in dir for goos and
// goarch, static, into out.
func goBuild(ctx context.Context, dir, goos, goarch, out string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, lambdaGoFlags...), "-o", out, ".")...)
	cmd.Dir = dir
	cmd.Env = []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}
	return cmd
}

// ErrNoBootstrap means that a function's bootstrap can be neither built
// nor found for this machine.
var ErrNoBootstrap = errors.New("samdeploy: no bootstrap for this machine")

// BuildForHost returns a bootstrap of the function logicalID of the SAM
// template that runs on this machine, to run it locally: go build of its
// CodeUri for this machine when it is a Go main package, into dir; else
// CodeUri/bootstrap when it is there (built for this machine, or not: the
// start tells). Its build output goes to out.
func BuildForHost(ctx context.Context, template, logicalID, dir string, out io.Writer) (string, error) {
	fns, err := templateFunctions(template)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(fns, func(f function) bool { return f.LogicalID == logicalID })
	if i < 0 {
		return "", fmt.Errorf("%w: %s has no function %s with local code", ErrNoBootstrap, template, logicalID)
	}
	codeDir := filepath.Join(filepath.Dir(template), fns[i].CodeURI)
	if pkg, err := gobuild.ImportDir(codeDir, 0); err == nil && pkg.Name == "main" {
		path, err := filepath.Abs(filepath.Join(dir, logicalID, "bootstrap"))
		if err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(ctx, buildTimeout)
		defer cancel()
		if err := runBuild(goBuild(ctx, codeDir, runtime.GOOS, runtime.GOARCH, path), out); err != nil {
			return "", fmt.Errorf("build %s for this machine: %w", logicalID, err)
		}
		return path, nil
	}
	if path := filepath.Join(codeDir, "bootstrap"); fileExists(path) {
		return path, nil
	}
	return "", fmt.Errorf("%w: function %s: CodeUri %s is no Go main package and holds no bootstrap", ErrNoBootstrap, logicalID, codeDir)
}

func fileExists(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir()
}

// runBuild runs a build command made with exec.CommandContext, with
// cmd.Env added to this process's environment. Its output goes to out.
func runBuild(cmd *exec.Cmd, out io.Writer) error {
	cmd.Env = append(append(os.Environ(), "AWS_EC2_METADATA_DISABLED=true"), cmd.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	// The tool and the compilers it starts are one process group, ended
	// together when the context ends.
	childproc.Setup(cmd)
	cmd.Cancel = func() error { childproc.Signal(cmd, true); return nil }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s (in %s): %w", cmd, cmd.Dir, err)
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
