package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// Micro is one `go test -bench` benchmark over several runs.
type Micro struct {
	// Name is the benchmark's name without "Benchmark" and the -N suffix.
	Name string
	// NsPerOp has one figure per run, sorted.
	NsPerOp     []float64
	BytesPerOp  int64
	AllocsPerOp int64
}

// Median returns the middle ns/op.
func (m Micro) Median() float64 { return m.NsPerOp[len(m.NsPerOp)/2] }

// RunMicro runs `go test -run ^$ -bench pattern -benchmem -count count pkg`
// in dir and parses its lines.
func RunMicro(ctx context.Context, dir, pkg, pattern string, count int) ([]Micro, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", pattern, "-benchmem", "-count", strconv.Itoa(count), pkg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bench: go test -bench: %w\n%s", err, out)
	}
	return ParseMicro(string(out))
}

// ParseMicro reads benchmark lines of `go test -bench -benchmem` output:
//
//	BenchmarkIdempotentNewKey-2   215880   8829 ns/op   2274 B/op   31 allocs/op
func ParseMicro(out string) ([]Micro, error) {
	byName := map[string]*Micro{}
	var order []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		m := byName[name]
		if m == nil {
			m = &Micro{Name: name}
			byName[name] = m
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("bench: benchmark line %q: %w", sc.Text(), err)
			}
			switch f[i+1] {
			case "ns/op":
				m.NsPerOp = append(m.NsPerOp, v)
			case "B/op":
				m.BytesPerOp = int64(v)
			case "allocs/op":
				m.AllocsPerOp = int64(v)
			}
		}
	}
	var res []Micro
	for _, name := range order {
		m := *byName[name]
		if len(m.NsPerOp) == 0 {
			return nil, fmt.Errorf("bench: benchmark %s has no ns/op", name)
		}
		slices.Sort(m.NsPerOp)
		res = append(res, m)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("bench: no benchmark lines in the output:\n%s", out)
	}
	return res, nil
}
