package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// EndToEnd runs the end-to-end rows for each Impl, each with its own
// Payments, records per row in batches of batchSize:
//
//   - first delivery: new payments, on fresh containers;
//   - warm redelivery: the same batches again, each on the container that
//     ran it (its memory answers);
//   - cold redelivery: the same batches on fresh containers, every record
//     completed elsewhere (what Lambda does when it re-drives a batch after
//     a timeout);
//   - a 50/50 mix of new payments and payments completed elsewhere, on
//     fresh containers.
//
// Each scenario runs for every Impl before the next, so that drift on the
// machine hits them alike. A new row is one more entry here.
func (h *Harness) EndToEnd(ctx context.Context, impls []Impl, pays []*Payments, records, batchSize int) ([]Row, error) {
	first := make([][][]events.SQSMessage, len(impls))
	warm := make([]*Containers, len(impls))
	defer func() {
		for _, c := range warm {
			c.Close()
		}
	}()
	scenarios := []struct {
		name string
		make func(i int) Scenario
		keep bool // keep the containers for the next scenario
	}{
		{"first delivery", func(i int) Scenario {
			first[i] = InBatches(pays[i].Take(records), batchSize)
			return Scenario{Batches: first[i]}
		}, true},
		{"warm redelivery (same container)", func(i int) Scenario {
			c := warm[i]
			warm[i] = nil // Run hands them back; closed below
			return Scenario{Batches: Redelivered(first[i]), Containers: c}
		}, false},
		{"cold redelivery (fresh container)", func(i int) Scenario {
			return Scenario{Batches: Redelivered(first[i])}
		}, false},
		{"50/50 new and completed elsewhere", func(i int) Scenario {
			return Scenario{Batches: Mixed(pays[i].Take(records/2), slices.Concat(first[i]...), batchSize)}
		}, false},
	}
	var rows []Row
	for _, sc := range scenarios {
		for i, im := range impls {
			s := sc.make(i)
			s.Name = sc.name
			h.progress("%s, %s", sc.name, im.Name)
			row, c, err := h.Run(ctx, im, s)
			if err != nil {
				return nil, fmt.Errorf("bench: %s, %s: %w", sc.name, im.Name, err)
			}
			if sc.keep {
				warm[i] = c
			} else {
				c.Close()
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// Build builds the bootstrap of package pkg (relative to the module root
// repo) at out, as `make build-PaymentFunction` does, for this machine,
// with the build tags tags besides lambda.norpc.
func Build(ctx context.Context, repo, out, pkg string, tags ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", strings.Join(append([]string{"lambda.norpc"}, tags...), ","), "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bench: go build %s: %w\n%s", pkg, err, msg)
	}
	return nil
}
