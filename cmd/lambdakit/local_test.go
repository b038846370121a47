package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"gopkg.in/yaml.v3"

	"github.com/lambdakit/lambdakit/internal/logline"
	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// localRun is a `lambdakit local` running in the background.
type localRun struct {
	cmd            *exec.Cmd
	stdout, stderr *logline.Buffer
	exited         chan struct{}
	code           int
}

// startLocalCLI starts `lambdakit local args...` and stops it with Ctrl-C's
// signal at the end of the test, if it is still running.
func startLocalCLI(t *testing.T, args ...string) *localRun {
	t.Helper()
	cli, _ := binaries(t)
	r := &localRun{stdout: &logline.Buffer{}, stderr: &logline.Buffer{}, exited: make(chan struct{})}
	r.cmd = exec.Command(cli, append([]string{"local"}, args...)...)
	r.cmd.Env = append(os.Environ(), "AWS_EC2_METADATA_DISABLED=true")
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		r.code = r.cmd.ProcessState.ExitCode()
		close(r.exited)
	}()
	t.Cleanup(func() { r.interrupt(t) })
	return r
}

// interrupt sends SIGINT and waits, 15 s at most, for the command to end.
func (r *localRun) interrupt(t *testing.T) {
	t.Helper()
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(15 * time.Second):
		r.cmd.Process.Kill()
		<-r.exited
		t.Errorf("lambdakit local did not stop within 15s of SIGINT; stderr:\n%s", r.stderr.String())
	}
}

// waitReady waits, 60 s at most, until the command says it is ready.
func (r *localRun) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(r.stderr.String(), "Ctrl-C stops everything") {
		select {
		case <-r.exited:
			t.Fatalf("lambdakit local exited with status %d before it was ready; stderr:\n%s", r.code, r.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("lambdakit local not ready within 60s; stderr:\n%s", r.stderr.String())
		}
	}
}

// envFile is the file 'sam local invoke --env-vars' and 'lambdakit invoke
// -env-file' read.
type envFile map[string]map[string]string

func readEnvFile(t *testing.T, path string) envFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env envFile
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	return env
}

// endpoint splits an endpoint URL of the env file into host and port.
func endpoint(t *testing.T, raw string) (host string, port int) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		t.Fatalf("endpoint %q: want http://HOST:PORT", raw)
	}
	port, err = strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return u.Hostname(), port
}

func TestLocalWritesTheEnvFileAndPrintsNothingElse(t *testing.T) {
	testenv.RequireMotoServer(t)
	path := filepath.Join(t.TempDir(), "local-env.json")
	r := startLocalCLI(t, "-moto-port", "0", "-gateway-port", "0", "-template", "../../template.yaml", "-env-file", path)
	r.waitReady(t)

	env := readEnvFile(t, path)["PaymentFunction"]
	if env == nil {
		t.Fatalf("%s has no PaymentFunction section", path)
	}
	for k, want := range map[string]string{
		"IDEMPOTENCY_TABLE":         "lambdakit-idempotency",
		"PAYMENTS_TABLE":            "lambdakit-payments",
		"AWS_ACCESS_KEY_ID":         "test",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		if got := env[k]; got != want {
			t.Errorf("%s = %q; want %q", k, got, want)
		}
	}
	motoHost, motoPort := endpoint(t, env["AWS_ENDPOINT_URL"])
	gwHost, gwPort := endpoint(t, env["PAYMENT_GATEWAY_URL"])
	if motoHost != "127.0.0.1" || gwHost != "127.0.0.1" {
		t.Errorf("endpoints on %s and %s; want 127.0.0.1, the default -listen", motoHost, gwHost)
	}

	// The endpoints are the real ones: the tables are there, the gateway
	// answers.
	db := dynamodb.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(env["AWS_ENDPOINT_URL"]),
	})
	out, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables on %s: %v", env["AWS_ENDPOINT_URL"], err)
	}
	for _, table := range []string{"lambdakit-idempotency", "lambdakit-payments"} {
		if !slices.Contains(out.TableNames, table) {
			t.Errorf("tables %v; want %s among them", out.TableNames, table)
		}
	}
	resp, err := http.Get(env["PAYMENT_GATEWAY_URL"] + "/charges/none")
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	resp.Body.Close()

	if got := r.stdout.String(); got != "" {
		t.Errorf("stdout = %q; want nothing when -env-file names the file", got)
	}
	if !strings.Contains(r.stderr.String(), "wrote the function's environment") {
		t.Errorf("stderr does not say where the environment went:\n%s", r.stderr.String())
	}

	r.interrupt(t)
	if r.code != 0 {
		t.Errorf("exit status after SIGINT = %d; want 0", r.code)
	}
	for _, port := range []int{motoPort, gwPort} {
		if addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); testenv.Reachable(addr) {
			t.Errorf("%s still answers after lambdakit local stopped", addr)
		}
	}
}

