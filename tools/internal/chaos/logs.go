package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// The function's log lines the run reads, as lambdakit's batch writes
// them at DEBUG, the level the run gives the function: one line per
// record, "message done" with its outcome (at DEBUG only), or "message
// failed" with a reason code (at every level); a failure for a lost lease
// also carries a LeaseLost count (the Embedded Metric Format), once per
// lost lease.
const (
	msgDone   = "message done"
	msgFailed = "message failed"
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
		Msg        string `json:"msg"`
		MessageID  string `json:"messageId"`
		Outcome    string `json:"outcome"`
		Reason     string `json:"reason"`
		ReasonCode string `json:"reasonCode"`
		LeaseLost  int    `json:"LeaseLost"`
	}
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &rec) != nil {
		l.other++
		return
	}
	l.leaseLost += rec.LeaseLost
	switch rec.Msg {
	case msgDone:
		if rec.Outcome == "duplicate" || rec.Outcome == "replayed" {
			l.duplicates++
		}
	case msgFailed:
		l.failed++
		l.reasons[rec.MessageID] = rec.Reason
		kind := reasonKind(rec.ReasonCode)
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

// reasonKind names a failure's reason code (lambdakit's reasonCode log
// attribute) for the report.
func reasonKind(code string) string {
	switch code {
	case "PayloadMismatch":
		return kindMismatch
	case "InProgress":
		return "in progress elsewhere"
	case "Skipped":
		return "skipped after an earlier failure in its group"
	case "Deadline":
		return "deadline"
	case "LeaseLost":
		return "lease lost"
	case "StoreError":
		return "DynamoDB error"
	case "HandlerError":
		return "handler error (the gateway)"
	case "":
		return "other"
	}
	return code
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
