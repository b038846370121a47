package samdeploy

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Config is what `sam deploy --config-env ENV` reads of samconfig.toml: the
// keys of [ENV.deploy.parameters], each one falling back to
// [ENV.global.parameters]. An environment never falls back to another one,
// as in SAM.
type Config struct {
	Env       string
	StackName string
	Region    string
	// S3Bucket is s3_bucket; with resolve_s3 and no s3_bucket, SAM makes a
	// bucket of its own, and so does Deploy.
	S3Bucket             string
	ResolveS3            bool
	S3Prefix             string
	Capabilities         []string
	ParameterOverrides   map[string]string
	Tags                 map[string]string
	ConfirmChangeset     bool
	FailOnEmptyChangeset bool
}

// ReadConfig reads environment env of the samconfig.toml at path.
func ReadConfig(path, env string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	tables, err := parseTOML(string(raw))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	envs := map[string]bool{}
	for name := range tables {
		e, _, _ := strings.Cut(name, ".")
		envs[e] = true
	}
	if !envs[env] {
		return Config{}, fmt.Errorf("%s has no environment %q; it has %s", path, env, strings.Join(slices.Sorted(maps.Keys(envs)), ", "))
	}
	deploy, global := tables[env+".deploy.parameters"], tables[env+".global.parameters"]
	var errs []error
	get := func(key string) (any, bool) {
		if v, ok := deploy[key]; ok {
			return v, true
		}
		v, ok := global[key]
		return v, ok
	}
	str := func(key string) string {
		v, ok := get(key)
		if !ok {
			return ""
		}
		s, ok := v.(string)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: [%s] %s: want a string", path, env, key))
		}
		return s
	}
	boolean := func(key string, def bool) bool {
		v, ok := get(key)
		if !ok {
			return def
		}
		b, ok := v.(bool)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: [%s] %s: want true or false", path, env, key))
		}
		return b
	}
	// A list value is a string of space-separated items or an array of
	// strings, each item parsed alike.
	items := func(key string) []string {
		v, ok := get(key)
		switch v := v.(type) {
		case nil:
			if ok {
				errs = append(errs, fmt.Errorf("%s: [%s] %s: want a string or an array of strings", path, env, key))
			}
			return nil
		case string:
			return []string{v}
		case []string:
			return v
		}
		errs = append(errs, fmt.Errorf("%s: [%s] %s: want a string or an array of strings", path, env, key))
		return nil
	}
	pairs := func(key string) map[string]string {
		out := map[string]string{}
		for _, s := range items(key) {
			m, err := ParseOverrides(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: [%s] %s: %w", path, env, key, err))
			}
			maps.Copy(out, m)
		}
		return out
	}
	c := Config{
		Env:                  env,
		StackName:            str("stack_name"),
		Region:               str("region"),
		S3Bucket:             str("s3_bucket"),
		ResolveS3:            boolean("resolve_s3", false),
		S3Prefix:             str("s3_prefix"),
		ParameterOverrides:   pairs("parameter_overrides"),
		Tags:                 pairs("tags"),
		ConfirmChangeset:     boolean("confirm_changeset", false),
		FailOnEmptyChangeset: boolean("fail_on_empty_changeset", true),
	}
	for _, s := range items("capabilities") {
		c.Capabilities = append(c.Capabilities, strings.Fields(s)...)
	}
	if c.StackName == "" {
		errs = append(errs, fmt.Errorf("%s: [%s] has no stack_name (in %[2]s.deploy.parameters or %[2]s.global.parameters)", path, env))
	}
	if c.S3Bucket == "" && !c.ResolveS3 {
		errs = append(errs, fmt.Errorf("%s: [%s] has neither s3_bucket nor resolve_s3 = true: nowhere to upload the code", path, env))
	}
	return c, errors.Join(errs...)
}

// ParseOverrides parses SAM's parameter_overrides and tags syntax:
// space-separated NAME=VALUE pairs, each VALUE bare, "double-quoted" (\"
// and \\ escaped) or 'single-quoted'; NAME may be quoted too. A later pair
// overrides an earlier one with the same name.
func ParseOverrides(s string) (map[string]string, error) {
	out := map[string]string{}
	rest := s
	for {
		rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
		if rest == "" {
			return out, nil
		}
		name, after, err := overrideWord(rest, true)
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(after, "=") || name == "" {
			return nil, fmt.Errorf("%q: want NAME=VALUE pairs separated by spaces", s)
		}
		value, after, err := overrideWord(after[1:], false)
		if err != nil {
			return nil, err
		}
		if after != "" && !unicode.IsSpace(rune(after[0])) {
			return nil, fmt.Errorf("%q: want a space after the value of %s", s, name)
		}
		out[name], rest = value, after
	}
}

// overrideWord reads a quoted or bare word at the start of s and returns it
// and what follows it; a bare name ends at "=", a bare value at a space.
func overrideWord(s string, name bool) (word, rest string, err error) {
	if s != "" && (s[0] == '"' || s[0] == '\'') {
		q := s[0]
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			switch {
			case s[i] == q:
				return b.String(), s[i+1:], nil
			case q == '"' && s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
				i++
			}
			b.WriteByte(s[i])
		}
		return "", "", fmt.Errorf("%s: unterminated quote", s)
	}
	end := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (name && r == '=') })
	if end < 0 {
		end = len(s)
	}
	return s[:end], s[end:], nil
}