func TestLocalPrintsOnlyTheEnvironmentOnStdout(t *testing.T) {
	testenv.RequireMotoServer(t)
	r := startLocalCLI(t, "-moto-port", "0", "-gateway-port", "0", "-template", "../../template.yaml")
	r.waitReady(t)
	var env envFile
	if err := json.Unmarshal([]byte(r.stdout.String()), &env); err != nil {
		t.Fatalf("stdout is not the environment's JSON alone: %v\n%s", err, r.stdout.String())
	}
	if env["PaymentFunction"]["PAYMENTS_TABLE"] != "lambdakit-payments" {
		t.Errorf("stdout = %s; want the PaymentFunction environment", r.stdout.String())
	}
}

// The listen address decides who can connect. 127.0.0.2 is loopback too,
// so the test can tell "every interface" from "127.0.0.1 only" without
// leaving this machine: only a wildcard listener accepts there.
func TestLocalListenAddress(t *testing.T) {
	testenv.RequireMotoServer(t)
	for _, c := range []struct {
		name      string
		listen    []string
		wantOther bool   // whether 127.0.0.2 reaches the servers
		wantHost  string // the env file's endpoints
	}{
		{"default is loopback only", nil, false, "127.0.0.1"},
		{"0.0.0.0 is every interface", []string{"-listen", "0.0.0.0"}, true, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "env.json")
			r := startLocalCLI(t, append(c.listen, "-moto-port", "0", "-gateway-port", "0", "-template", "../../template.yaml", "-env-file", path)...)
			r.waitReady(t)
			env := readEnvFile(t, path)["PaymentFunction"]
			for _, v := range []string{"AWS_ENDPOINT_URL", "PAYMENT_GATEWAY_URL"} {
				host, port := endpoint(t, env[v])
				if host != c.wantHost {
					t.Errorf("%s host = %s; want %s", v, host, c.wantHost)
				}
				if !testenv.Reachable(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))) {
					t.Errorf("%s: nothing answers on 127.0.0.1:%d", v, port)
				}
				if got := testenv.Reachable(net.JoinHostPort("127.0.0.2", strconv.Itoa(port))); got != c.wantOther {
					t.Errorf("%s: 127.0.0.2:%d reachable = %t; want %t", v, port, got, c.wantOther)
				}
			}
		})
	}
}

