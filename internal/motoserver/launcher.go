package motoserver

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// versionPrefix starts the launcher's line naming the moto it found
// (VERSION in launcher.py), followed by the version.
const versionPrefix = "lambdakit-moto: moto version "

// supportedMoto is the moto versions the launcher patches, SUPPORTED_MOTO
// in launcher.py, read from the embedded source so that the two cannot
// disagree. The Makefile pins one of them for `make deps`.
var supportedMoto = func() []string {
	m := regexp.MustCompile(`(?m)^SUPPORTED_MOTO = \(([^)]*)\)`).FindStringSubmatch(launcherSource)
	if m == nil {
		panic("motoserver: launcher.py has no SUPPORTED_MOTO line")
	}
	var versions []string
	for _, v := range regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(m[1], -1) {
		versions = append(versions, v[1])
	}
	if len(versions) == 0 {
		panic("motoserver: launcher.py's SUPPORTED_MOTO names no version")
	}
	return versions
}()

// pipRequirement is what to ask pip for: the last supported moto listed.
func pipRequirement() string {
	return "moto[server]==" + supportedMoto[len(supportedMoto)-1]
}

// foundVersion returns the moto version the launcher reported in out (its
// versionPrefix line), or "" when it reported none (moto not importable
// from its Python, or no launcher).
func foundVersion(out string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), versionPrefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// versionWarning returns the line that warns about moto found, the
// version of the moto_server at server, when it is not one the launcher
// supports, or "" when it is (or when the version is not known).
func versionWarning(found, server string) string {
	if found == "" || slices.Contains(supportedMoto, found) {
		return ""
	}
	if found == "unknown" {
		found = "of an unknown version"
	}
	return fmt.Sprintf("lambdakit-moto: warning: moto %s found (%s), but lambdakit's local stack supports moto %s: "+
		"running plain moto, whose transactions copy whole tables and slow down as the tables grow. "+
		"Install the supported one: pip install '%s' for that moto_server, or rm -rf .venv && make deps for the project's .venv.",
		found, server, strings.Join(supportedMoto, ", "), pipRequirement())
}

// command is how to run moto's server: its flags (-H, -p) follow args.
type command struct {
	// server is the moto_server of the installation, for messages.
	server string
	path   string
	args   []string
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
		return command{server: moto.server, path: moto.server, notice: fallbackPrefix + " (moto_server): no python3 to run the launcher with, and " + moto.server + " does not name its Python"}
	}
	return command{server: moto.server, path: moto.python, args: []string{"-"}, script: launcherSource}
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
