package lambdakitotel_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// goListDeps lists the packages pkgs depend on, themselves included.
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Fields(string(out))
}

// A function that does not trace must not link OpenTelemetry, nor pay for
// its initialisation at a cold start: that is why tracing is a package of
// its own, which only the functions that trace import.
func TestCorePackagesDoNotLinkOpenTelemetry(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const mod = "github.com/lambdakit/lambdakit/"
	deps := goListDeps(t, mod+"functions/payment", mod+"lambdakit", mod+"dynamostore", mod+"cmd/lambdakit")
	for _, dep := range deps {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") || strings.HasSuffix(dep, "/lambdakitotel") {
			t.Errorf("a core package depends on %s", dep)
		}
	}
	if len(deps) < 10 {
		t.Errorf("go list gave %d packages; want the whole dependency graph", len(deps))
	}
}

// The tracing package uses the OpenTelemetry API only: the SDK, and with
// it the exporter, is the caller's choice.
func TestTracingUsesTheAPIOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	deps := goListDeps(t, "github.com/lambdakit/lambdakit/lambdakit/lambdakitotel")
	api := false
	for _, dep := range deps {
		if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(dep, "go.opentelemetry.io/otel/exporters") {
			t.Errorf("lambdakitotel depends on %s", dep)
		}
		api = api || dep == "go.opentelemetry.io/otel/trace"
	}
	if !api {
		t.Error("lambdakitotel does not depend on go.opentelemetry.io/otel/trace; the list is not what it seems")
	}
}
