package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/lambdakit/lambdakit/functions/payment/gateway"
	"github.com/lambdakit/lambdakit/internal/cmdline"
	"github.com/lambdakit/lambdakit/internal/motoserver"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
)

const localUsage = `Usage: go run ./functions/payment/demo local [flags]

A tool of the payment sample (functions/payment): it starts what the sample
function needs on this machine and keeps it running until Ctrl-C: moto_server (DynamoDB and SQS) on -listen:-moto-port, the
sandbox payment gateway on -listen:-gateway-port, and the payments table
created as template.yaml declares it (lambdakit-payments; the ledger, with
the idempotency records on its rows).
Every port and address is checked before anything starts. The default
ports, 7460 and 7461, are chosen to be free of common services (5000 is
macOS's AirPlay Receiver, 8080 every other dev server).

The function's environment, in the JSON of 'sam local invoke --env-vars'
and 'lambdakit invoke -env-file', goes to the file named by -env-file, or
else to standard output; messages go to standard error. Its endpoints name
-env-host, which must be how the function reaches this machine. A sam
local container cannot reach this machine's 127.0.0.1, the default:

  lambdakit invoke, lambdakit run (on this machine): the defaults
      go run ./functions/payment/demo local -env-file bin/local-env.json
  sam local invoke, Docker Desktop (macOS, Windows): host.docker.internal
  reaches the host's loopback, so the servers stay on 127.0.0.1
      go run ./functions/payment/demo local -env-host host.docker.internal -env-file bin/sam-env.json
  sam local invoke, Linux: a container reaches the host through the Docker
  bridge's gateway address (usually 172.17.0.1; 'docker network inspect
  bridge' shows it), not its loopback, so listen there
      go run ./functions/payment/demo local -listen 172.17.0.1 -env-file bin/sam-env.json

events/env.json is the file for sam local with the default ports and
host.docker.internal; on Linux add --add-host host.docker.internal:172.17.0.1
to 'sam local invoke' and start this with -listen 172.17.0.1. bin/ is
ignored by git ('make build' makes it); -env-file needs its folder to exist.

Flags:
`

// The default ports: in neither nmap's list of services (derived from
// IANA's registry and nmap's scans) nor /etc/services, unlike 5000 (macOS's
// AirPlay Receiver, UPnP) and 8080 (HTTP proxies, dev servers), and below
// the ports Linux (32768 and up), macOS and Windows (49152 and up) hand out
// to outgoing connections. events/env.json names them.
const (
	defaultMotoPort    = 7460
	defaultGatewayPort = 7461
)

// Physical table names for the template's logical IDs, as in events/env.json.
// The payments table holds the idempotency records too, on the ledger rows.
var localTables = map[string]string{
	"PaymentsTable": "lambdakit-payments",
}

// localCommand is the payment sample's outside world, what the command
// runs as "demo local".
type localCommand struct {
	stdio
	localConfig
	envFile string
	envHost string
}

// parse reads and checks the command line.
func (c *localCommand) parse(args []string) error {
	fs := cmdline.NewFlags(c.stderr, "local", localUsage, "")
	fs.StringVar(&c.listen, "listen", loopback, "the IP `address` moto_server and the gateway listen on: 127.0.0.1 for this machine only, the Docker bridge's address (172.17.0.1) for sam local on Linux, 0.0.0.0 for every interface")
	fs.IntVar(&c.motoPort, "moto-port", defaultMotoPort, "moto_server's `port` (0: a free one)")
	fs.IntVar(&c.gatewayPort, "gateway-port", defaultGatewayPort, "the sandbox gateway's `port` (0: a free one)")
	fs.StringVar(&c.template, "template", "template.yaml", "the SAM template whose tables to create")
	fs.StringVar(&c.envFile, "env-file", "", "write the function's environment to `FILE` instead of standard output")
	fs.StringVar(&c.envHost, "env-host", "", "the `host` the environment's endpoints name (default: the -listen address, or 127.0.0.1 with 0.0.0.0)")
	rest, err := fs.ParseArgs(args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fs.UsageError("unexpected arguments %q", rest)
	}
	if msg := c.check(); msg != "" {
		return fs.UsageError("%s", msg)
	}
	return nil
}

