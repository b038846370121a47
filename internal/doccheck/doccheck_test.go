package doccheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/lambdakit/lambdakit"

// minBlocks is how many ```go blocks each page holds at least. A page that
// loses one (a fence spelled ```golang, a block deleted by mistake) fails
// TestGoBlocksCompile, so that the test cannot pass by finding none. Raise
// the numbers when you add blocks; a page not listed here may hold any
// number.
var minBlocks = map[string]int{
	"README.md":                    1,
	"docs/getting-started.md":      2,
	"docs/idempotency.md":          9,
	"docs/powertools-migration.md": 1,
	"docs/batch-processing.md":     3,
	"docs/publishing.md":           1,
	"docs/operations.md":           2,
	"docs/testing.md":              3,
	"docs/valkey.md":               1,
}

// libraryPackages are the folders whose exported identifiers must all
// have doc comments.
var libraryPackages = []string{
	"lambdakit",
	"lambdakit/producer",
	"lambdakit/lambdakitotel",
	"lambdakit/lambdakittest",
	"lambdakit/storetest",
	"lambdakit/jmespathkey",
	"dynamostore",
	"dynamostore/dynamostoretest",
	"valkeystore",
}

// block is one fenced code block of a Markdown page.
type block struct {
	page string // the page's path from the module's root, with slashes
	line int    // the page's line of the block's first line of code
	info string // the fence's info string: "go", "sh" ...
	code string
}

// where names the block's line n (1-based) as a line of its page.
func (b block) where(n int) string {
	return fmt.Sprintf("%s:%d", b.page, b.line+n-1)
}

// slug is a name for the block that is a valid import path element.
func (b block) slug() string {
	s := strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(b.page)
	return fmt.Sprintf("%s_L%d", s, b.line)
}

// moduleRoot returns the module's root folder: the nearest parent of the
// test's folder whose go.mod declares this module.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && regexp.MustCompile(`(?m)^module\s+`+regexp.QuoteMeta(module)+`\s*$`).Match(data) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's folder", module)
		}
		dir = parent
	}
}

// pages returns README.md and docs/*.md, relative to root, with slashes.
func pages(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	slices.Sort(out)
	return out
}

var fence = regexp.MustCompile("^( *)(```+|~~~+)\\s*(.*)$")

// parseBlocks returns the fenced code blocks of a Markdown page. A fence
// may be indented (a block inside a list item); the indentation of the
// opening fence is removed from each line of the block.
func parseBlocks(page string, data []byte) ([]block, error) {
	var (
		out    []block
		open   bool
		marker string
		indent int
		cur    block
		code   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		m := fence.FindStringSubmatch(line)
		if !open {
			if m != nil {
				open, indent, marker = true, len(m[1]), m[2]
				cur = block{page: page, line: n + 1, info: strings.TrimSpace(m[3])}
				code.Reset()
			}
			continue
		}
		if m != nil && strings.HasPrefix(m[2], marker) && m[2][0] == marker[0] && strings.TrimSpace(m[3]) == "" {
			cur.code = code.String()
			out = append(out, cur)
			open = false
			continue
		}
		code.WriteString(trimIndent(line, indent))
		code.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if open {
		return nil, fmt.Errorf("%s:%d: code block never closed", page, cur.line-1)
	}
	return out, nil
}

// trimIndent removes up to n leading spaces from line.
func trimIndent(line string, n int) string {
	i := 0
	for i < n && i < len(line) && line[i] == ' ' {
		i++
	}
	return line[i:]
}

// isGo reports whether a fence's info string marks Go code.
func isGo(info string) bool {
	lang, _, _ := strings.Cut(info, " ")
	return lang == "go"
}

// goBlocks returns the ```go blocks of every page, and checks that each
// listed page has as many as minBlocks says.
func goBlocks(t *testing.T, root string) []block {
	t.Helper()
	var all []block
	found := map[string]int{}
	for _, page := range pages(t, root) {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseBlocks(page, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if isGo(b.info) {
				all = append(all, b)
				found[page]++
			}
		}
	}
	for page, want := range minBlocks {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(page))); err != nil {
			t.Errorf("%s: %v (listed in minBlocks)", page, err)
			continue
		}
		if found[page] < want {
			t.Errorf("%s: found %d ```go blocks; want at least %d (minBlocks)", page, found[page], want)
		}
	}
	return all
}

