package redisserver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// clusterTimeout bounds how long StartCluster waits for the nodes to agree
// that the cluster is up; on loopback it takes about a second.
const clusterTimeout = 20 * time.Second

// Cluster is a cluster of primaries without replicas, each holding an
// equal share of the 16384 hash slots.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// StartCluster starts n nodes with cluster-enabled yes, gives each a range
// of slots (CLUSTER ADDSLOTSRANGE), introduces them (CLUSTER MEET) and waits
// until every node reports cluster_state:ok. The caller must Stop it.
func StartCluster(n int, args ...string) (*Cluster, error) {
	c := &Cluster{}
	for i := range n {
		s, err := Start(append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, args...)...)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		first, last := i*16384/n, (i+1)*16384/n-1
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, s := range c.Nodes[1:] {
		if _, err := c.Nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.waitOK(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK waits until every node sees every node and all slots served.
func (c *Cluster) waitOK() error {
	deadline := time.Now().Add(clusterTimeout)
	var last error
	for time.Now().Before(deadline) {
		last = nil
		for _, s := range c.Nodes {
			info, err := s.Do("CLUSTER", "INFO")
			if err == nil && !(strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes)))) {
				f := strings.Fields(info)
				err = errors.New("not ready: " + strings.Join(f[:min(3, len(f))], " "))
			}
			if err != nil {
				last = fmt.Errorf("node %s: %w", s.Addr, err)
				break
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redisserver: cluster not up within %v: %w", clusterTimeout, last)
}
