package main_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"gopkg.in/yaml.v3"

	"github.com/lambdakit/lambdakit/internal/samtemplate"
	"github.com/lambdakit/lambdakit/internal/testenv"
)

// startLocal starts demo local with args in the background; see start.
func startLocal(t *testing.T, args ...string) *demoRun {
	t.Helper()
	return start(t, nil, append([]string{"local"}, args...)...)
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
	r := startLocal(t, "-moto-port", "0", "-gateway-port", "0", "-template", "../../../template.yaml", "-env-file", path)
	r.waitReady(t)

	env := readEnvFile(t, path)["PaymentFunction"]
	if env == nil {
		t.Fatalf("%s has no PaymentFunction section", path)
	}
	for k, want := range map[string]string{
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
	for _, table := range []string{"lambdakit-payments"} {
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
	// Endpoints on 127.0.0.1 are for the tools on this machine: a sam
	// local container cannot reach them, and the message says what can.
	for _, want := range []string{
		"for 'lambdakit invoke -env-file " + path + "'",
		"not for 'sam local invoke'",
		"-env-host host.docker.internal",
		"-listen 172.17.0.1",
	} {
		if !strings.Contains(r.stderr.String(), want) {
			t.Errorf("stderr:\n%s\nwant it to say %q", r.stderr.String(), want)
		}
	}
	// events/env.json names the default ports, not these free ones.
	if strings.Contains(r.stderr.String(), "events/env.json") {
		t.Errorf("stderr offers events/env.json, whose ports are not the ones in use:\n%s", r.stderr.String())
	}
	if strings.Contains(r.stderr.String(), "sam local invoke --env-vars "+path) {
		t.Errorf("stderr offers %s to sam local invoke, whose container cannot reach 127.0.0.1:\n%s", path, r.stderr.String())
	}

	r.interrupt(t)
	if r.code != 0 {
		t.Errorf("exit status after SIGINT = %d; want 0", r.code)
	}
	for _, port := range []int{motoPort, gwPort} {
		if addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)); testenv.Reachable(addr) {
			t.Errorf("%s still answers after demo local stopped", addr)
		}
	}
}

