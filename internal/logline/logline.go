// Package logline reads JSON lines, one JSON object per line: the log
// lines of a Lambda function and of lambdakit, and input files such as
// events/payments-queue.jsonl. Buffer collects a function's output, written
// from the goroutines of os/exec and of the code under test, for reading
// while it runs. Tests and the CLI share it, so it does not import package
// testing.
package logline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"strings"
	"sync"
)

// Line is one line of input that is not blank, without its line ending.
type Line struct {
	N    int // its number in the input, from 1
	Text string
}

// Lines returns the lines of r that are not blank, in order. A line may be
// of any length. It stops at the end of r, or at a read error, which it
// yields last with a zero Line.
func Lines(r io.Reader) iter.Seq2[Line, error] {
	return func(yield func(Line, error) bool) {
		br := bufio.NewReaderSize(r, 64<<10)
		for n := 1; ; n++ {
			s, err := br.ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				yield(Line{}, err)
				return
			}
			if text := strings.TrimRight(s, "\r\n"); strings.TrimSpace(text) != "" {
				if !yield(Line{N: n, Text: text}, nil) {
					return
				}
			}
			if err != nil { // io.EOF
				return
			}
		}
	}
}

// Parse returns the JSON objects among the lines of s, in order, and the
// other lines that are not blank: a function's output mixes its JSON log
// lines with whatever else it prints.
func Parse(s string) (objects []map[string]any, others []string) {
	for l := range Lines(strings.NewReader(s)) { // a string reader does not fail
		var m map[string]any
		if json.Unmarshal([]byte(l.Text), &m) == nil && m != nil {
			objects = append(objects, m)
		} else {
			others = append(others, l.Text)
		}
	}
	return objects, others
}

// Objects returns the JSON objects among the lines of s, in order.
func Objects(s string) []map[string]any {
	objects, _ := Parse(s)
	return objects
}

// Buffer collects output written from any goroutine, and reads it while
// writes go on. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) { return lockedWrite(&b.mu, &b.buf, p) }

// String returns everything written since the last Reset.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Reset forgets everything written so far.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}

// Objects returns the JSON objects among the lines written so far.
func (b *Buffer) Objects() []map[string]any { return Objects(b.String()) }

// Writer serializes the writes of several goroutines to w, so that lines
// written whole do not interleave.
func Writer(w io.Writer) io.Writer { return &lockedWriter{w: w} }

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) { return lockedWrite(&l.mu, l.w, p) }

// lockedWrite writes p to w under mu.
func lockedWrite(mu *sync.Mutex, w io.Writer, p []byte) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	return w.Write(p)
}

// Prefixed returns a writer that writes each whole line written to it to
// w in one Write, after prefix: give several of them one Writer(w), and
// lines of different writers never mix. A line not yet ended waits for
// its end.
func Prefixed(w io.Writer, prefix string) io.Writer {
	return &prefixWriter{w: w, prefix: []byte(prefix)}
}

type prefixWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  []byte
	pending []byte // a line not yet ended
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, b...)
	for {
		i := bytes.IndexByte(p.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := append(append([]byte{}, p.prefix...), p.pending[:i+1]...)
		p.pending = p.pending[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), err
		}
	}
}
