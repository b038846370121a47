package main

import (
	"strings"
	"testing"
)

// What demo local says its environment is for: endpoints on loopback are
// for lambdakit invoke and run on this machine, never for sam local, whose
// container has a loopback of its own; events/env.json is offered for sam
// local only with the default ports, which it names; an environment that
// names another host is for sam local.
func TestEnvUse(t *testing.T) {
	for _, c := range []struct {
		host         string
		defaultPorts bool
		want, never  []string
	}{
		{"127.0.0.1", true,
			[]string{"'lambdakit invoke -env-file bin/e.json'", "'lambdakit run -env-file bin/e.json'", "not for 'sam local invoke'", "use events/env.json", "-env-host host.docker.internal", "-listen 172.17.0.1"},
			[]string{"--env-vars bin/e.json"}},
		{"127.0.0.1", false,
			[]string{"'lambdakit invoke -env-file bin/e.json'", "not for 'sam local invoke'", "-env-host host.docker.internal"},
			[]string{"events/env.json", "--env-vars bin/e.json"}},
		{"::1", true, []string{"not for 'sam local invoke'"}, []string{"--env-vars"}},
		{"localhost", true, []string{"not for 'sam local invoke'"}, []string{"--env-vars"}},
		{"host.docker.internal", true, []string{"it is for 'sam local invoke --env-vars bin/e.json'", "as host.docker.internal"}, []string{"lambdakit invoke"}},
		{"172.17.0.1", false, []string{"it is for 'sam local invoke --env-vars bin/e.json'", "as 172.17.0.1"}, []string{"not for"}},
	} {
		got := envUse(c.host, "bin/e.json", c.defaultPorts)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("envUse(%q, %t) = %q; want it to say %q", c.host, c.defaultPorts, got, w)
			}
		}
		for _, n := range c.never {
			if strings.Contains(got, n) {
				t.Errorf("envUse(%q, %t) = %q; want no %q", c.host, c.defaultPorts, got, n)
			}
		}
	}
}