func TestLocalPrintsOnlyTheEnvironmentOnStdout(t *testing.T) {
	testenv.RequireMotoServer(t)
	r := startLocal(t, "-moto-port", "0", "-gateway-port", "0", "-template", "../../../template.yaml")
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
			r := startLocal(t, append(c.listen, "-moto-port", "0", "-gateway-port", "0", "-template", "../../../template.yaml", "-env-file", path)...)
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

// events/env.json is what `demo local -env-host host.docker.internal`
// writes with the default ports, for every variable it sets, and sam local
// passes each of them, since template.yaml declares them all.
func TestEventsEnvJSONMatchesLocal(t *testing.T) {
	testenv.RequireMotoServer(t)
	path := filepath.Join(t.TempDir(), "sam-env.json")
	r := startLocal(t, "-env-host", "host.docker.internal", "-moto-port", "0", "-gateway-port", "0",
		"-template", "../../../template.yaml", "-env-file", path)
	r.waitReady(t)
	written := readEnvFile(t, path)["PaymentFunction"]
	// An environment that names host.docker.internal is for sam local.
	if want := "it is for 'sam local invoke --env-vars " + path + "'"; !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr:\n%s\nwant it to say %q", r.stderr.String(), want)
	}
	// The ports the file would name with the defaults, which -h shows.
	help := demo(t, nil, "local", "-h")
	for _, want := range []string{"moto_server's port (0: a free one) (default 7460)", "the sandbox gateway's port (0: a free one) (default 7461)"} {
		if !strings.Contains(help.stderr.String(), want) {
			t.Fatalf("local -h does not say %q:\n%s", want, help.stderr.String())
		}
	}
	_, motoPort := endpoint(t, written["AWS_ENDPOINT_URL"])
	_, gwPort := endpoint(t, written["PAYMENT_GATEWAY_URL"])
	written["AWS_ENDPOINT_URL"] = strings.Replace(written["AWS_ENDPOINT_URL"], ":"+strconv.Itoa(motoPort), ":7460", 1)
	written["PAYMENT_GATEWAY_URL"] = strings.Replace(written["PAYMENT_GATEWAY_URL"], ":"+strconv.Itoa(gwPort), ":7461", 1)

	shipped := readEnvFile(t, "../../../events/env.json")
	if len(shipped) != 1 || shipped["PaymentFunction"] == nil {
		t.Fatalf("events/env.json has sections %v; want PaymentFunction alone", shipped)
	}
	declared := templateVariables(t, "../../../template.yaml", "PaymentFunction")
	for k, v := range shipped["PaymentFunction"] {
		if got, ok := written[k]; !ok || got != v {
			t.Errorf("events/env.json: %s = %q; demo local writes %q (set: %v)", k, v, got, ok)
		}
		if !declared[k] {
			t.Errorf("events/env.json sets %s, which template.yaml does not declare: sam local would not pass it", k)
		}
	}
	for _, k := range []string{"AWS_ENDPOINT_URL", "PAYMENT_GATEWAY_URL", "PAYMENTS_TABLE"} {
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
			r := demo(t, nil, "local", c.busy, port, c.free, "0", "-template", "../../../template.yaml")
			stderr := r.stderr.String()
			if r.code != 3 {
				t.Errorf("exit status %d; want 3", r.code)
			}
			for _, want := range []string{"127.0.0.1:" + port + " is in use", "choose another port with " + c.busy} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr:\n%s\nwant %q", stderr, want)
				}
			}
			if strings.Contains(stderr, "moto_server (Python") {
				t.Errorf("moto_server was started:\n%s", stderr)
			}
		})
	}
}

// The default ports stay clear of the ones that other programs on a
// developer's machine commonly hold: macOS's AirPlay Receiver (5000,
// 7000), HTTP proxies and dev servers (3000, 8000, 8080, 8443, 8888, 9000),
// LocalStack (4566), DynamoDB Local (8000). The services this machine
// names in /etc/services are checked too.
func TestLocalDefaultPortsAvoidCommonServices(t *testing.T) {
	help := demo(t, nil, "local", "-h").stderr.String()
	var ports []int
	for _, flag := range []string{"moto_server's port (0: a free one) (default ", "the sandbox gateway's port (0: a free one) (default "} {
		_, rest, ok := strings.Cut(help, flag)
		digits, _, _ := strings.Cut(rest, ")")
		port, err := strconv.Atoi(digits)
		if !ok || err != nil {
			t.Fatalf("local -h has no %q with a number:\n%s", flag, help)
		}
		ports = append(ports, port)
	}
	taken := map[int]string{3000: "dev servers", 4566: "LocalStack", 5000: "AirPlay Receiver (macOS), UPnP", 5001: "AirPlay",
		7000: "AirPlay Receiver (macOS)", 8000: "DynamoDB Local, dev servers", 8080: "HTTP proxies, dev servers", 8443: "HTTPS alternate",
		8888: "Jupyter", 9000: "PHP-FPM, MinIO"}
	if b, err := os.ReadFile("/etc/services"); err == nil {
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) < 2 || strings.HasPrefix(f[0], "#") {
				continue
			}
			if p, proto, ok := strings.Cut(f[1], "/"); ok && proto == "tcp" {
				if n, err := strconv.Atoi(p); err == nil {
					taken[n] = f[0] + " (/etc/services)"
				}
			}
		}
	}
	for _, p := range ports {
		if who, ok := taken[p]; ok {
			t.Errorf("default port %d is %s's", p, who)
		}
		if p < 1024 || p >= 32768 {
			t.Errorf("default port %d: want 1024-32767, below the ports systems hand out to outgoing connections", p)
		}
	}
}