// events/env.json is what `lambdakit local -env-host host.docker.internal`
// writes with the default ports, for every variable it sets, and sam local
// passes each of them, since template.yaml declares them all.
func TestEventsEnvJSONMatchesLocal(t *testing.T) {
	testenv.RequireMotoServer(t)
	path := filepath.Join(t.TempDir(), "sam-env.json")
	r := startLocalCLI(t, "-env-host", "host.docker.internal", "-moto-port", "0", "-gateway-port", "0",
		"-template", "../../template.yaml", "-env-file", path)
	r.waitReady(t)
	written := readEnvFile(t, path)["PaymentFunction"]
	// The ports the file would name with the defaults, which -h shows.
	help := lambdakit(t, nil, "local", "-h")
	for _, want := range []string{"moto_server's port (0: a free one) (default 5000)", "the sandbox gateway's port (0: a free one) (default 8080)"} {
		if !strings.Contains(help.stderr, want) {
			t.Fatalf("local -h does not say %q:\n%s", want, help.stderr)
		}
	}
	_, motoPort := endpoint(t, written["AWS_ENDPOINT_URL"])
	_, gwPort := endpoint(t, written["PAYMENT_GATEWAY_URL"])
	written["AWS_ENDPOINT_URL"] = strings.Replace(written["AWS_ENDPOINT_URL"], ":"+strconv.Itoa(motoPort), ":5000", 1)
	written["PAYMENT_GATEWAY_URL"] = strings.Replace(written["PAYMENT_GATEWAY_URL"], ":"+strconv.Itoa(gwPort), ":8080", 1)

	shipped := readEnvFile(t, "../../events/env.json")
	if len(shipped) != 1 || shipped["PaymentFunction"] == nil {
		t.Fatalf("events/env.json has sections %v; want PaymentFunction alone", shipped)
	}
	declared := templateVariables(t, "../../template.yaml", "PaymentFunction")
	for k, v := range shipped["PaymentFunction"] {
		if got, ok := written[k]; !ok || got != v {
			t.Errorf("events/env.json: %s = %q; lambdakit local writes %q (set: %v)", k, v, got, ok)
		}
		if !declared[k] {
			t.Errorf("events/env.json sets %s, which template.yaml does not declare: sam local would not pass it", k)
		}
	}
	for _, k := range []string{"AWS_ENDPOINT_URL", "PAYMENT_GATEWAY_URL", "IDEMPOTENCY_TABLE", "PAYMENTS_TABLE"} {
		if _, ok := shipped["PaymentFunction"][k]; !ok {
			t.Errorf("events/env.json does not set %s", k)
		}
	}
}

// templateVariables returns the environment variables template.yaml
// declares for the function.
func templateVariables(t *testing.T, path, function string) map[string]bool {
	t.Helper()
	res, err := samtemplate.Resources(path)
	if err != nil {
		t.Fatal(err)
	}
	var props struct {
		Environment struct {
			Variables map[string]yaml.Node `yaml:"Variables"`
		} `yaml:"Environment"`
	}
	fn := res[function]
	if err := fn.Properties.Decode(&props); err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for k := range props.Environment.Variables {
		vars[k] = true
	}
	if len(vars) == 0 {
		t.Fatalf("%s declares no variables for %s", path, function)
	}
	return vars
}

func TestLocalRefusesBadInputBeforeStartingAnything(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"port too large", []string{"-moto-port", "99999"}, "-moto-port 99999: want a port from 1 to 65535"},
		{"negative port", []string{"-gateway-port", "-1"}, "-gateway-port -1: want a port"},
		{"one port for both", []string{"-moto-port", "5055", "-gateway-port", "5055"}, "both 5055"},
		{"port not a number", []string{"-moto-port", "fivethousand"}, `invalid value "fivethousand" for flag -moto-port`},
		{"listen not an IP address", []string{"-listen", "my-laptop"}, `-listen "my-laptop": want an IP address`},
		{"env host with a scheme", []string{"-env-host", "http://host.docker.internal"}, "-env-host"},
		{"env file in no folder", []string{"-env-file", filepath.Join(dir, "nope", "env.json")}, "its folder does not exist"},
		{"an argument", []string{"extra"}, `unexpected arguments ["extra"]`},
		{"unknown flag", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append([]string{"local"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, c.want)
			}
			checkShortUsage(t, r, "local")
		})
	}
}

// checkShortUsage checks that a usage error is told in a few lines that
// say where the full usage is, and nothing goes to standard output.
func checkShortUsage(t *testing.T, r cliResult, command string) {
	t.Helper()
	if n := strings.Count(r.stderr, "\n"); n > 3 {
		t.Errorf("usage error in %d lines; want 3 at most:\n%s", n, r.stderr)
	}
	if want := "Run 'lambdakit " + command + " -h'"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr:\n%s\nwant it to say %q", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q; want nothing", r.stdout)
	}
}

// A port already taken fails at once, naming the port and the flag that
// changes it, before moto_server starts.
func TestLocalBusyPort(t *testing.T) {
	testenv.RequireMotoServer(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	for _, c := range []struct{ busy, free string }{{"-moto-port", "-gateway-port"}, {"-gateway-port", "-moto-port"}} {
		t.Run(c.busy, func(t *testing.T) {
			r := lambdakit(t, nil, "local", c.busy, port, c.free, "0", "-template", "../../template.yaml")
			if r.code != 3 {
				t.Errorf("exit status %d; want 3", r.code)
			}
			for _, want := range []string{"127.0.0.1:" + port + " is in use", "choose another port with " + c.busy} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr:\n%s\nwant %q", r.stderr, want)
				}
			}
			if strings.Contains(r.stderr, "moto_server (Python") {
				t.Errorf("moto_server was started:\n%s", r.stderr)
			}
		})
	}
}

