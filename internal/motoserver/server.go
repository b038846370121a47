// Package motoserver starts and stops a local moto_server, which plays
// DynamoDB and SQS on one loopback port, for the tests (through
// internal/testenv) and the local demo.
//
// moto's server runs through a small launcher (launcher.py, embedded) that
// keeps the cost of TransactWriteItems independent of table size; with a
// moto version it was not written for, it runs plain moto, and Start warns
// in one line on standard error, naming the version found and the one
// supported.
package motoserver

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/lambdakit/lambdakit/internal/childproc"
)

// ErrNotInstalled means moto_server is neither on PATH nor in the project's
// virtual environment. Test runs skip integration tests on it, except under
// CI.
var ErrNotInstalled = errors.New("motoserver: moto_server not found on PATH or in .venv (run 'make deps', or: pip install '" + pipRequirement() + "')")

// venvDir is the virtual environment, under the module's root, into which
// `make deps` installs moto when the machine has none.
const venvDir = ".venv"

// installation is the moto that Start runs.
type installation struct {
	server string // the moto_server program
	// python is the interpreter of that installation: a launcher that
	// imports moto must use this one, not whichever python3 is first on
	// PATH, or it would not find the moto that server belongs to.
	python string
}

// findMoto decides which moto runs: moto_server on PATH, else the one in
// the virtual environment `make deps` makes (.venv/bin under the root of
// the module holding the working directory, so that a plain `go test`
// after `make deps` finds it too). Its Python is the python3 beside
// moto_server (a virtual environment's bin, or pyenv's shims), else python3
// on PATH. It is the one place that makes this choice.
func findMoto() (installation, error) {
	server, err := exec.LookPath("moto_server")
	if err != nil {
		server = venvProgram("moto_server")
	}
	if server == "" {
		return installation{}, ErrNotInstalled
	}
	return installationOf(server), nil
}

// installationOf is the moto installation whose server is at server. Its
// Python is the one the moto_server script names in its #! line (pip
// writes an absolute path there), else the python3 beside it, else python3
// on PATH (where a pyenv or asdf shim, a shell script, leads too).
func installationOf(server string) installation {
	python := shebangPython(server)
	if python == "" {
		python = filepath.Join(filepath.Dir(server), "python3")
		if _, err := exec.LookPath(python); err != nil {
			if python, err = exec.LookPath("python3"); err != nil {
				python = ""
			}
		}
	}
	return installation{server: server, python: python}
}

// Installed returns ErrNotInstalled when Start would find no moto_server,
// so that callers can skip what needs one before starting anything.
func Installed() error {
	_, err := findMoto()
	return err
}

// venvProgram returns the path of name in venvDir/bin under the module
// root above the working directory, or "" when there is none.
func venvProgram(name string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, venvDir, "bin", name)
			if _, err := exec.LookPath(p); err != nil {
				return ""
			}
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// How long Start waits for a fresh moto_server to answer, and how long Stop
// waits for it to exit politely before killing it. Both are bounds, not
// sleeps: a healthy server answers in a second or two.
const (
	startTimeout = 20 * time.Second
	stopTimeout  = 5 * time.Second
)

// Region is the region every local config and child process uses.
const Region = "us-east-1"

// Server is a moto_server process listening on loopback.
type Server struct {
	// URL is the server's endpoint, e.g. "http://127.0.0.1:40123".
	URL string
	// PID is the process id of moto_server; it also leads its own process
	// group, so that Stop can take any children down with it.
	PID int
	// Port is the port it listens on.
	Port int

	cmd      *exec.Cmd
	exited   <-chan struct{} // closed once cmd.Wait has returned
	waitErr  func() error    // cmd.Wait's result, once exited is closed
	out      *tail
	stopOnce sync.Once
}

// Start starts moto_server on a free loopback port and waits until it
// answers HTTP. The caller must Stop it. Start returns ErrNotInstalled when
// there is no moto_server (see findMoto).
//
// The server is moto_server's own, started through the launcher with the
// Python of that installation (see launcher.py).
func Start() (*Server, error) {
	return StartAt(loopback, 0)
}

// StartOn starts moto_server on the given loopback port, for a fixed
// address that other tools are configured with.
func StartOn(port int) (*Server, error) {
	return StartAt(loopback, port)
}

