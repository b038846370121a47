package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/lambdakit/lambdakit/lambdakit"
)

// The function's log messages the run counts, as lambdakit and the sample
// write them.
const (
	msgLeaseLost = "idempotency: lease lost"
	msgFailed    = "record failed"
	msgDuplicate = "idempotency: duplicate skipped"
)

// logStats is what the function processes said, read from their JSON log
// lines.
type logStats struct {
	mu         sync.Mutex
	out        io.Writer // every line, prefixed with its process; nil: none
	leaseLost  int
	duplicates int
	failed     int
	mismatches int               // failures for a payload mismatch
	reasons    map[string]string // message ID → reason of its last logged failure
	byReason   map[string]int    // failures by kind of reason
	other      int               // lines that are not the function's JSON
}

func newLogStats(out io.Writer) *logStats {
	return &logStats{out: out, reasons: map[string]string{}, byReason: map[string]int{}}
}

// sink returns the writer for process proc's standard output and error.
func (l *logStats) sink(proc int) io.Writer { return &logSink{stats: l, proc: proc} }

func (l *logStats) line(proc int, line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.out != nil {
		fmt.Fprintf(l.out, "p%d %s\n", proc, line)
	}
	var rec struct {
		Msg       string `json:"msg"`
		MessageID string `json:"messageId"`
		Reason    string `json:"reason"`
	}
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &rec) != nil {
		l.other++
		return
	}
	switch rec.Msg {
	case msgLeaseLost:
		l.leaseLost++
	case msgDuplicate:
		l.duplicates++
	case msgFailed:
		l.failed++
		l.reasons[rec.MessageID] = rec.Reason
		kind := reasonKind(rec.Reason)
		l.byReason[kind]++
		if kind == kindMismatch {
			l.mismatches++
		}
	}
}

func (l *logStats) reason(messageID string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.reasons[messageID]
	return r, ok
}

const kindMismatch = "payload mismatch"

// reasonKind sorts a failure reason from a log line, for the report. The
// reasons are another process's text, so the kinds are told apart by the
// texts of the sentinel errors they carry.
func reasonKind(reason string) string {
	for _, k := range []struct {
		err  error
		kind string
	}{
		{lambdakit.ErrPayloadMismatch, kindMismatch},
		{lambdakit.ErrInProgress, "in progress elsewhere"},
		{lambdakit.ErrSkipped, "skipped after an earlier failure in its group"},
		{lambdakit.ErrNotStarted, "not started before the deadline"},
		{lambdakit.ErrStillRunning, "still running at the deadline"},
		{lambdakit.ErrLeaseLost, "lease lost"},
	} {
		if strings.Contains(reason, k.err.Error()) {
			return k.kind
		}
	}
	switch {
	case strings.Contains(reason, "payment gateway"):
		return "gateway error"
	case strings.Contains(reason, "dynamostore"):
		return "DynamoDB error"
	}
	return "other"
}

// logSink splits a process's output into lines. os/exec calls Write from
// one goroutine at a time when standard output and error share the
// writer.
type logSink struct {
	stats   *logStats
	proc    int
	mu      sync.Mutex
	partial []byte
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		s.stats.line(s.proc, bytes.TrimRight(s.partial[:i], "\r"))
		s.partial = s.partial[i+1:]
	}
	if len(s.partial) > 1<<20 { // a line this long is not the function's JSON
		s.stats.line(s.proc, s.partial)
		s.partial = nil
	}
	return len(p), nil
}