// Every command tells a usage error in the short form, before it starts
// anything: none of these reaches an AWS endpoint or starts a server.
func TestUsageErrorsAreShort(t *testing.T) {
	_, echo := binaries(t)
	ev := writeFile(t, t.TempDir(), "event.json", `{}`)
	const queue = "http://127.0.0.1:1/123456789012/orders"
	for _, c := range []struct {
		name    string
		command string
		args    []string
		want    string
	}{
		{"invoke unknown flag", "invoke", []string{"-frobnicate", echo, ev}, "flag provided but not defined: -frobnicate"},
		{"invoke flag after the arguments", "invoke", []string{echo, ev, "-timeout", "5s"}, "flag -timeout after the arguments"},
		{"invoke missing value", "invoke", []string{"-timeout"}, "flag needs an argument: -timeout"},
		{"demo unknown flag", "demo", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"demo flag after the arguments", "demo", []string{ev, "-v"}, "flag -v after the arguments"},
		{"run unknown flag", "run", []string{"-frobnicate", echo}, "flag provided but not defined: -frobnicate"},
		{"run flag after the arguments", "run", []string{"-queue", queue, echo, "-until-empty"}, "flag -until-empty after the arguments"},
		{"local unknown flag", "local", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"local flag after the arguments", "local", []string{"extra", "-listen", "127.0.0.1"}, "flag -listen after the arguments"},
		{"publish unknown flag", "publish", []string{"-frobnicate", ev}, "flag provided but not defined: -frobnicate"},
		{"publish flag after the arguments", "publish", []string{"-queue", queue, ev, "-max-size", "5"}, "flag -max-size after the arguments"},
		{"records unknown flag", "records", []string{"get", "-frobnicate", "k"}, "flag provided but not defined: -frobnicate"},
		{"records flag after the arguments", "records", []string{"get", "-table", "t", "k", "-prefix", "p"}, "flag -prefix after the arguments"},
		{"records without an action", "records", nil, "want get, delete or stuck"},
		{"redrive unknown flag", "redrive", []string{"-frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"redrive flag after the arguments", "redrive", []string{"-from", queue, "extra", "-to", queue + "2"}, "flag -to after the arguments"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append([]string{c.command}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, c.want)
			}
			checkShortUsage(t, r, c.command)
		})
	}
}

// "--" lets an argument start with "-"; "-" alone is standard input.
func TestInvokeDashArguments(t *testing.T) {
	_, echo := binaries(t)
	dir := t.TempDir()
	writeFile(t, dir, "-event.json", `{"n": 1}`)
	cli, _ := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "invoke", "-timeout", "10s", "--", echo, "-event.json", "-")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(`{"n": 2}`)
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		t.Fatalf("exit status %d; stderr:\n%s", exitErr.ExitCode(), exitErr.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	if got := len(outputs(t, string(out))); got != 2 {
		t.Errorf("%d results; want 2 (the file named -event.json, then standard input)\n%s", got, out)
	}
}

func TestDemoChecksItsInputsBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	notEvent := writeFile(t, dir, "bad.json", `[1, 2]`)
	_, echo := binaries(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no bootstrap", []string{"-bootstrap", filepath.Join(dir, "nope")}, "build it with 'make build'"},
		{"missing event", []string{"-bootstrap", echo, filepath.Join(dir, "nope.json")}, "nope.json"},
		{"not an SQS event", []string{"-bootstrap", echo, notEvent}, "want an SQS event"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := lambdakit(t, nil, append([]string{"demo"}, c.args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant 2 and %q", r.code, r.stderr, c.want)
			}
			if strings.Contains(r.stdout, "moto_server") {
				t.Errorf("the demo started:\n%s", r.stdout)
			}
		})
	}
}
