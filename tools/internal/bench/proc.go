package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The harness reads what it reports about processes from Linux's /proc:
// CPU time from /proc/<pid>/stat, memory from /proc/<pid>/status.

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports.
const userHZ = 100

// pidsOf returns the processes running the executable at path.
func pidsOf(path string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// goCPU returns the CPU time a Go process has used so far: the sum over
// its threads of /proc/<pid>/task/<tid>/schedstat (nanoseconds), or, where
// the kernel keeps no such figures, statCPU. The sum misses threads that
// have exited, which Go's runtime hardly ever lets happen; moto_server, a
// thread per request, needs statCPU.
func goCPU(pid int) (time.Duration, error) {
	if d, err := schedCPU(pid); err == nil && d > 0 {
		return d, nil
	}
	return statCPU(pid)
}

func schedCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread has just exited
		}
		f := strings.Fields(string(raw))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc/%d/task/%s/schedstat: %w", pid, t.Name(), err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// statCPU returns the user plus system CPU time of process pid so far,
// threads that exited included, from /proc/<pid>/stat, to 10 ms.
func statCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count fields after it.
	end := bytes.LastIndexByte(raw, ')')
	if end < 0 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(raw[end+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: bad CPU times", pid)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// memKB returns a memory figure of /proc/<pid>/status in KiB: "VmHWM" (the
// peak resident set) or "VmRSS" (the resident set now).
func memKB(pid int, key string) (int64, error) {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), key)
}

func statusField(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != key {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	return 0, fmt.Errorf("bench: %s has no %s", path, key)
}

// Machine describes where the harness ran.
type Machine struct {
	Date     time.Time
	CPUs     int
	CPUModel string
	MemGiB   float64
	Go       string
	Kernel   string
	// Load is /proc/loadavg's 1, 5 and 15 minute averages when described:
	// what else the machine was doing.
	Load string
}

// LoadAverage returns the 1, 5 and 15 minute load averages, as
// /proc/loadavg has them.
func LoadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// ThisMachine describes the machine the harness runs on.
func ThisMachine() Machine {
	m := Machine{Date: time.Now(), CPUs: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, Load: LoadAverage()}
	if kb, err := statusField("/proc/meminfo", "MemTotal"); err == nil {
		m.MemGiB = float64(kb) / (1 << 20)
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if name, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(raw))
	}
	return m
}
