// Package benchprofile profiles a bootstrap while `make bench` drives it,
// when the bootstrap is built with the benchprofile build tag (the bench's
// -function-profiles flag does so) and LAMBDAKIT_BENCH_PROFILE names a
// folder. It exists because this is the only way to see where a real
// bootstrap's CPU goes here: perf on this machine's VM names few of a Go
// process's samples, and a profile of the bench process shows the
// library's code hot in cache, not as it runs between network waits.
//
// The profile is written in windows of LAMBDAKIT_BENCH_PROFILE_SECONDS
// (default 20) to <folder>/<pid>-<n>.pprof, so that a process the bench
// kills loses at most its last window; `go tool pprof` merges the files it
// is given. LAMBDAKIT_BENCH_PROFILE_HZ sets the sampling rate (default
// 100, the runtime's): at 100 Hz a bench run gives a few hundred samples
// per process, too few to tell apart two costs a few percent apart. Each
// window also rewrites <folder>/<pid>.txt with the
// process's allocation and CPU counters (runtime.MemStats, getrusage),
// and <folder>/<pid>.allocs with its allocation profile so far (`go tool
// pprof -sample_index=alloc_objects`), sampled as
// LAMBDAKIT_BENCH_PROFILE_MEMRATE says (runtime.MemProfileRate: 1 records
// every allocation, for exact counts at the cost of the CPU figures).
// Production builds leave the package out: nothing in it runs without the
// tag.
package benchprofile

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

func init() {
	dir := os.Getenv("LAMBDAKIT_BENCH_PROFILE")
	if dir == "" {
		return
	}
	window := 20 * time.Second
	if s, err := strconv.Atoi(os.Getenv("LAMBDAKIT_BENCH_PROFILE_SECONDS")); err == nil && s > 0 {
		window = time.Duration(s) * time.Second
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "benchprofile:", err)
		return
	}
	if r, err := strconv.Atoi(os.Getenv("LAMBDAKIT_BENCH_PROFILE_MEMRATE")); err == nil && r > 0 {
		runtime.MemProfileRate = r
	}
	hz, err := strconv.Atoi(os.Getenv("LAMBDAKIT_BENCH_PROFILE_HZ"))
	if err != nil || hz <= 0 {
		hz = 0
	}
	go run(dir, window, hz)
}

// run profiles window after window, until the process ends, at hz samples
// a second (0: the runtime's default).
func run(dir string, window time.Duration, hz int) {
	for n := 0; ; n++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%d-%03d.pprof", os.Getpid(), n)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchprofile:", err)
			return
		}
		if hz > 0 {
			// StartCPUProfile sets its own rate of 100 Hz unless one
			// is set already; it then says so on stderr and keeps it.
			runtime.SetCPUProfileRate(hz)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "benchprofile:", err)
			f.Close()
			return
		}
		time.Sleep(window)
		pprof.StopCPUProfile()
		f.Close()
		writeCounters(filepath.Join(dir, fmt.Sprintf("%d.txt", os.Getpid())))
		writeAllocs(filepath.Join(dir, fmt.Sprintf("%d.allocs", os.Getpid())))
	}
}

// writeCounters writes the process's counters so far to path: the
// runtime's (allocation, garbage collection, and its own estimate of the
// CPU time each class of work took, runtime/metrics), and the kernel's.
func writeCounters(path string) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := fmt.Sprintf("allocated_bytes %d\nallocations %d\ngc_cycles %d\nheap_alloc_bytes %d\n"+
		"user_cpu %v\nsystem_cpu %v\nminor_faults %d\nvoluntary_switches %d\ninvoluntary_switches %d\n",
		m.TotalAlloc, m.Mallocs, m.NumGC, m.HeapAlloc, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()),
		ru.Minflt, ru.Nvcsw, ru.Nivcsw)
	samples := []metrics.Sample{
		{Name: "/cpu/classes/user:cpu-seconds"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/scavenge/total:cpu-seconds"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/sched/goroutines-created:goroutines"},
	}
	metrics.Read(samples)
	for _, sm := range samples {
		switch sm.Value.Kind() {
		case metrics.KindFloat64:
			s += fmt.Sprintf("%s %.3f\n", sm.Name, sm.Value.Float64())
		case metrics.KindUint64:
			s += fmt.Sprintf("%s %d\n", sm.Name, sm.Value.Uint64())
		}
	}
	_ = os.WriteFile(path, []byte(s), 0o644)
}

// writeAllocs writes the process's allocation profile so far to path.
func writeAllocs(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("allocs").WriteTo(f, 0)
}