// checkComplete reports why b is not a complete Go file a reader can copy
// whole, or nil: it must parse, have a package clause, and not be an
// external test package (the blocks are compiled as ordinary files).
func checkComplete(b block) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, b.slug()+".go", b.code, parser.SkipObjectResolution)
	if err != nil {
		var list scanner.ErrorList
		if errors.As(err, &list) && len(list) > 0 {
			e := list[0]
			if strings.Contains(e.Msg, "expected 'package'") {
				return fmt.Errorf("%s: not a complete Go file: no package clause (every ```go block must be a whole file, package and imports included)", b.where(e.Pos.Line))
			}
			return fmt.Errorf("%s: %s", b.where(e.Pos.Line), e.Msg)
		}
		return fmt.Errorf("%s: %v", b.where(1), err)
	}
	if name := f.Name.Name; strings.HasSuffix(name, "_test") {
		return fmt.Errorf("%s: package %s: write examples of tests in the package under test (package %s), so that the block builds as it is",
			b.where(fset.Position(f.Package).Line), name, strings.TrimSuffix(name, "_test"))
	}
	return nil
}

// buildBlocks compiles each block as a package of its own, at
// internal/doccheck/testdata/blocks/<slug>, a folder that exists only in
// the overlay given to `go build`: the blocks' files are written to a
// temporary folder outside the working tree. It returns go build's output,
// with the blocks' file names and lines turned into their pages' lines.
func buildBlocks(t *testing.T, root string, blocks []block) (string, error) {
	t.Helper()
	tmp := t.TempDir()
	replace := map[string]string{}
	bySlug := map[string]block{}
	args := []string{"build", "-overlay", filepath.Join(tmp, "overlay.json")}
	for _, b := range blocks {
		slug := b.slug()
		if _, dup := bySlug[slug]; dup {
			t.Fatalf("two blocks named %s", slug)
		}
		bySlug[slug] = b
		src := filepath.Join(tmp, slug+".go")
		if err := os.WriteFile(src, []byte(b.code), 0o644); err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join("internal", "doccheck", "testdata", "blocks", slug)
		replace[filepath.Join(root, rel, "block.go")] = src
		args = append(args, "./"+filepath.ToSlash(rel))
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to compile the documentation's blocks: %v", err)
	}
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	return mapPositions(string(out), bySlug), err
}

var position = regexp.MustCompile(`(\S*?)([A-Za-z0-9_]+_L[0-9]+)\.go:([0-9]+)`)

// mapPositions turns "<temporary folder>/<slug>.go:N" in go build's
// output into the block's page and line.
func mapPositions(out string, bySlug map[string]block) string {
	return position.ReplaceAllStringFunc(out, func(s string) string {
		m := position.FindStringSubmatch(s)
		b, ok := bySlug[m[2]]
		if !ok {
			return s
		}
		n, _ := strconv.Atoi(m[3])
		return b.where(n)
	})
}

func TestGoBlocksCompile(t *testing.T) {
	root := moduleRoot(t)
	blocks := goBlocks(t, root)
	if len(blocks) == 0 {
		t.Fatal("no ```go blocks found in README.md or docs/*.md")
	}
	var complete []block
	for _, b := range blocks {
		if err := checkComplete(b); err != nil {
			t.Error(err)
			continue
		}
		complete = append(complete, b)
	}
	if len(complete) == 0 {
		return
	}
	out, err := buildBlocks(t, root, complete)
	if err != nil {
		t.Errorf("the documentation's ```go blocks do not all compile against this module (%v):\n%s", err, out)
	}
	t.Logf("%d ```go blocks in %d pages checked", len(complete), len(pages(t, root)))
}

// The check above must catch a block that does not compile, and one that
// is not a whole file: a broken block of each kind is put to it.
func TestBrokenBlocksAreCaught(t *testing.T) {
	root := moduleRoot(t)
	good := block{page: "docs/selftest.md", line: 10, info: "go", code: `package main

import "github.com/lambdakit/lambdakit/lambdakit"

func main() { _ = lambdakit.Chain }
`}
	broken := block{page: "docs/selftest.md", line: 30, info: "go", code: `package main

import "github.com/lambdakit/lambdakit/lambdakit"

func main() { _ = lambdakit.NoSuchIdentifier }
`}
	out, err := buildBlocks(t, root, []block{good, broken})
	t.Logf("go build on a broken block:\n%s", out)
	if err == nil {
		t.Fatalf("a block naming an identifier the module lacks compiled:\n%s", out)
	}
	if !strings.Contains(out, "docs/selftest.md:34") || !strings.Contains(out, "NoSuchIdentifier") {
		t.Errorf("go build's output does not name the broken line as docs/selftest.md:34:\n%s", out)
	}
	if regexp.MustCompile(`docs/selftest\.md:1[0-4]\b`).MatchString(out) {
		t.Errorf("the good block was blamed:\n%s", out)
	}
	fragment := block{page: "docs/selftest.md", line: 50, info: "go", code: "store := lambdakittest.MemoryStore{}\n"}
	if err := checkComplete(fragment); err == nil || !strings.Contains(err.Error(), "no package clause") {
		t.Errorf("a fragment without a package clause: got %v; want it refused", err)
	}
}