// check validates the flags, filling in -env-host's default, and returns
// what is wrong in a line, or "".
func (c *localCommand) check() string {
	for _, p := range []struct {
		flag string
		port int
	}{{"-moto-port", c.motoPort}, {"-gateway-port", c.gatewayPort}} {
		if p.port < 0 || p.port > 65535 {
			return fmt.Sprintf("%s %d: want a port from 1 to 65535, or 0 for a free one", p.flag, p.port)
		}
	}
	if c.motoPort != 0 && c.motoPort == c.gatewayPort {
		return fmt.Sprintf("-moto-port and -gateway-port are both %d: want two ports", c.motoPort)
	}
	ip := net.ParseIP(c.listen)
	if ip == nil {
		return fmt.Sprintf("-listen %q: want an IP address, such as 127.0.0.1, 172.17.0.1 or 0.0.0.0", c.listen)
	}
	if c.envHost == "" {
		c.envHost = dialHost(ip)
	}
	if !validHost(c.envHost) {
		return fmt.Sprintf("-env-host %q: want a host name or IP address, without scheme or port (host.docker.internal, 172.17.0.1)", c.envHost)
	}
	if c.envFile != "" {
		if info, err := os.Stat(filepath.Dir(c.envFile)); err != nil || !info.IsDir() {
			return fmt.Sprintf("-env-file %s: its folder does not exist", c.envFile)
		}
	}
	return ""
}

// loopback is where the servers listen unless -listen says otherwise.
const loopback = "127.0.0.1"

// dialHost is how this machine reaches a server listening on ip: through
// loopback when it listens on every interface.
func dialHost(ip net.IP) string {
	switch {
	case ip.IsUnspecified() && ip.To4() != nil:
		return loopback
	case ip.IsUnspecified():
		return "::1"
	}
	return ip.String()
}

// validHost accepts an IP address or a DNS name.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Run implements command.
func (c *localCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	l, err := startLocal(ctx, c.localConfig)
	defer l.stop()
	if err != nil {
		return cmdline.CannotRun(err)
	}
	env, err := json.MarshalIndent(map[string]map[string]string{"PaymentFunction": envMap(l.functionEnv(c.envHost))}, "", "  ")
	if err != nil {
		return cmdline.CannotRun(err)
	}
	env = append(env, '\n')

	fmt.Fprintf(c.stderr, "demo local: moto_server (DynamoDB, SQS) on %s, sandbox gateway on %s\n", l.moto.URL, l.gatewayURL)
	fmt.Fprintf(c.stderr, "demo local: table %s created from %s\n", localTables["PaymentsTable"], c.template)
	if ip := net.ParseIP(c.listen); ip.IsUnspecified() {
		fmt.Fprintf(c.stderr, "demo local: listening on every interface (-listen %s): other machines that reach this one reach them too\n", c.listen)
	}
	if c.envFile != "" {
		if err := os.WriteFile(c.envFile, env, 0o644); err != nil {
			return cmdline.CannotRun(err)
		}
		fmt.Fprintf(c.stderr, "demo local: wrote the function's environment (endpoints on %s) to %s\n", c.envHost, c.envFile)
	} else {
		c.stdout.Write(env)
		fmt.Fprintf(c.stderr, "demo local: the function's environment (endpoints on %s) is on standard output; -env-file FILE writes it to a file\n", c.envHost)
	}
	defaultPorts := l.motoPort == defaultMotoPort && l.gatewayPort == defaultGatewayPort
	fmt.Fprintf(c.stderr, "demo local: %s\n", envUse(c.envHost, cmp.Or(c.envFile, "FILE"), defaultPorts))
	fmt.Fprintln(c.stderr, "demo local: Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}

// envUse says what an environment whose endpoints name host, written to
// file, is for. On loopback it is for the tools that run the function on
// this machine: a sam local container has a loopback of its own, and
// reaches this machine only by another name (-env-host) or address
// (-listen). events/env.json is offered for sam local only when the
// servers are on its ports, the defaults.
func envUse(host, file string, defaultPorts bool) string {
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		samFile := ""
		if defaultPorts {
			samFile = "use events/env.json, or "
		}
		return fmt.Sprintf("it is for 'lambdakit invoke -env-file %[1]s' and 'lambdakit run -env-file %[1]s' on this machine, "+
			"not for 'sam local invoke', whose container cannot reach %[2]s here: for that, %[3]swrite a file "+
			"with -env-host host.docker.internal (Docker Desktop) or -listen 172.17.0.1 (Docker on Linux, the bridge's address)",
			file, host, samFile)
	}
	return fmt.Sprintf("it is for 'sam local invoke --env-vars %s', whose container must reach this machine as %s", file, host)
}

// envMap turns KEY=value pairs into a map, for the env file's JSON.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// localConfig says where the local world runs.
type localConfig struct {
	template    string
	listen      string // an IP address
	motoPort    int    // 0: a free port
	gatewayPort int    // 0: a free port
}

// local is moto_server, the sandbox gateway and the tables: the outside
// world of the payment function.
type local struct {
	moto        *motoserver.Server
	db          *dynamodb.Client
	gw          *gateway.Gateway
	gwSrv       *http.Server
	gatewayURL  string // as this machine reaches it
	motoPort    int
	gatewayPort int
}

// portBusyError is a port that something else listens on already.
type portBusyError struct {
	addr string // host:port
	flag string // the flag that changes it
	err  error
}

func (e *portBusyError) Error() string {
	return fmt.Sprintf("%s is in use (by another 'demo local'?); choose another port with %s", e.addr, e.flag)
}

func (e *portBusyError) Unwrap() error { return e.err }

// listenOn listens on host:port, naming flag when the port is taken.
func listenOn(host string, port int, flag string) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, &portBusyError{addr: addr, flag: flag, err: err}
	case err != nil:
		return nil, fmt.Errorf("listen on %s (%s): %w", addr, flag, err)
	}
	return ln, nil
}

