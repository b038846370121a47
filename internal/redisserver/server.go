// Package redisserver starts and stops real redis-server (or
// valkey-server) processes on loopback for the tests: one server, or a
// three-node cluster, each on a free port, each stopped by its process id.
// Proxy puts a TCP proxy between a client and a server that can lose an
// answer after its command took effect.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lambdakit/lambdakit/internal/childproc"
)

// ErrNotInstalled means neither redis-server nor valkey-server is on PATH.
var ErrNotInstalled = errors.New("redisserver: neither redis-server nor valkey-server on PATH (run 'make deps', or: apt-get install redis-server)")

// How long Start waits for a fresh server to answer PING, and how long Stop
// waits for it to exit after SIGTERM before killing it. Bounds, not sleeps:
// redis-server answers within milliseconds.
const (
	startTimeout = 10 * time.Second
	stopTimeout  = 5 * time.Second
)

// program returns the server to run: valkey-server first, else
// redis-server.
func program() (string, error) {
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNotInstalled
}

// Installed returns ErrNotInstalled when Start would find no server.
func Installed() error {
	_, err := program()
	return err
}

// Server is one server process listening on 127.0.0.1.
type Server struct {
	// Addr is "127.0.0.1:<port>".
	Addr string
	// PID is the server's process id; the process leads its own group.
	PID int

	port    int
	args    []string
	dir     string
	cmd     *exec.Cmd
	exited  <-chan struct{}
	waitErr func() error
	out     *bytes.Buffer
	mu      sync.Mutex // guards the fields above against Restart
}

// Start starts a server on a free loopback port with no persistence, plus
// the configuration directives in args (such as "--appendonly", "yes"),
// and waits until it answers PING. Its files go to a directory of its own,
// which Stop removes. The caller must Stop it.
func Start(args ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "lambdakit-redis-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	var errs []error
	// A free port is only free when we look; a server that lost it exits
	// at once, and another port is worth a try.
	for range 3 {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, args: args, dir: dir}
		if err := s.start(); err != nil {
			errs = append(errs, err)
			continue
		}
		return s, nil
	}
	os.RemoveAll(dir)
	return nil, errors.Join(errs...)
}

func (s *Server) start() error {
	path, err := program()
	if err != nil {
		return err
	}
	argv := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--maxmemory-policy", "noeviction",
	}, s.args...)
	cmd := exec.Command(path, argv...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: out, mu: &s.mu}, &lockedWriter{w: out, mu: &s.mu}
	cmd.WaitDelay = time.Second
	exited, waitErr, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("redisserver: starting %s: %w", path, err)
	}
	s.mu.Lock()
	s.cmd, s.exited, s.waitErr, s.out, s.PID = cmd, exited, waitErr, out, cmd.Process.Pid
	s.mu.Unlock()
	if err := s.waitReady(); err != nil {
		s.stop()
		return fmt.Errorf("redisserver: %s on %s: %w; its output:\n%s", path, s.Addr, err, s.Output())
	}
	return nil
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 64<<10 {
		l.w.Reset() // only the tail matters, for a failing test
	}
	return l.w.Write(p)
}

// Output returns what the server printed, for diagnosing a failure.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *Server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	for {
		reply, err := s.Do("PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("exited before answering: %v", s.waitErr())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within %v: %v", startTimeout, err)
		}
	}
}

// Stop terminates the server by its process id, kills it if it does not
// exit within a few seconds, waits for it, and removes its files. It is
// safe to call more than once.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.stop()
	os.RemoveAll(s.dir)
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	childproc.Signal(cmd, false)
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		childproc.Signal(cmd, true)
		<-exited
	}
}

// Restart stops the server (SIGTERM: with appendonly yes it has written
// every acknowledged write), leaves it down for down, and starts it again
// on the same port and directory, so that it reloads what it persisted.
func (s *Server) Restart(down time.Duration) error {
	s.stop()
	time.Sleep(down)
	return s.start()
}

// Do sends one command on a connection of its own and returns the reply:
// the text of a simple or bulk string, an integer in decimal, or an error
// for an error reply. Arrays are not read; it is for setting servers up.
func (s *Server) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("redisserver: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redisserver: %s: %s", args[0], line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redisserver: %s: unexpected reply %q", args[0], line)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisserver: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