// StartAt starts moto_server listening on host (an IP address) and port,
// for a server that containers must reach too; port 0 picks a free one
// (tried up to three times, should another process take it first). Its URL
// is on loopback when host is an unspecified address (0.0.0.0, ::), on
// host otherwise.
func StartAt(host string, port int) (*Server, error) {
	moto, err := findMoto()
	if err != nil {
		return nil, err
	}
	c := newCommand(moto)
	if port != 0 {
		s, _, err := start(c, host, port)
		return s, err
	}
	// The free port is only free when we look: another process may take it
	// before moto binds it. moto then exits at once, and a new port is
	// worth a try. A server that hangs is not retried, so that the whole
	// call stays bounded.
	var errs []error
	for range 3 {
		port, err := freePort(host)
		if err != nil {
			return nil, err
		}
		s, early, err := start(c, host, port)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if !early {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// loopback is the address servers listen on unless told otherwise.
const loopback = "127.0.0.1"

// start makes one attempt; early reports that moto exited before it
// answered (likely a port taken in the meantime).
func start(c command, host string, port int) (s *Server, early bool, err error) {
	cmd := exec.Command(c.path, append(slices.Clone(c.args), "-H", host, "-p", strconv.Itoa(port))...)
	if c.script != "" {
		cmd.Stdin = strings.NewReader(c.script)
	}
	out := &tail{head: 4 << 10, max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// moto's output is copied through pipes; without a bound, Wait would
	// block for as long as any straggling child keeps them open.
	cmd.WaitDelay = time.Second
	s = &Server{
		URL:  "http://" + net.JoinHostPort(dialHost(host), strconv.Itoa(port)),
		Port: port,
		cmd:  cmd,
		out:  out,
	}
	exited, waitErr, err := childproc.Start(cmd)
	if err != nil {
		return nil, false, fmt.Errorf("motoserver: starting moto_server: %w", err)
	}
	s.exited, s.waitErr = exited, waitErr
	s.PID = cmd.Process.Pid
	if err := s.waitReady(startTimeout); err != nil {
		early = s.hasExited()
		s.Stop()
		return nil, early, fmt.Errorf("motoserver: %s %s on %s: %w; its output:\n%s", c.path, strings.Join(c.args, " "), s.URL, err, out.String())
	}
	// One line at most: the warning about an unsupported moto, which also
	// says that plain moto runs, else why plain moto runs, if it does.
	if line := cmp.Or(versionWarning(foundVersion(out.String()), c.server), c.notice, fallbackLine(out.String())); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	return s, false, nil
}

// dialHost is the address to reach a server listening on host: loopback
// for an unspecified address, which listens on every interface.
func dialHost(host string) string {
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			return loopback
		}
		return "::1"
	}
	return host
}

// freePort is a port free on host when it looks.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("motoserver: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) hasExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// waitReady polls until the server answers any HTTP request at all (moto
// answers unknown paths too) and the answer is its own: its process holds
// the listening socket (listensOn).
func (s *Server) waitReady(timeout time.Duration) error {
	client := &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.URL + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			if listensOn(s.PID, s.Port) {
				return nil
			}
			err = errors.New("another process answers on the port")
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited before answering: %v", s.waitErr())
		case <-deadline.C:
			return fmt.Errorf("no answer within %v: %v", timeout, err)
		case <-tick.C:
		}
	}
}

// Stop terminates the server and its process group, kills them if they do
// not exit within a few seconds, and waits for the server to exit. It is
// safe to call more than once and on a server that has already exited.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		childproc.Signal(s.cmd, false)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			childproc.Signal(s.cmd, true)
			<-s.exited // SIGKILL cannot be ignored, and WaitDelay bounds the pipes.
		}
		// The leader is gone; make sure nothing it started lingers.
		childproc.Signal(s.cmd, true)
	})
}

// Output returns the start and the tail of what moto_server printed, for
// diagnosing a failing test. The start holds the launcher's lines, which say
// whether and how it patched moto; a busy server's request log soon pushes
// them out of the tail.
func (s *Server) Output() string { return s.out.String() }

// tail keeps the first head bytes written to it and the last max bytes.
type tail struct {
	mu        sync.Mutex
	head, max int
	start     []byte
	buf       []byte
	dropped   bool // bytes were lost between start and buf
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := t.head - len(t.start); room > 0 {
		k := min(room, len(p))
		t.start, p = append(t.start, p[:k]...), p[k:]
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.dropped = true
	}
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	gap := ""
	if t.dropped {
		gap = "\n[...]\n"
	}
	return string(t.start) + gap + string(t.buf)
}

// Env returns the environment, as KEY=value pairs, that points the AWS SDK
// of a process at endpoint with static test credentials and no shared
// config files, and disables the EC2 metadata lookup. The tests and the demo
// set it for every process they start.
func Env(endpoint string) []string {
	return []string{
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_REGION=" + Region,
		"AWS_DEFAULT_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL=" + endpoint,
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	}
}

// AWSConfig returns an AWS config that talks to s only; see Config.
func (s *Server) AWSConfig() aws.Config { return Config(s.URL) }

// Config returns an AWS config that talks to endpoint only: static test
// credentials, Region, endpoint as the endpoint of every service, no
// shared config files or environment read (so no credential chain and no
// EC2 metadata lookup), bounded requests and retries.
func Config(endpoint string) aws.Config {
	// Built by hand rather than with config.LoadDefaultConfig, so that
	// nothing from the developer's environment or ~/.aws can creep in.
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient: awshttp.NewBuildableClient().
			WithTimeout(10 * time.Second).
			WithTransportOptions(func(t *http.Transport) { t.Proxy = nil }),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 3
				o.MaxBackoff = 200 * time.Millisecond
				// The default token bucket would start refusing retries
				// when many tests hammer one server at once.
				o.RateLimiter = ratelimit.None
			})
		},
	}
}

// listensOn reports whether the process group led by pid (moto and any
// child it runs) holds a socket listening on TCP port, read from /proc
// (Linux): so that an answer on the port is known to be this server's,
// not another process's that took the port between freePort and moto's
// bind (moto then exits, but only once Python has started, after the
// other server has answered). Where /proc cannot say, it reports true,
// and the answer is taken as before.
func listensOn(pid, port int) bool {
	inodes := map[string]bool{}
	known := false
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		known = true
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			// local_address is HEX_IP:HEX_PORT; state 0A is LISTEN.
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			if _, hexPort, ok := strings.Cut(f[1], ":"); ok {
				if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port {
					inodes["socket:["+f[9]+"]"] = true
				}
			}
		}
	}
	if !known {
		return true
	}
	for _, member := range childproc.Group(pid) {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", member.PID))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", member.PID, fd.Name())); err == nil && inodes[target] {
				return true
			}
		}
	}
	return false
}
