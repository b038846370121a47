package motoserver

import (
	"bufio"
	_ "embed"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// launcherSource is launcher.py: it patches moto so that TransactWriteItems
// snapshots only the items it writes instead of deep-copying every table it
// names (which makes each transaction slower as the tables grow), then runs
// moto's own server. See the file for what it changes and when it runs plain
// moto instead.
//
//go:embed launcher.py
var launcherSource string

// fallbackPrefix starts the one line the launcher prints when it runs plain
// moto (FALLBACK in launcher.py); Start copies that line to os.Stderr, so
// that whoever started moto learns why it slows down.
const fallbackPrefix = "lambdakit-moto: running plain moto"

// command is how to run moto's server: its flags (-H, -p) follow args.
type command struct {
	path string
	args []string
	// script, when set, is the Python program fed to path on standard
	// input ("python3 - -H ... -p ...").
	script string
	// notice is a line for os.Stderr when plain moto_server runs for a
	// reason known before it starts.
	notice string
}

// newCommand runs moto's server through the launcher, with the Python of
// moto's installation, or plain moto_server when there is no Python to run
// the launcher with.
func newCommand(moto installation) command {
	if moto.python == "" {
		return command{path: moto.server, notice: fallbackPrefix + " (moto_server): no python3 to run the launcher with, and " + moto.server + " does not name its Python"}
	}
	return command{path: moto.python, args: []string{"-"}, script: launcherSource}
}

// shebangPython returns the Python named by the #! line of the script at
// path ("#!/venv/bin/python" or "#!/usr/bin/env python3"), or "" when the
// line names none that exists.
func shebangPython(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, 512)).ReadString('\n')
	if err != nil && line == "" || !strings.HasPrefix(line, "#!") {
		return ""
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) >= 2 && filepath.Base(fields[0]) == "env" {
		fields = fields[1:]
	}
	if len(fields) == 0 || !strings.HasPrefix(filepath.Base(fields[0]), "python") {
		return ""
	}
	p, err := exec.LookPath(fields[0])
	if err != nil {
		return ""
	}
	return p
}

// fallbackLine returns the launcher's line announcing plain moto in out, if
// there is one.
func fallbackLine(out string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, fallbackPrefix) {
			return strings.TrimRight(line, "\r\n")
		}
	}
	return ""
}
