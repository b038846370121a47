package layout

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/lambdakit/lambdakit"

// kind is the kind of code a package of this module is, by its folder.
func kind(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	top, _, _ := strings.Cut(rel, "/")
	switch top {
	case "lambdakit", "dynamostore", "valkeystore":
		return "library"
	case "internal":
		return "internal"
	case "cmd":
		return "cli"
	case "functions":
		return "sample"
	case "tools":
		return "tooling"
	}
	return "unknown"
}

// allowed says which kinds each kind may import, in its code and in its
// tests alike.
var allowed = map[string][]string{
	"library":  {"library", "internal"},
	"internal": {"internal"},
	"cli":      {"cli", "library", "internal"},
	"sample":   {"sample", "library", "internal"},
	"tooling":  {"tooling", "sample", "library", "internal"},
}

func TestDependenciesPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-test=false", "-json=ImportPath,Imports,TestImports,XTestImports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	packages := 0
	for dec.More() {
		var p struct {
			ImportPath                         string
			Imports, TestImports, XTestImports []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		packages++
		from := kind(p.ImportPath)
		if from == "unknown" {
			t.Errorf("%s is in no known folder: put it under lambdakit/, dynamostore/, valkeystore/, internal/, cmd/, functions/ or tools/", p.ImportPath)
			continue
		}
		for _, imp := range append(append(p.Imports, p.TestImports...), p.XTestImports...) {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := kind(imp)
			ok := false
			for _, k := range allowed[from] {
				ok = ok || k == to
			}
			if !ok {
				t.Errorf("%s (%s) imports %s (%s)", p.ImportPath, from, imp, to)
			}
		}
	}
	if packages < 20 {
		t.Fatalf("go list found %d packages; want the whole module", packages)
	}
}
