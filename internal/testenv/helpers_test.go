package testenv_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lambdakit/lambdakit/internal/testenv"
)

// Tests that ask for one package at once share one build, which runs.
func TestBuildBuildsOncePerPackage(t *testing.T) {
	paths := make([]string, 4)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i] = testenv.Build(t, "./testdata/hello")
		}()
	}
	wg.Wait()
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Fatalf("Build returned %q and %q; want one build", paths[0], p)
		}
	}
	if filepath.Base(paths[0]) != "hello" {
		t.Errorf("binary %s; want it named after its package, hello", paths[0])
	}
	out, err := exec.Command(paths[0]).Output()
	if err != nil || string(out) != "hello from a built binary\n" {
		t.Errorf("the binary said %q (%v); want its greeting", out, err)
	}
	if again := testenv.Build(t, "testdata/../testdata/hello"); again != paths[0] {
		t.Errorf("the same package by another path built again: %s", again)
	}
}

// Queue makes a FIFO queue that wants deduplication IDs, Drain takes every
// message off it, each group in order, and leaves it empty.
func TestQueueAndDrain(t *testing.T) {
	client := sqs.NewFromConfig(moto.Config(t))
	url := testenv.Queue(t, client, true, map[string]string{"VisibilityTimeout": "7"})
	attrs, err := client.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if a := attrs.Attributes; a["FifoQueue"] != "true" || a["ContentBasedDeduplication"] != "false" || a["VisibilityTimeout"] != "7" {
		t.Errorf("queue attributes %v; want FIFO, no content-based deduplication, visibility 7", a)
	}
	const n = 25 // more than one receive takes
	for i := range n {
		_, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(url), MessageBody: aws.String(fmt.Sprintf("m%02d", i)),
			MessageGroupId: aws.String(fmt.Sprint(i % 2)), MessageDeduplicationId: aws.String(fmt.Sprint(i)),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := testenv.Drain(t, client, url)
	last := map[string]string{}
	for _, m := range got {
		g, body := m.Attributes["MessageGroupId"], aws.ToString(m.Body)
		if body <= last[g] {
			t.Errorf("group %s: %s after %s; want the order sent", g, body, last[g])
		}
		last[g] = body
	}
	if len(got) != n {
		t.Errorf("drained %d messages; want %d", len(got), n)
	}
	if again := testenv.Drain(t, client, url); len(again) != 0 {
		t.Errorf("a second drain got %d messages; want none", len(again))
	}
}

func TestReachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if !testenv.Reachable(addr) {
		t.Errorf("Reachable(%s) = false with a listener; want true", addr)
	}
	l.Close()
	if testenv.Reachable(addr) {
		t.Errorf("Reachable(%s) = true after the listener closed; want false", addr)
	}
}
