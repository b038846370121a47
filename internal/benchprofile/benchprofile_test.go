package benchprofile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process with LAMBDAKIT_BENCH_PROFILE set writes a CPU profile per
// window, which pprof reads, and its counters; killed in its third window,
// it keeps the first two.
func TestProfilesInWindowsThatOutliveAKill(t *testing.T) {
	if os.Getenv("BENCHPROFILE_CHILD") == "1" {
		for end := time.Now().Add(time.Minute); time.Now().Before(end); { // busy until killed
		}
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestProfilesInWindowsThatOutliveAKill$")
	cmd.Env = append(os.Environ(), "BENCHPROFILE_CHILD=1", "LAMBDAKIT_BENCH_PROFILE="+dir, "LAMBDAKIT_BENCH_PROFILE_SECONDS=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var files []string
	for deadline := time.Now().Add(20 * time.Second); len(files) < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		files, _ = filepath.Glob(filepath.Join(dir, "*.pprof"))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if len(files) < 3 {
		t.Fatalf("profiles %v after 20 s; want a third window started", files)
	}
	for _, f := range files[:2] {
		out, err := exec.Command("go", "tool", "pprof", "-top", f).CombinedOutput()
		if err != nil {
			t.Fatalf("pprof %s: %v\n%s", f, err, out)
		}
		if !strings.Contains(string(out), "TestProfilesInWindowsThatOutliveAKill") {
			t.Errorf("%s holds no sample of the busy test:\n%s", f, out)
		}
	}
	counters, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(counters) != 1 {
		t.Fatalf("counters %v, %v; want one file", counters, err)
	}
	b, err := os.ReadFile(counters[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"allocated_bytes ", "user_cpu ", "gc_cycles "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("counters %q lack %q", b, want)
		}
	}
	allocs, err := filepath.Glob(filepath.Join(dir, "*.allocs"))
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocation profiles %v, %v; want one file", allocs, err)
	}
	if out, err := exec.Command("go", "tool", "pprof", "-sample_index=alloc_objects", "-top", allocs[0]).CombinedOutput(); err != nil {
		t.Errorf("pprof %s: %v\n%s", allocs[0], err, out)
	}
}

// A bootstrap built without the benchprofile tag does not contain the
// package: production builds never profile.
func TestBootstrapsLeaveItOutWithoutTheTag(t *testing.T) {
	for _, tags := range []string{"lambda.norpc", "lambda.norpc,benchprofile"} {
		out, err := exec.Command("go", "list", "-tags", tags, "-deps", "../../functions/payment", "../../tools/bench/bare").CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		in := strings.Contains(string(out), "lambdakit/internal/benchprofile\n")
		if want := strings.Contains(tags, "benchprofile"); in != want {
			t.Errorf("with tags %s the bootstraps import benchprofile: %v; want %v", tags, in, want)
		}
	}
}
