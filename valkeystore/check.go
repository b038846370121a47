package valkeystore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrMayEvict means a server's maxmemory-policy lets it delete keys before
// they expire to make room. Every record key has an expiry, so even the
// volatile-* policies may drop a lock or a completion, and the work it
// guarded would run again: only noeviction keeps every record, refusing
// writes instead when memory is full (which Store reports as
// lambdakit.ErrThrottled).
var ErrMayEvict = errors.New("valkeystore: the server may evict idempotency records (maxmemory-policy is not noeviction)")

// Check asks every node the client knows (INFO memory) for its
// maxmemory-policy, and returns an error wrapping ErrMayEvict, naming the
// nodes and their policies, when any is not noeviction. Call it at init: a
// function that may lose records should not start. Another error means it
// could not tell (a server that does not report the policy, or one that
// did not answer).
//
// INFO works where CONFIG GET is disabled, as on ElastiCache. The policy
// is a parameter of the cluster's parameter group there (the default,
// volatile-lru, evicts records).
func (s *Store) Check(ctx context.Context) error {
	var evicting, unknown []string
	nodes := s.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for addr := range nodes {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	for _, addr := range addrs {
		c := nodes[addr]
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			return fmt.Errorf("valkeystore: check %s: %w", addr, err)
		}
		switch policy := infoField(info, "maxmemory_policy"); policy {
		case "noeviction":
		case "":
			unknown = append(unknown, addr)
		default:
			evicting = append(evicting, addr+": "+policy)
		}
	}
	if len(evicting) > 0 {
		return fmt.Errorf("%w: %s", ErrMayEvict, strings.Join(evicting, ", "))
	}
	if len(unknown) > 0 {
		return fmt.Errorf("valkeystore: check: %s did not report a maxmemory_policy", strings.Join(unknown, ", "))
	}
	return nil
}

// infoField returns the value of name in an INFO answer, "" if absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
