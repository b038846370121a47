package childproc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat returns the fields of /proc/PID/stat after the command's name (so
// the state is f[0], the parent's ID f[1], the process group f[2], the
// start time f[19]), or nil where there is no such process or no /proc.
func Stat(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// pid (comm) state ppid ...; comm may hold anything, ')' too.
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// Proc is a process as /proc showed it: its ID and its Stat fields.
type Proc struct {
	PID  int
	Stat []string
}

// Processes returns the processes whose Stat fields match, read from
// /proc (none where there is no /proc).
func Processes(match func(stat []string) bool) []Proc {
	entries, _ := os.ReadDir("/proc")
	var procs []Proc
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f := Stat(pid); f != nil && match(f) {
			procs = append(procs, Proc{pid, f})
		}
	}
	return procs
}

// Group returns the processes of the process group pgid, which Setup
// makes each child lead: the child and whatever it started.
func Group(pgid int) []Proc {
	group := strconv.Itoa(pgid)
	return Processes(func(f []string) bool { return len(f) > 2 && f[2] == group })
}