func TestParseBlocks(t *testing.T) {
	page := "# T\n\n```go\npackage a\n```\n\n- item\n\n  ```go\n  package b\n\n  func f() {}\n  ```\n\n````md\n```go\nnot a block\n```\n````\n\n```sh\nmake test\n```\n"
	blocks, err := parseBlocks("p.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		line       int
		info, code string
	}
	var g []got
	for _, b := range blocks {
		g = append(g, got{b.line, b.info, b.code})
	}
	want := []got{
		{4, "go", "package a\n"},
		{10, "go", "package b\n\nfunc f() {}\n"},
		{16, "md", "```go\nnot a block\n```\n"},
		{22, "sh", "make test\n"},
	}
	if !slices.Equal(g, want) {
		t.Errorf("parseBlocks:\n got %q\nwant %q", g, want)
	}
	if _, err := parseBlocks("p.md", []byte("```go\npackage a\n")); err == nil {
		t.Error("an unclosed block: got no error")
	}
}

// undocumented returns the exported identifiers of file that have no doc
// comment, as "file:line: what", and how many exported identifiers it
// looked at.
func undocumented(fset *token.FileSet, f *ast.File) (missing []string, seen int) {
	report := func(pos token.Pos, what string) {
		missing = append(missing, fmt.Sprintf("%s: %s has no doc comment", fset.Position(pos), what))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			what := "func " + d.Name.Name
			if d.Recv != nil {
				recv := receiverType(d.Recv)
				if !ast.IsExported(recv) {
					continue
				}
				what = "method " + recv + "." + d.Name.Name
			}
			seen++
			if d.Doc == nil {
				report(d.Pos(), what)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					seen++
					if s.Doc == nil && s.Comment == nil && d.Doc == nil {
						report(s.Pos(), "type "+s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if !name.IsExported() {
							continue
						}
						seen++
						if s.Doc == nil && s.Comment == nil && d.Doc == nil {
							report(name.Pos(), strings.ToLower(d.Tok.String())+" "+name.Name)
						}
					}
				}
			}
		}
	}
	return missing, seen
}

// receiverType is the name of a method's receiver type, without pointer
// or type parameters.
func receiverType(recv *ast.FieldList) string {
	if recv == nil || len(recv.List) == 0 {
		return ""
	}
	expr := recv.List[0].Type
	for {
		switch e := expr.(type) {
		case *ast.StarExpr:
			expr = e.X
		case *ast.IndexExpr:
			expr = e.X
		case *ast.IndexListExpr:
			expr = e.X
		case *ast.ParenExpr:
			expr = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

func TestExportedIdentifiersAreDocumented(t *testing.T) {
	root := moduleRoot(t)
	total := 0
	for _, pkg := range libraryPackages {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		seenPkg, parsed := 0, 0
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("%s: %v", pkg, err)
				continue
			}
			parsed++
			if f.Name.Name == "main" {
				continue
			}
			missing, seen := undocumented(fset, f)
			seenPkg += seen
			for _, m := range missing {
				rel, err := filepath.Rel(root, m)
				if err != nil || strings.HasPrefix(rel, "..") {
					rel = m
				}
				t.Error(filepath.ToSlash(rel))
			}
		}
		if parsed == 0 || seenPkg == 0 {
			t.Errorf("%s: found %d Go files and %d exported identifiers; want the package's", pkg, parsed, seenPkg)
		}
		total += seenPkg
	}
	t.Logf("%d exported identifiers in %d packages checked", total, len(libraryPackages))
}

// The doc-comment check must see a missing comment in each place it looks.
func TestUndocumentedIsCaught(t *testing.T) {
	src := `package p

// Documented is documented.
func Documented() {}

func Bare() {}

type T struct{}

func (T) M() {}

func (*T) N() {} // a line comment is not a doc comment

type unexported struct{}

func (unexported) Exported() {}

// Group of constants.
const (
	A = 1
	B = 2
)

const C = 3

var (
	D = 4 // D has a line comment.
	E = 5
)

type G[X any] struct{}

func (g *G[X]) Get() {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	missing, seen := undocumented(fset, f)
	var names []string
	for _, m := range missing {
		names = append(names, m[strings.Index(m, ": ")+2:])
	}
	want := []string{
		"func Bare has no doc comment",
		"type T has no doc comment",
		"method T.M has no doc comment",
		"method T.N has no doc comment",
		"const C has no doc comment",
		"var E has no doc comment",
		"type G has no doc comment",
		"method G.Get has no doc comment",
	}
	if !slices.Equal(names, want) {
		t.Errorf("undocumented:\n got %q\nwant %q", names, want)
	}
	if seen != 12 {
		t.Errorf("looked at %d exported identifiers; want 12", seen)
	}
}