// parseTOML parses the part of TOML that samconfig.toml files use: tables
// ([a.b.c], bare keys), and key = value lines whose value is a string
// ("basic" or 'literal'), true or false, an integer, a float or a one-line
// array of strings, with # comments. Anything else is an error naming its
// line, never a guess. It returns the keys of each table by its dotted
// name; integers and floats are kept as text.
func parseTOML(src string) (map[string]map[string]any, error) {
	tables := map[string]map[string]any{}
	var current map[string]any
	for n, line := range strings.Split(src, "\n") {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d: %s (samconfig.toml is read as a subset of TOML: tables, and keys whose values are strings, booleans, numbers or one-line arrays of strings)", n+1, fmt.Sprintf(format, args...))
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if strings.HasPrefix(line, "[[") || end < 0 || !isComment(line[end+1:]) {
				return nil, fail("%q is not a [table] header", line)
			}
			name := line[1:end]
			for _, part := range strings.Split(name, ".") {
				if !bareKey(strings.TrimSpace(part)) {
					return nil, fail("table name %q", name)
				}
			}
			name = strings.ReplaceAll(name, " ", "")
			if tables[name] != nil {
				return nil, fail("table [%s] appears twice", name)
			}
			current = map[string]any{}
			tables[name] = current
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !bareKey(key) {
			return nil, fail("want key = value")
		}
		v, rest, err := tomlValue(strings.TrimSpace(value))
		if err != nil {
			return nil, fail("%s: %v", key, err)
		}
		if !isComment(rest) {
			return nil, fail("%s: unexpected %q after the value", key, rest)
		}
		if key == "version" && current == nil {
			continue // the file's format version, before any table
		}
		if current == nil {
			return nil, fail("key %s before any [table]", key)
		}
		if _, dup := current[key]; dup {
			return nil, fail("key %s appears twice in its table", key)
		}
		current[key] = v
	}
	return tables, nil
}

func isComment(s string) bool {
	s = strings.TrimSpace(s)
	return s == "" || s[0] == '#'
}

func bareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// tomlNumber is an integer or a float, as written: samconfig.toml's keys
// take none (but version, which is skipped).
type tomlNumber string

// tomlValue reads one value at the start of s and returns it and the rest
// of the line.
func tomlValue(s string) (any, string, error) {
	switch {
	case s == "":
		return nil, "", errors.New("no value")
	case s[0] == '"' || s[0] == '\'':
		return tomlString(s)
	case s[0] == '[':
		var out []string
		rest := strings.TrimSpace(s[1:])
		for {
			if strings.HasPrefix(rest, "]") {
				return out, rest[1:], nil
			}
			if rest == "" || (rest[0] != '"' && rest[0] != '\'') {
				return nil, "", errors.New("want a one-line array of strings")
			}
			v, after, err := tomlString(rest)
			if err != nil {
				return nil, "", err
			}
			out = append(out, v)
			rest = strings.TrimSpace(after)
			if strings.HasPrefix(rest, ",") {
				rest = strings.TrimSpace(rest[1:])
			} else if !strings.HasPrefix(rest, "]") {
				return nil, "", errors.New("want , or ] after an array item")
			}
		}
	}
	end := strings.IndexAny(s, " \t#")
	if end < 0 {
		end = len(s)
	}
	word, rest := s[:end], s[end:]
	switch word {
	case "true":
		return true, rest, nil
	case "false":
		return false, rest, nil
	}
	if _, err := strconv.ParseFloat(strings.ReplaceAll(word, "_", ""), 64); err == nil {
		return tomlNumber(word), rest, nil
	}
	return nil, "", fmt.Errorf("%q is not a string, a boolean, a number or an array of strings", word)
}

// tomlString reads a one-line basic ("...") or literal ('...') string.
func tomlString(s string) (string, string, error) {
	if strings.HasPrefix(s, `"""`) || strings.HasPrefix(s, "'''") {
		return "", "", errors.New("multi-line strings are not read")
	}
	if s[0] == '\'' {
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			return "", "", errors.New("unterminated string")
		}
		return s[1 : 1+end], s[2+end:], nil
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), s[i+1:], nil
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			break
		}
		i++
		switch s[i] {
		case '"', '\\':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'u', 'U':
			size := map[byte]int{'u': 4, 'U': 8}[s[i]]
			if i+size >= len(s) {
				return "", "", errors.New("short \\u escape")
			}
			r, err := strconv.ParseUint(s[i+1:i+1+size], 16, 32)
			if err != nil {
				return "", "", fmt.Errorf("bad escape \\%c%s", s[i], s[i+1:i+1+size])
			}
			b.WriteRune(rune(r))
			i += size
		default:
			return "", "", fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return "", "", errors.New("unterminated string")
}
