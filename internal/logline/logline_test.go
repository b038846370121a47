package logline_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/lambdakit/lambdakit/internal/logline"
)

func TestLinesSkipsBlankLinesAndKeepsNumbers(t *testing.T) {
	long := strings.Repeat("x", 2<<20) // longer than any scanner buffer
	in := "a\r\n\n  \t\n b \n" + long + "\nlast"
	var got []logline.Line
	for l, err := range logline.Lines(strings.NewReader(in)) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l)
	}
	want := []logline.Line{{1, "a"}, {4, " b "}, {5, long}, {6, "last"}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got {%d, %.20q}; want {%d, %.20q}", i, got[i].N, got[i].Text, want[i].N, want[i].Text)
		}
	}
}

func TestLinesYieldsAReadErrorLast(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("one\ntwo\n"), iotest.ErrReader(boom))
	var texts []string
	var last error
	for l, err := range logline.Lines(r) {
		if err != nil {
			last = err
			continue
		}
		texts = append(texts, l.Text)
	}
	if strings.Join(texts, ",") != "one,two" || !errors.Is(last, boom) {
		t.Errorf("got lines %q and error %v; want one, two, then boom", texts, last)
	}
}

func TestLinesStopsWhenTheLoopBreaks(t *testing.T) {
	n := 0
	for range logline.Lines(strings.NewReader("a\nb\nc\n")) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("the loop ran %d times; want 1", n)
	}
}

func TestParseSeparatesObjectsFromOtherLines(t *testing.T) {
	s := `START RequestId: 1
{"msg":"message done","n":1}
[1,2]
null

{"msg":"message failed"}
`
	objects, others := logline.Parse(s)
	if len(objects) != 2 || objects[0]["msg"] != "message done" || objects[0]["n"] != 1.0 || objects[1]["msg"] != "message failed" {
		t.Errorf("got objects %v; want the two JSON objects in order", objects)
	}
	if strings.Join(others, "|") != "START RequestId: 1|[1,2]|null" {
		t.Errorf("got other lines %q; want the three lines that are not objects", others)
	}
	if got := logline.Objects(s); len(got) != 2 {
		t.Errorf("Objects: got %d; want 2", len(got))
	}
}

// Under -race, the buffer must stand writes from several goroutines while
// it is read, and lose none.
func TestBufferTakesConcurrentWrites(t *testing.T) {
	var b logline.Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				fmt.Fprintf(&b, "{\"g\":%d,\"i\":%d}\n", g, i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := len(b.Objects()); n != 400 {
		t.Errorf("got %d objects; want 400", n)
	}
	b.Reset()
	if b.String() != "" {
		t.Errorf("after Reset: %q; want nothing", b.String())
	}
}

// chunky writes each p in two halves, so that writers that are not
// serialized interleave their halves.
type chunky struct{ sb strings.Builder }

func (c *chunky) Write(p []byte) (int, error) {
	h := len(p) / 2
	c.sb.Write(p[:h])
	for range 100 {
		_ = fmt.Sprint() // give another writer a chance to come in between
	}
	c.sb.Write(p[h:])
	return len(p), nil
}

func TestWriterKeepsLinesWhole(t *testing.T) {
	c := &chunky{}
	w := logline.Writer(c)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				fmt.Fprintf(w, "%s\n", strings.Repeat(string(rune('a'+g)), 40))
			}
		}()
	}
	wg.Wait()
	for l := range logline.Lines(strings.NewReader(c.sb.String())) {
		if strings.Trim(l.Text, l.Text[:1]) != "" || len(l.Text) != 40 {
			t.Fatalf("line %d = %q; want 40 of one letter", l.N, l.Text)
		}
	}
}

func TestPrefixedWritesWholeLinesAfterItsPrefix(t *testing.T) {
	var out bytes.Buffer
	w := logline.Writer(&out)
	a, b := logline.Prefixed(w, "a: "), logline.Prefixed(w, "b: ")
	for _, step := range []struct {
		w io.Writer
		s string
	}{{a, "one "}, {b, "two\nthr"}, {a, "line\n"}, {b, "ee\nnot ended"}} {
		if _, err := io.WriteString(step.w, step.s); err != nil {
			t.Fatal(err)
		}
	}
	if want := "b: two\na: one line\nb: three\n"; out.String() != want {
		t.Errorf("wrote %q; want %q", out.String(), want)
	}
}