// startLocal starts it all. Everything that can be checked without
// starting moto_server is checked first: the template, the tables in it,
// and both ports (the gateway's listener is kept; moto's port is probed
// and freed for moto to take). On error, what was started is stopped by
// stop, which the caller must call either way.
func startLocal(ctx context.Context, c localConfig) (*local, error) {
	l := &local{}
	tables, err := samtemplate.Tables(c.template)
	if err != nil {
		return l, err
	}
	var defs []samtemplate.Table
	for _, logical := range []string{"PaymentsTable"} {
		t, err := samtemplate.Find(tables, logical)
		if err != nil {
			return l, err
		}
		defs = append(defs, t)
	}
	gwLn, err := listenOn(c.listen, c.gatewayPort, "-gateway-port")
	if err != nil {
		return l, fmt.Errorf("sandbox gateway: %w", err)
	}
	l.gatewayPort = gwLn.Addr().(*net.TCPAddr).Port
	l.gw = &gateway.Gateway{}
	l.gwSrv = &http.Server{Handler: l.gw, ReadHeaderTimeout: 5 * time.Second}
	go l.gwSrv.Serve(gwLn)
	l.gatewayURL = "http://" + net.JoinHostPort(dialHost(net.ParseIP(c.listen)), strconv.Itoa(l.gatewayPort))

	if c.motoPort != 0 {
		// A port in use is said plainly, before moto starts. (The probe
		// frees it at once; something else could take it before moto
		// does, which moto then reports.)
		probe, err := listenOn(c.listen, c.motoPort, "-moto-port")
		if err != nil {
			return l, fmt.Errorf("moto_server: %w", err)
		}
		probe.Close()
	}
	// Port 0: motoserver picks a free one, and another if it is taken
	// before moto binds it.
	if l.moto, err = motoserver.StartAt(c.listen, c.motoPort); err != nil {
		return l, err
	}
	l.motoPort = l.moto.Port
	l.db = dynamodb.NewFromConfig(l.moto.AWSConfig())
	for i, logical := range []string{"PaymentsTable"} {
		if err := defs[i].Create(ctx, l.db, localTables[logical]); err != nil {
			return l, err
		}
	}
	return l, nil
}

// functionEnv points the payment function at the local world through host,
// with static test credentials and no instance metadata lookups.
func (l *local) functionEnv(host string) []string {
	url := func(port int) string { return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) }
	return append(motoserver.Env(url(l.motoPort)),
		"PAYMENTS_TABLE="+localTables["PaymentsTable"],
		"PAYMENT_GATEWAY_URL="+url(l.gatewayPort),
		// No queues here: invalid payments fail as other failures do.
		// Set, so that sam local does not pass the template's value,
		// a queue in AWS.
		"DEAD_LETTER_QUEUE_URL=",
	)
}

func (l *local) stop() {
	if l == nil {
		return
	}
	if l.gwSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.gwSrv.Shutdown(ctx)
		cancel()
	}
	l.moto.Stop()
}
